"""count_crashes under concurrency: several workers claim one row-lock table at once, every handler
acks at once, and each job is counted exactly once; none goes to the dead letters (real
PostgreSQL and MariaDB)."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from pathlib import Path
from typing import Any

import pytest
from dbcases import Layout, MakeQueue, Queue, keys_left_once_dry, pg_advisory_locks
from genutil import import_path
from limits_util import run_until

from inboxgen import Worker
from inboxgen.runtime.forms.row_lock import claim_takes_keys

JOBS = 300
WORKERS = 3  # workers on the table at once, each with SLOTS slots
SLOTS = 4


async def drain(q: Queue, delivered: list[Any], descriptor: Any = None, batch: int = 1) -> None:
    async def ack(job: Any) -> None:
        delivered.append(job.id)

    workers = [Worker(descriptor or q.mod.DESCRIPTOR, ack, database=q.target, group="g",
                      workers=SLOTS, batch=batch,
                      poll_interval=0.05, shutdown_timeout=10, name=f"w{i}")
               for i in range(WORKERS)]
    for w in workers:
        await w.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            rows = await asyncio.to_thread(q.rows)
            if all(r["processed_at"] is not None or r["grp"] == "dead" for r in rows):
                break
            await asyncio.sleep(0.2)
    finally:
        for w in workers:
            await w.shutdown()


@pytest.mark.parametrize(("dialect", "built_before", "batch"),
                         [("postgres", False, 1), ("mysql", False, 1), ("mysql", True, 1),
                          ("postgres", False, 8), ("mysql", False, 8)])
def test_concurrent_counted_claims_count_each_delivery_once_and_dead_letter_nothing(
        queue: MakeQueue, dialect: str, built_before: bool, batch: int) -> None:
    """`built_before`: the workers run the module an earlier release built for the same table
    (built_before/), whose count takes the rows' keys: this release still runs it exactly.
    At batch 8 each worker settles batches beside the other workers' claims."""
    q = queue(dialect, Layout("row_lock", group=True, count_crashes=True, dead="group"))
    descriptor = None
    if built_before:
        old = import_path(Path(__file__).parent / "built_before" / "my_counted_jobs.py",
                          "_inboxgen_built_before_my_counted_jobs")
        descriptor = old.DESCRIPTOR
        assert not claim_takes_keys(descriptor) and claim_takes_keys(q.mod.DESCRIPTOR)
    conn = q.connect()
    due = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    q.mod.insert_many(conn, [q.new(grp="g", retry_after=due) for _ in range(JOBS)])
    conn.commit()
    delivered: list[Any] = []
    asyncio.run(drain(q, delivered, descriptor, batch))
    rows = q.rows()
    dead = [r for r in rows if r["grp"] == "dead"]
    assert dead == [], f"{len(dead)} healthy jobs dead-lettered, attempts " \
                       f"{sorted({r['attempt'] for r in dead})}"
    assert all(r["processed_at"] is not None for r in rows)
    assert sorted(delivered) == sorted(r["id"] for r in rows)  # each delivered once
    # The attempt starts at 1 (the DDL default) and is counted once, at the one delivery.
    assert {r["attempt"] for r in rows} == {2}


@pytest.mark.parametrize("transactional", [False, True])
def test_counted_rows_of_a_stopped_worker_on_a_user_pool_are_free_at_once(
        queue: MakeQueue, transactional: bool) -> None:
    """A worker stopped while its jobs run gives its connections back to the user's pool
    without the counted rows' keys: another worker claims those rows at once (the attempt
    spent), where keys left on a pooled connection would hide them from every other claim
    until that connection closed."""
    from psycopg_pool import AsyncConnectionPool

    q = queue("postgres", Layout("row_lock", group=True, count_crashes=True, dead="group"))
    conn = q.connect()
    due = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    q.mod.insert_many(conn, [q.new(grp="g", retry_after=due) for _ in range(2)])
    conn.commit()
    started = asyncio.Event()

    async def stuck(job: Any) -> None:
        started.set()
        await asyncio.sleep(3600)

    later: list[Any] = []

    async def ack(job: Any) -> None:
        later.append(job.id)

    async def run() -> None:
        pool = AsyncConnectionPool(q.target, min_size=1, max_size=4, open=False)
        await pool.open()
        try:
            first = Worker(q.mod.DESCRIPTOR, stuck, pool=pool, group="g", workers=1, batch=2,
                           transactional=transactional, shutdown_timeout=0.2, name="first")
            await first.start()
            await asyncio.wait_for(started.wait(), 10)
            await first.shutdown()
            # The pool stays open, with whatever its connections still hold.
            second = Worker(q.mod.DESCRIPTOR, ack, database=q.target, group="g", workers=1,
                            batch=2, poll_interval=0.05, name="second")
            await second.start()
            deadline = time.monotonic() + 10
            while len(later) < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            await second.shutdown()
        finally:
            await pool.close()

    asyncio.run(run())
    assert len(later) == 2
    assert {r["attempt"] for r in q.rows()} == {3}  # both deliveries counted


def _key_sql(q: Queue, id_sql: str) -> str:
    """The lock key a counted claim takes for the row whose id `id_sql` gives."""
    if q.mysql:
        return f"SHA2(CONCAT(DATABASE(), '.', 'inboxgen:{q.mod.TABLE}:', {id_sql}), 256)"
    return f"hashtextextended('inboxgen:{q.mod.TABLE}:' || {id_sql}::text, 0)"


def _key_free(q: Queue, row_id: Any) -> bool:
    """Whether another session can take the key a counted claim locks for row `row_id`."""
    key = _key_sql(q, "%s")
    with q.connect(autocommit=True) as conn:
        if q.mysql:
            cur = conn.cursor()
            cur.execute(f"SELECT IS_FREE_LOCK({key})", (row_id,))
            return bool(cur.fetchone()[0])
        (free,) = conn.execute(f"SELECT pg_try_advisory_lock({key})", (row_id,)).fetchone()
        if free:
            conn.execute(f"SELECT pg_advisory_unlock({key})", (row_id,))
        return bool(free)


def _keys_held(q: Queue) -> int:
    """How many keys some session holds: on MySQL, of the table's rows."""
    if not q.mysql:
        return pg_advisory_locks(q.target)
    with q.connect(autocommit=True) as conn:
        cur = conn.cursor()
        cur.execute(f"SELECT COUNT(*) FROM {q.table_sql()} "
                    f"WHERE IS_USED_LOCK({_key_sql(q, q.id_column)}) IS NOT NULL")
        return int(cur.fetchone()[0])


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("dialect", ["postgres", "mysql"])
def test_counted_keys_are_unlocked_for_retries_at_once_and_for_finished_rows_by_the_idle(
        queue: MakeQueue, dialect: str, batch: int) -> None:
    """A slot may unlock the keys of finished rows some rounds later (no claim reads them
    again), a bounded number of them; a row it retries must be free to every other worker
    once the retry commits, and a slot that ran dry holds no key."""
    from inboxgen import retry_after
    from inboxgen.runtime.forms.row_lock import FINISHED_KEYS_KEPT

    q = queue(dialect, Layout("row_lock", group=True, count_crashes=True, dead="group"))
    conn = q.connect()
    due = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    q.mod.insert_many(conn, [q.new(grp="g", retry_after=due) for _ in range(120)])
    conn.commit()
    ids = q.ids()
    retried = ids[0]
    free_after_retry: list[bool] = []
    most_held = 0

    def handler(job: Any) -> Any:
        nonlocal most_held
        most_held = max(most_held, _keys_held(q))
        if job.id == retried:
            return retry_after(3600)  # not due again while the test runs
        if job.id == ids[10]:  # some rounds after the retry's, fewer than the keys kept
            free_after_retry.append(_key_free(q, retried))
        return None

    worker = Worker(q.mod.DESCRIPTOR, handler, database=q.target, group="g", workers=1,
                    batch=batch, poll_interval=0.05, listen=False)

    def settled(rows: list[dict[str, Any]]) -> bool:
        return sum(r["processed_at"] is None for r in rows) == 1  # the retried one is left

    # The slot ran dry and waits: it holds no key of any row.
    assert asyncio.run(keys_left_once_dry(worker, q.rows, settled, lambda: _keys_held(q))) == 0
    assert free_after_retry == [True]
    # In work and finished, never more than the slot's batch and the finished keys it keeps.
    assert most_held <= FINISHED_KEYS_KEPT + 2 * batch


def test_a_counted_claim_that_sorts_leaves_the_rows_it_did_not_return_to_others(
        queue: MakeQueue) -> None:
    """MySQL's counted claim takes the keys of the rows it returns as it reads them. On a table
    without the claim-order index (the build warns) it sorts the due rows: it must still take
    only the keys of the rows it returns, or one worker would hide the whole queue from every
    other until its next RELEASE."""
    layout = Layout("row_lock", group=True, count_crashes=True, dead="group")
    ddl = "\n".join(line for line in layout.ddl("mysql").splitlines()
                    if "jobs_claim" not in line)
    q = queue("mysql", spec=layout.spec("mysql"), ddl=ddl)
    conn = q.connect()
    due = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    q.mod.insert_many(conn, [q.new(grp="g", priority=i % 3, retry_after=due) for i in range(20)])
    conn.commit()
    with conn.cursor() as cur:  # (the claim's plan, as the worker's claim runs it)
        params = dict.fromkeys(q.mod.DESCRIPTOR.statement_params["CLAIM"])  # from the head
        params.update(group="g", now=due.replace(tzinfo=None), limit=2,
                      row_key=f"inboxgen:{q.mod.TABLE}:")
        cur.execute("EXPLAIN " + q.mod.CLAIM, params)
        assert "filesort" in str(cur.fetchall())
    first = q.claim(conn, now=dt.datetime.now(dt.UTC), limit=2)
    conn.commit()
    assert len(first) == 2 and _keys_held(q) == 2
    other = q.connect()
    rest = q.claim(other, now=dt.datetime.now(dt.UTC), limit=50)
    other.commit()
    assert len(rest) == 18 and not {r.id for r in rest} & {r.id for r in first}
    # Claimed in claim order all the same: the most urgent rows first.
    assert sorted(r.priority for r in first) == [0, 0]


def test_a_counted_batch_that_fails_midway_reports_only_the_settlements_it_lost(
        queue: MakeQueue, caplog: pytest.LogCaptureFixture) -> None:
    """MySQL's counted rounds run in autocommit mode, each settlement statement committed on its
    own: when a batch's second settlement fails, the first has committed. Only the rows whose
    settlements did not commit are reported lost (and run again); a finished row is not."""
    from inboxgen import retry_after

    q = queue("mysql", Layout("row_lock", group=True, count_crashes=True, dead="group"))
    conn = q.connect()
    due = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    q.mod.insert_many(conn, [q.new(grp="g", retry_after=due) for _ in range(2)])
    conn.commit()
    finished, retried = q.ids()
    with conn.cursor() as cur:  # the server refuses every retry of the table's rows
        cur.execute(f"CREATE TRIGGER no_retry BEFORE UPDATE ON {q.table_sql()} FOR EACH ROW "
                    "IF NEW.retry_after > OLD.retry_after THEN "
                    "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'no retries here'; END IF")
    conn.commit()

    def handler(job: Any) -> Any:
        return retry_after(3600) if job.id == retried else None

    worker = Worker(q.mod.DESCRIPTOR, handler, database=q.target, group="g", workers=1,
                    batch=2, poll_interval=0.05, listen=False)

    lost = serve_until_a_batch_is_lost(worker, caplog)
    assert lost and f"row(s) {retried} were lost" in lost[0], lost
    rows = {r["id"]: r for r in q.rows()}
    assert rows[finished]["processed_at"] is not None  # its settlement committed
    assert rows[retried]["processed_at"] is None


@pytest.mark.parametrize("counted", [True, False])
def test_a_postgres_batch_whose_ack_is_refused_is_reported_with_the_servers_error(
        queue: MakeQueue, caplog: pytest.LogCaptureFixture, counted: bool) -> None:
    """A pipelined PostgreSQL row lock's batch of acks is one statement (FINISH_MANY): where
    the server refuses one row's delete (a trigger, say), no row of the batch is finished, and
    the batch is reported lost with the server's error (its rows run again), where the report
    named a closed connection (psycopg closes the connection of a failed pipeline)."""
    q = queue("postgres", Layout("row_lock", group=True, count_crashes=counted, dead="group",
                                 processed=False))
    assert "FINISH_MANY" in q.mod.STATEMENTS
    conn = q.connect()
    due = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    q.mod.insert_many(conn, [q.new(grp="g", retry_after=due) for _ in range(3)])
    conn.commit()
    first, refused, third = q.ids()
    with conn.cursor() as cur:  # the server refuses to delete the second row
        cur.execute("CREATE FUNCTION keep_one() RETURNS trigger LANGUAGE plpgsql AS $$ "
                    f"BEGIN IF OLD.id = {refused} THEN RAISE EXCEPTION 'kept by a trigger'; "
                    "END IF; RETURN OLD; END $$")
        cur.execute(f"CREATE TRIGGER keep_one BEFORE DELETE ON {q.table_sql()} "
                    "FOR EACH ROW EXECUTE FUNCTION keep_one()")
    conn.commit()

    async def ack(job: Any) -> None:
        return None

    worker = Worker(q.mod.DESCRIPTOR, ack, database=q.target, group="g", workers=1, batch=3,
                    poll_interval=0.05, listen=False)

    lost = serve_until_a_batch_is_lost(worker, caplog)
    assert lost and f"row(s) {first}, {refused}, {third} were lost" in lost[0], lost
    assert "kept by a trigger" in lost[0]
    assert sorted(r["id"] for r in q.rows()) == [first, refused, third]


def serve_until_a_batch_is_lost(worker: Worker, caplog: pytest.LogCaptureFixture) -> list[str]:
    """Run `worker` until it has lost a batch's settlements; the ERROR lines saying so."""
    with caplog.at_level("ERROR", logger="inboxgen"):
        run_until(worker, lambda: worker.stats.settlements_lost > 0, 30, lambda: worker.stats)
    return [r.getMessage() for r in caplog.records if "were lost" in r.getMessage()]


def test_a_counted_batch_whose_settlements_lose_a_deadlock_settles_each_row_once(
        queue: MakeQueue, caplog: pytest.LogCaptureFixture) -> None:
    """MySQL's counted batch settles its rows in one transaction. Where the server rolls that
    back (a deadlock with another session's claim; here a trigger raises one at the session's
    first delete), each settlement runs again on its own: no job runs twice, none is lost."""
    q = queue("mysql", Layout("row_lock", group=True, count_crashes=True, dead="group",
                              processed=False))
    conn = q.connect()
    due = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    q.mod.insert_many(conn, [q.new(grp="g", retry_after=due) for _ in range(8)])
    conn.commit()
    ids = q.ids()
    with conn.cursor() as cur:
        cur.execute(f"CREATE TRIGGER lose_once BEFORE DELETE ON {q.table_sql()} FOR EACH ROW "
                    "IF @inboxgen_lost IS NULL THEN SET @inboxgen_lost = 1; "
                    "SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213, "
                    "MESSAGE_TEXT = 'Deadlock found when trying to get lock'; END IF")
    conn.commit()
    delivered: list[Any] = []

    def ack(job: Any) -> None:
        delivered.append(job.id)

    worker = Worker(q.mod.DESCRIPTOR, ack, database=q.target, group="g", workers=1, batch=4,
                    poll_interval=0.05, listen=False)
    with caplog.at_level("DEBUG", logger="inboxgen"):
        run_until(worker, lambda: not q.rows(), 30, lambda: (delivered, q.rows()))
    assert any("failed together" in r.getMessage() for r in caplog.records)
    assert sorted(delivered) == sorted(ids)  # each once
    assert worker.stats.settlements_lost == 0
