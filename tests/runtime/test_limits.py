"""Limits in the claim ([flow] concurrency, key and key_concurrency, and rate, lease form): one
claim keeps to them, four worker processes of ten slots never exceed them, a holder that dies
holds its seat until its lease ends, then frees it, and a rate's window is judged by the
database's clock."""

from __future__ import annotations

import asyncio
import datetime as dt
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from dbcases import Layout, MakeQueue, Queue
from limits_util import (
    add,
    claim,
    intervals,
    most_at_once,
    run_until,
    runs_per_account,
    settle,
    start_workers,
    stop_workers,
)

from inboxgen import Job, Worker

UTC = dt.UTC
WORKER_SCRIPT = Path(__file__).resolve().parents[1] / "process_worker.py"
REPO = Path(__file__).resolve().parents[2]

DIALECTS = ["postgres", "mysql", "sqlite"]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_one_claim_keeps_to_the_queue_and_key_limits(queue: MakeQueue, dialect: str) -> None:
    """A claim of ten rows takes as many as the limits leave room for: at most two of one
    account, at most five in all; the next claim takes what the first left room for."""
    q = queue(dialect, Layout(form="lease", processed=False, concurrency=5,
                              key_concurrency=2))
    ids = add(q, ["a"] * 4 + ["b"] * 4 + ["c"] * 4)
    conn = q.connect()
    try:
        first = claim(q, conn, 10)
        accounts = [r.account for r in first]
        assert [r.id for r in first] == [ids[0], ids[1], ids[4], ids[5], ids[8]]
        assert accounts == ["a", "a", "b", "b", "c"]
        assert claim(q, conn, 10) == []  # five in work: the queue is full
    finally:
        conn.close()


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_key_at_its_limit_leaves_the_others_free(queue: MakeQueue, dialect: str) -> None:
    """A key's jobs in work hold back that key's rows alone: the claim passes over them to the
    next key's, in claim order."""
    q = queue(dialect, Layout(form="lease", processed=False, key_concurrency=1))
    ids = add(q, ["a", "a", "a", "b", "b"])
    conn = q.connect()
    try:
        assert [r.id for r in claim(q, conn, 1)] == [ids[0]]
        assert [r.id for r in claim(q, conn, 5)] == [ids[3]]
        assert claim(q, conn, 5) == []
        # a's job settles: a's next row is free again.
        first = q.mod.state(conn, id=ids[0], now=dt.datetime.now(UTC))
        assert first.state == "in_work"
        q.db.exec(f"DELETE FROM jobs WHERE id = {ids[0]}")
        assert [r.id for r in claim(q, conn, 5)] == [ids[1]]
    finally:
        conn.close()


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_row_passed_over_at_its_keys_limit_runs_once_its_key_has_room(queue: MakeQueue,
                                                                      dialect: str) -> None:
    """Account a's second job stands behind its first, which runs for a second under a limit of
    one, and ahead of 400 other accounts' jobs, which keep every claim full. The worker's claims
    pass over it while a's first job runs (on PostgreSQL and MariaDB they go on from the last
    row claimed), and start it within a few seconds of that job's end, long before the backlog
    behind it is done: a claim that passed over a row goes back to it."""
    q = queue(dialect, Layout(form="lease", processed=False, key_concurrency=1))
    first, second = add(q, ["a", "a"])
    others = add(q, [f"t{n}" for n in range(400)])
    started: dict[int, float] = {}
    ended: dict[int, float] = {}

    async def handler(job: Job[Any]) -> None:
        started[job.id] = time.monotonic()
        await asyncio.sleep(1.0 if job.id == first else 0.02)
        ended[job.id] = time.monotonic()

    worker = Worker(q.mod.DESCRIPTOR, handler, database=q.database, workers=2, batch=1,
                    poll_interval=0.05, listen=False)
    run_until(worker, lambda: not q.ids(), 120, lambda: len(q.ids()))
    assert worker.stats.acked == len(others) + 2
    assert started[second] >= ended[first]  # never two of a at once
    assert started[second] - ended[first] < 3.0
    # The backlog went on well after a's second job started.
    assert sum(started[i] > started[second] for i in others) >= 100


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_full_queue_claims_again_as_its_own_jobs_settle(queue: MakeQueue,
                                                          dialect: str) -> None:
    """A worker of ten slots on a queue limited to two in work, polling once a minute: each
    settlement it writes frees a seat and has it claim again, so it drains without waiting
    for a poll, never running more than two at once."""
    q = queue(dialect, Layout(form="lease", processed=False, concurrency=2))
    ids = add(q, [f"a{n}" for n in range(12)])
    running: set[int] = set()
    most = 0

    async def handler(job: Job[Any]) -> None:
        nonlocal most
        running.add(job.id)
        most = max(most, len(running))
        await asyncio.sleep(0.01)
        running.discard(job.id)

    worker = Worker(q.mod.DESCRIPTOR, handler, database=q.database, workers=10,
                    poll_interval=60.0, listen=False)
    run_until(worker, lambda: not q.ids(), 30, q.ids)
    assert worker.stats.acked == len(ids)
    assert most == 2


def recorded(q: Queue) -> int:
    (row,) = q.db.rows("SELECT COUNT(*) FROM jobs_claims")
    return int(row[0])


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_rate_takes_no_more_claims_in_its_window(queue: MakeQueue, dialect: str) -> None:
    """Three claims a minute: a claim of ten takes three, the next none; each claim is recorded
    at the database's time, and the jobs left wait, ready, with their attempts uncounted."""
    q = queue(dialect, Layout(form="lease", processed=False, rate=(3, 60.0)))
    ids = add(q, ["a"] * 5)
    conn = q.connect()
    try:
        assert [r.id for r in claim(q, conn, 10)] == ids[:3]
        assert claim(q, conn, 10) == []
        assert recorded(q) == 3
        left = q.mod.state(conn, id=ids[3], now=dt.datetime.now(UTC))
        assert (left.state, left.attempt) == ("ready", 1)
    finally:
        conn.close()


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_rate_per_key_counts_each_keys_claims_apart(queue: MakeQueue, dialect: str) -> None:
    """Two claims a minute per account: a claim of ten takes two of each account, in claim
    order, and the next none; each record names its account."""
    q = queue(dialect, Layout(form="lease", processed=False, rate=(2, 60.0), rate_per_key=True))
    ids = add(q, ["a", "b", "a", "a", "b", "b", "c"])
    conn = q.connect()
    try:
        assert [r.id for r in claim(q, conn, 10)] == [ids[0], ids[1], ids[2], ids[4], ids[6]]
        assert claim(q, conn, 10) == []
        keys = sorted(r[0] for r in q.db.rows("SELECT claim_key FROM jobs_claims"))
        assert keys == ["a", "a", "b", "b", "c"]
    finally:
        conn.close()


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_rate_window_passes_by_the_database_clock(queue: MakeQueue, dialect: str) -> None:
    """Two claims in any second: once the second has passed on the database's clock the next
    two are taken, and the claims of the past window are forgotten (deleted) as they go."""
    q = queue(dialect, Layout(form="lease", processed=False, rate=(2, 1.0)))
    ids = add(q, ["a"] * 5)
    conn = q.connect()
    try:
        assert [r.id for r in claim(q, conn, 5)] == ids[:2]
        assert claim(q, conn, 5) == []
        time.sleep(1.2)
        assert [r.id for r in claim(q, conn, 5)] == ids[2:4]
        assert recorded(q) == 2  # the first window's two are gone
    finally:
        conn.close()


# -- four processes of ten slots ------------------------------------------------------------------

PROCESSES, SLOTS = 4, 10


@pytest.mark.parametrize("dialect", ["postgres", "mysql+pymysql", "sqlite"])
def test_four_processes_of_ten_slots_never_pass_the_limits(
        queue: MakeQueue, tmp_path: Path, dialect: str) -> None:
    """Forty slots over five accounts, a queue limit of six and two per account: at no instant
    are more than six jobs in work, or more than two of one account, and both limits are
    reached (they hold jobs back, not the whole queue). Every job runs exactly once."""
    q = queue(dialect, Layout(form="lease", processed=False, concurrency=6, key_concurrency=2))
    runs, per_account = runs_per_account(q, [tmp_path / f"w{n}.log" for n in range(PROCESSES)],
                                         [f"acct-{n % 5}" for n in range(150)], 0.03)
    assert most_at_once(runs) == 6
    assert max(most_at_once(r) for r in per_account.values()) == 2
    assert q.ids() == []


@pytest.mark.parametrize("dialect", ["postgres", "mysql+pymysql", "sqlite"])
def test_a_killed_holder_frees_its_seat_when_its_lease_ends(
        queue: MakeQueue, tmp_path: Path, dialect: str) -> None:
    """A queue limited to one job in work: its holder is SIGKILLed mid-job; another process
    starts nothing until the dead holder's lease ends, and then runs the rest."""
    lease = 3
    q = queue(dialect, Layout(form="lease", processed=False, concurrency=1))
    ids = add(q, ["a", "b", "c"])
    (holder_log, other_log) = (tmp_path / "holder.log", tmp_path / "other.log")
    (holder,) = start_workers(q, [holder_log], "crash", "--lease", str(lease), "--no-listen")
    try:
        settle(lambda: holder_log.exists() and "start " in holder_log.read_text())
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
        killed = time.monotonic()
        (other,) = start_workers(q, [other_log], "run", "--lease", str(lease), "--no-listen",
                                 "--poll-interval", "0.05")
        try:
            settle(lambda: other_log.exists()
                   and other_log.read_text().count("done ") >= len(ids))
        finally:
            other.send_signal(signal.SIGTERM)
            _, err = other.communicate(timeout=60)
            assert other.returncode == 0, err.decode()[-2000:]
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    runs = intervals([other_log])
    assert len(runs) == len(ids)  # the killed job too, once its lease ended
    first_start = min(start for start, _ in runs.values())
    # The seat was held for the rest of the dead holder's lease (claimed before `killed`)...
    claimed = float(holder_log.read_text().split("start ", 1)[1].split()[2])
    assert first_start >= claimed + lease - 0.05
    # ...and no longer than a lease and a few polls past the kill.
    assert first_start <= killed + lease + 2.0
    assert most_at_once(list(runs.values())) == 1


# Every claim the rate table records, kept in claims_log by a trigger.
CLAIM_LOG = {
    "postgres": """
        CREATE TABLE claims_log (claimed_at TIMESTAMPTZ NOT NULL);
        CREATE FUNCTION keep_claim() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO claims_log VALUES (NEW.claimed_at);
            RETURN NULL;
        END $$;
        CREATE TRIGGER keep_claim AFTER INSERT ON jobs_claims
            FOR EACH ROW EXECUTE FUNCTION keep_claim();
    """,
    "mysql": """
        CREATE TABLE claims_log (claimed_at DATETIME(6) NOT NULL);
        CREATE TRIGGER keep_claim AFTER INSERT ON jobs_claims
            FOR EACH ROW INSERT INTO claims_log VALUES (NEW.claimed_at)
    """,
    "sqlite": """
        CREATE TABLE claims_log (claimed_at TEXT NOT NULL);
        CREATE TRIGGER keep_claim AFTER INSERT ON jobs_claims
        BEGIN
            INSERT INTO claims_log VALUES (NEW.claimed_at);
        END;
    """,
}


def aware(value: Any) -> dt.datetime:
    """A claim's time as the rate table holds it (SQLite: text), as an aware datetime."""
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


@pytest.mark.parametrize("dialect", ["postgres", "mysql+pymysql", "sqlite"])
def test_four_processes_of_ten_slots_keep_to_a_rate(
        queue: MakeQueue, tmp_path: Path, dialect: str) -> None:
    """Forty slots, 60 jobs, 20 claims a second: by the database's clock, no second holds more
    than 20 claims, and one holds 20; every job runs once. (A trigger keeps each claim the rate
    table records, which the claims themselves delete once their window has passed; the
    handlers' start stamps lag their claims by as much as the machine's load makes them.)"""
    q = queue(dialect, Layout(form="lease", processed=False, rate=(20, 1.0)))
    q.db.exec(CLAIM_LOG[q.db.dialect])
    ids = add(q, ["a"] * 60)
    logs = [tmp_path / f"w{n}.log" for n in range(PROCESSES)]
    children = start_workers(q, logs, "run", "--workers", str(SLOTS), "--no-listen",
                             "--poll-interval", "0.02")
    try:
        settle(lambda: all(log.exists() for log in logs)
               and sum(1 for log in logs for line in log.read_text().splitlines()
                       if line.startswith("done ")) >= len(ids))
    finally:
        stop_workers(children)
    runs = intervals(logs)
    assert sorted(runs) == sorted(str(i) for i in ids)
    claims = sorted(aware(t) for (t,) in q.db.rows("SELECT claimed_at FROM claims_log"))
    assert len(claims) == len(ids)
    # A claim counts the claims of the window that ends with it: (its time - 1 s, its time].
    second = dt.timedelta(seconds=1)
    busiest = max(sum(1 for t in claims if c - second < t <= c) for c in claims)
    assert busiest == 20
