"""A key-limited queue ([flow] key_concurrency, lease form) behind one key's backlog: the claim
reads past every waiting row of a key at its limit, so where the rows ahead in claim order are
that key's, a worker claims with CLAIM_BY_KEY, which walks the keys (the first rows of each)
instead; both keep to the limits."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from typing import Any

import pytest
from dbcases import Layout, MakeQueue, Queue, pg_index_blocks_read
from limits_util import add, claim, run_until

from inboxgen import Job, Worker, values
from inboxgen.runtime.limits import KEYS_WALK_FROM, LOOK_AHEAD

UTC = dt.UTC
DIALECTS = ["postgres", "mysql", "sqlite"]
BACKLOG = 3 * LOOK_AHEAD  # the big account's rows ahead of every other account's


@pytest.fixture(autouse=True)
def walks_from_the_first_key() -> None:
    values._KEY_TURNS.clear()  # a process keeps one place per walking statement


def held_back(q: Queue, conn: Any, limit: int) -> int:
    n: int = q.mod.held_back(conn, now=dt.datetime.now(UTC), limit=limit)
    conn.commit()
    return n


@pytest.mark.parametrize("dialect", DIALECTS)
def test_held_back_counts_the_rows_ahead_past_their_keys_limit(
        queue: MakeQueue, dialect: str) -> None:
    """Of the first `limit` due rows in claim order, HELD_BACK counts those past the first
    `key_concurrency` rows of their account (the rows a claim reads past while that account is
    at its limit), whether or not the account's jobs are in work at that instant; rows in work
    and rows behind the first `limit` are not counted."""
    q = queue(dialect, Layout(form="lease", processed=False, key_concurrency=1))
    add(q, ["a"] * 5 + ["b", "c", "a"])
    conn = q.connect()
    try:
        assert held_back(q, conn, 10) == 5  # a's rows after its first
        assert held_back(q, conn, 3) == 2  # a, a, a
        assert held_back(q, conn, 1) == 0
        claim(q, conn, 1)  # a's first is in work, a at its limit
        assert held_back(q, conn, 10) == 4  # a's four due rows past its next
        assert held_back(q, conn, 6) == 3  # a, a, a, a, b, c
    finally:
        conn.close()


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_claim_by_key_walks_the_keys_and_keeps_to_the_limits(
        queue: MakeQueue, dialect: str) -> None:
    """claim(by_key=True) walks the accounts: it passes over an account at its limit to the
    first rows of the next ones, takes no more of an account than its limit leaves room for,
    walks on from where the last claim stopped, and over fewer accounts than its limit takes
    several rows of each, in claim order within each."""
    q = queue(dialect, Layout(form="lease", processed=False, key_concurrency=2))
    ids = add(q, ["a"] * 6 + ["b"] * 3 + ["c"] * 3 + ["d"])
    a, b, c, d = ids[:6], ids[6:9], ids[9:12], ids[12]
    conn = q.connect()
    try:
        assert [r.id for r in claim(q, conn, 2)] == a[:2]  # the plain claim: a is full
        # a is passed over; b and c give two rows each, d its one.
        got = [r.id for r in claim(q, conn, 10, by_key=True)]
        assert got == [b[0], c[0], d, b[1], c[1]]
        assert claim(q, conn, 10, by_key=True) == []  # every account at its limit or done
        q.db.exec(f"DELETE FROM jobs WHERE id IN ({a[0]}, {b[0]})")  # two settle
        # One row a claim: the walk goes on after the account the last claim stopped at.
        assert [r.id for r in claim(q, conn, 1, by_key=True)] == [a[2]]
        assert [r.id for r in claim(q, conn, 1, by_key=True)] == [b[2]]
        assert claim(q, conn, 5, by_key=True) == []
    finally:
        conn.close()


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_worker_behind_one_keys_backlog_runs_the_other_keys_jobs(
        queue: MakeQueue, dialect: str) -> None:
    """One account's BACKLOG jobs stand first in claim order, its limit of one taken by a job
    that runs until the test ends; the forty jobs of other accounts enqueued after them all
    run, none of the big account's beside its one, and the worker claims by key to get there
    (its count found the LOOK_AHEAD rows ahead all the big account's)."""
    q = queue(dialect, Layout(form="lease", processed=False, key_concurrency=1))
    conn = q.connect()
    due = dt.datetime.now(UTC) - dt.timedelta(seconds=60)
    q.mod.insert_many(conn, [q.new(retry_after=due, account="big") for _ in range(BACKLOG)])
    conn.commit()
    conn.close()
    others = add(q, [f"t{n % 20}" for n in range(40)])
    ran: list[Any] = []
    hold = asyncio.Event()

    async def handler(job: Job[Any]) -> None:
        ran.append(job.id)
        if job.id not in others:
            await hold.wait()  # the big account's one job keeps its seat

    worker = Worker(q.mod.DESCRIPTOR, handler, database=q.database, workers=4, batch=4,
                    poll_interval=0.05, listen=False, lease=60.0, shutdown_timeout=1.0)

    def walking() -> bool:
        return bool(worker.form.keys.by_key)  # type: ignore[attr-defined]

    async def main() -> None:
        await worker.start()
        try:
            deadline = time.monotonic() + 60
            while not (set(others) <= set(ran) and walking()):
                assert time.monotonic() < deadline, f"{len(ran)} ran, walking: {walking()}"
                await asyncio.sleep(0.05)
        finally:
            hold.set()
            await worker.shutdown()

    assert KEYS_WALK_FROM <= LOOK_AHEAD < BACKLOG
    asyncio.run(main())
    big = [job for job in ran if job not in others]
    assert len(big) == 1, big  # the account's limit held throughout


def test_postgres_worker_behind_one_keys_backlog_reads_fewer_blocks_than_one_plain_claim(
        queue: MakeQueue) -> None:
    """Behind 30,000 waiting rows of an account at its limit, each plain claim reads past them
    all. The worker claims the other accounts' twenty jobs in ten claims or more (two slots
    of one row each), and those claims and its counts together read fewer index blocks than
    three plain claims would (as the server counts them)."""
    q = queue("postgres", Layout(form="lease", processed=False, key_concurrency=1))
    conn = q.connect()
    due = dt.datetime.now(UTC) - dt.timedelta(seconds=60)
    first = add(q, ["big"])[0]
    q.mod.insert_many(conn, [q.new(retry_after=due, account="big") for _ in range(30_000)])
    conn.commit()
    others = add(q, [f"t{n}" for n in range(20)])
    now = dt.datetime.now(UTC)
    conn.execute(f"UPDATE jobs SET locked_until = %s WHERE id = {first}",
                 (now + dt.timedelta(hours=1),))  # big's one seat, taken
    conn.execute("ANALYZE jobs")
    conn.execute("ALTER TABLE jobs SET (autovacuum_enabled = false)")  # its reads would count
    conn.commit()
    cur = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + q.mod.CLAIM, {
        "now": now, "limit": 1, "key_concurrency": 1, **values.FROM_THE_HEAD})
    ((plan,),) = cur.fetchall()
    conn.rollback()
    conn.close()
    one_plain_claim = int(plan[0]["Plan"]["Shared Hit Blocks"]
                          + plan[0]["Plan"]["Shared Read Blocks"])
    ran: list[Any] = []

    async def handler(job: Job[Any]) -> None:
        ran.append(job.id)

    before = pg_index_blocks_read(q.target, q.table_sql())
    worker = Worker(q.mod.DESCRIPTOR, handler, database=q.database, workers=2, batch=1,
                    poll_interval=3600, listen=False)
    run_until(worker, lambda: len(ran) >= len(others), 60, lambda: f"{len(ran)} ran")
    assert sorted(ran) == others  # big's rows wait for its seat
    read = pg_index_blocks_read(q.target, q.table_sql()) - before
    assert read < 3 * one_plain_claim, \
        f"{read} index blocks read to claim {len(others)} rows ({one_plain_claim} a plain claim)"
