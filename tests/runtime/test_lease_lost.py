"""LeaseLost: a holder whose lease ran out cannot settle a row another worker took, whether a
settlement or a renewal finds out, and the lost lease is counted once."""

from __future__ import annotations

import asyncio
import datetime as dt
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from dbcases import MakeQueue, sqlite_db, sqlite_rows, sqlite_time
from dbcases import example_module as example
from semantics_util import SECOND, fake_clock, messages, migration_sql

from inboxgen import Job, Outcome, Worker, ack
from inboxgen.runtime.outcomes import lease_expiry
from inboxgen.testing import run_until_idle

pytestmark = pytest.mark.usefixtures("log_inboxgen")


def test_lease_lost_on_sqlite_leaves_the_new_holders_row_alone(
        sqlite_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    reports = example("reports")
    db = sqlite_db(sqlite_path, migration_sql("reports"))
    reports.insert(db, reports.NewRow(payload=b"render"))
    clock = fake_clock()
    other = sqlite3.connect(sqlite_path, isolation_level=None, timeout=30)
    taken: dict[str, Any] = {}

    async def render(job: Job[bytes]) -> Outcome:
        # The holder was cut off longer than its lease: the lease is over, and another worker
        # (its own connection, a five-minute lease) claims the row and commits.
        now = clock.now()
        other.execute("UPDATE report_jobs SET locked_until = ? WHERE id = ?",
                      (sqlite_time(now - SECOND), job.id))
        token = lease_expiry(now, 300)
        other.execute("BEGIN IMMEDIATE")
        (row,) = reports.claim(other, now=now, locked_until=token, limit=1)
        other.execute("COMMIT")
        taken.update(row=row, token=token)
        return ack()  # too late: the row is no longer this worker's

    worker = Worker(reports.DESCRIPTOR, render, database=sqlite_path, clock=clock)
    asyncio.run(run_until_idle(worker, timeout=20))

    row, token = taken["row"], taken["token"]
    assert row.id == 1 and row.attempt == 2
    assert worker.stats.lease_lost == 1
    assert worker.stats.acked == 0
    assert any("row 1" in m for m in messages(caplog.records))
    # Unchanged: still held by the new holder, with its token and its attempt count.
    assert sqlite_rows(sqlite_path, "SELECT id, attempt, locked_until FROM report_jobs") == [
        (1, 3, sqlite_time(token))]
    other.execute("BEGIN IMMEDIATE")
    assert reports.finish(other, id=row.id, locked_until=token, attempt=row.attempt) is True
    other.execute("COMMIT")
    assert sqlite_rows(sqlite_path, "SELECT count(*) FROM report_jobs") == [(0,)]
    other.close()


def test_lease_lost_on_a_server_leaves_the_new_holders_row_alone(
        server_dialect: str, queue: MakeQueue, caplog: pytest.LogCaptureFixture) -> None:
    q = queue(server_dialect, "chat")
    db, chat = q.db, q.mod
    clock = fake_clock()
    with db.transaction() as conn:
        chat.insert(conn, chat.NewRow(conversation="c1", retry_after=clock.now() - SECOND,
                                      body="hello"))
    taken: dict[str, Any] = {}

    def deliver(job: Job[str]) -> Outcome:  # a sync handler: the fake clock stands still
        now = clock.now()
        with db.transaction() as other:
            db.execute(other, f"UPDATE {q.table} SET locked_until = %s WHERE {q.id_column} = %s",
                       (now - SECOND, job.id))
            token = lease_expiry(now, 300)
            (row,) = chat.claim(other, group="c1", now=now, locked_until=token)
        taken.update(row=row, token=token)
        return ack()

    worker = Worker(chat.DESCRIPTOR, deliver, database=db.database, group="c1", clock=clock,
                    listen=False)
    asyncio.run(run_until_idle(worker, timeout=20))

    row, token = taken["row"], taken["token"]
    assert row.MessageId == 1 and row.attempt == 2
    assert worker.stats.lease_lost == 1
    assert worker.stats.acked == 0
    assert any("row 1" in m for m in messages(caplog.records))
    assert db.rows(f"SELECT {q.id_column}, attempt, locked_until, body FROM {q.table}") == [
        (1, 3, token, "hello")]
    with db.transaction() as conn:
        assert chat.finish(conn, id=1, locked_until=token, attempt=row.attempt) is True
    assert db.rows(f"SELECT count(*) FROM {q.table}") == [(0,)]


def test_lease_lost_found_by_a_renewal_counts_once(
        lease_dialect: str, queue: MakeQueue, caplog: pytest.LogCaptureFixture) -> None:
    """The other way to find out: a renewal fails while the handler still runs. The job's ack then
    changes nothing, and the one lost lease is counted once."""
    q = queue(lease_dialect, "reports")
    db, reports = q.db, q.mod
    with db.transaction() as conn:
        reports.insert(conn, reports.NewRow(payload=b"render"))
    clock = fake_clock()
    token = lease_expiry(clock.now(), 3600)

    async def render(job: Job[bytes]) -> None:
        with db.transaction() as other:  # taken by another worker
            db.execute(other, f"UPDATE report_jobs SET locked_until = {db.p}, "
                              f"attempt = attempt + 1 WHERE id = {db.p}",
                       (db.time_param(token), job.id))
        await clock.sleep(45)  # the renewal at 30 s finds the row gone

    worker = Worker(reports.DESCRIPTOR, render, database=db.database, clock=clock)
    asyncio.run(run_until_idle(worker, timeout=20))

    assert worker.stats.renewed == 0
    assert worker.stats.acked == 0
    assert worker.stats.lease_lost == 1
    assert any("row 1" in m for m in messages(caplog.records))
    assert db.rows("SELECT id, attempt, locked_until FROM report_jobs") == [
        (1, 3, db.stored_time(token))]


def test_a_flush_whose_rows_were_all_taken_reads_them_a_few_at_a_time(
        queue: MakeQueue) -> None:
    """After a stall past their leases, a flush may find every row of its settlements taken:
    whether each row is gone is read before it is reported, and those reads wait their turn
    rather than open a connection each (MariaDB's worker opens connections as its tasks need
    them, and a thousand at once passes the server's limit)."""
    from dbcases import Layout

    q = queue("mysql", Layout("lease"))
    conn = q.connect()
    jobs = 100
    due = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    q.mod.insert_many(conn, [q.new(retry_after=due) for _ in range(jobs)])
    conn.commit()
    all_running = asyncio.Event()
    stolen = asyncio.Event()
    running = 0

    async def handler(job: Job[Any]) -> None:
        nonlocal running
        running += 1
        if running == jobs:
            all_running.set()
        await stolen.wait()

    def connections() -> int:
        with q.connect(autocommit=True) as other:
            cur = other.cursor()
            cur.execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST "
                        "WHERE DB = DATABASE() AND ID <> CONNECTION_ID()")
            return int(cur.fetchone()[0])

    worker = Worker(q.mod.DESCRIPTOR, handler, database=q.target, workers=jobs,
                    listen=False, poll_interval=0.05)

    async def main() -> int:
        await worker.start()
        try:
            await asyncio.wait_for(all_running.wait(), 30)
            # Another worker takes every row (a new lease, far off), then the handlers end.
            with q.connect(autocommit=True) as other:
                other.cursor().execute(f"UPDATE {q.table_sql()} "
                                       "SET locked_until = '2100-01-01 00:00:00'")
            stolen.set()
            deadline = asyncio.get_running_loop().time() + 30
            while worker.stats.lease_lost < jobs:
                assert asyncio.get_running_loop().time() < deadline, worker.stats
                await asyncio.sleep(0.05)
            return await asyncio.to_thread(connections)  # the worker's, kept until shutdown
        finally:
            await worker.shutdown()

    opened = asyncio.run(main())
    assert worker.stats.lease_lost == jobs
    assert opened <= 10, opened
