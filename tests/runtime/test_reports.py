"""The reports example (SQLite, and its twin on MariaDB): a five-minute render runs once under a
one-minute lease, renewed on a fake clock; only an expired lease comes back; a renewal that
fails once does not cost the lease."""

from __future__ import annotations

import asyncio
import datetime as dt
import sqlite3
from typing import Any

import pytest
from dbcases import Db, MakeQueue
from semantics_util import SECOND, fake_clock, messages

from inboxgen import Job, Worker
from inboxgen.testing import run_until_idle

pytestmark = pytest.mark.usefixtures("log_inboxgen")


def run_with_rival(worker: Worker, rival: Worker) -> None:
    """Run `worker` until it is idle; `rival`, which its handler starts, is shut down after."""
    async def main() -> None:
        try:
            await run_until_idle(worker, timeout=30)
        finally:
            if rival.started:
                await rival.shutdown()

    asyncio.run(main())


def test_reports_five_minute_render_runs_once_under_one_minute_lease(lease_dialect: str,
                                                                     queue: MakeQueue) -> None:
    q = queue(lease_dialect, "reports")
    db, reports = q.db, q.mod
    with db.transaction() as conn:
        reports.insert(conn, reports.NewRow(payload=b"quarterly"))
    clock = fake_clock()
    t0 = clock.now()
    deliveries: list[tuple[Any, int | None, bytes]] = []
    held: list[dt.datetime] = []

    def locked_until() -> dt.datetime:
        ((value,),) = db.rows("SELECT locked_until FROM report_jobs")
        return db.parse_time(value)

    async def render(job: Job[bytes]) -> None:
        deliveries.append((job.id, job.attempt, job.payload))
        held.append(locked_until())
        if not rival.started:
            await rival.start()
        await clock.sleep(300)  # five minutes of rendering
        held.append(locked_until())
        assert held[-1] > clock.now(), "the lease ran out while the render was running"

    worker = Worker(reports.DESCRIPTOR, render, database=db.database, clock=clock)
    assert worker.lease == 60
    # A second worker on the same table, started once the render is under way, polls every
    # five seconds of fake time: it must never get the render while it runs.
    rival_calls: list[Any] = []
    rival = Worker(reports.DESCRIPTOR, lambda job: rival_calls.append(job.id),
                   database=db.database, clock=clock, poll_interval=5)

    run_with_rival(worker, rival)

    assert deliveries == [(1, 1, b"quarterly")]
    assert rival_calls == []
    assert worker.stats.delivered == 1 and worker.stats.acked == 1
    assert worker.stats.lease_lost == 0
    assert worker.stats.renewed >= 9
    assert held[0] == t0 + dt.timedelta(seconds=60)
    assert held[1] >= t0 + dt.timedelta(seconds=300), "renewals moved the lease forward"
    elapsed = clock.now() - t0
    assert dt.timedelta(seconds=300) <= elapsed <= dt.timedelta(seconds=330)
    assert db.rows("SELECT count(*) FROM report_jobs") == [(0,)]


def test_reports_only_the_expired_lease_comes_back(lease_dialect: str, queue: MakeQueue) -> None:
    q = queue(lease_dialect, "reports")
    db, reports = q.db, q.mod
    clock = fake_clock()
    now = clock.now()
    # Two rows claimed by another process (its claim counted attempt 1 -> 2): one lease ran out
    # a second ago, the other has ten minutes to go.
    expired, live = now - SECOND, now + dt.timedelta(minutes=10)
    with db.transaction() as conn:
        db.execute(conn, f"INSERT INTO report_jobs (id, attempt, locked_until, payload) VALUES "
                         f"(1, 2, {db.p}, x'01'), (2, 2, {db.p}, x'02')",
                   (db.time_param(expired), db.time_param(live)))
    seen: list[tuple[Any, int | None, bytes]] = []

    def render(job: Job[bytes]) -> None:
        seen.append((job.id, job.attempt, job.payload))

    worker = Worker(reports.DESCRIPTOR, render, database=db.database, clock=clock)
    asyncio.run(run_until_idle(worker, timeout=20))

    assert seen == [(1, 2, b"\x01")]
    assert db.rows("SELECT id, attempt, locked_until FROM report_jobs") == [
        (2, 2, db.stored_time(live))]


def kill_sessions(db: Db) -> int:
    """MySQL: kill every other session on the test's database (a server restart or a network cut,
    as the worker's connections see it); how many."""
    conn = db.connect(autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT ID FROM information_schema.PROCESSLIST "
                        "WHERE DB = %s AND ID <> CONNECTION_ID()", [db.mysql_args["database"]])
            ids = [row[0] for row in cur.fetchall()]
            for session in ids:
                cur.execute(f"KILL CONNECTION {int(session)}")
    finally:
        conn.close()
    return len(ids)


def test_reports_lease_renewal_survives_a_transient_database_error(
        lease_dialect: str, queue: MakeQueue, caplog: pytest.LogCaptureFixture) -> None:
    """A renewal that fails once must not cost the lease: the next renewal, well within the lease,
    keeps it. SQLite: the database is locked by another writer a moment longer than the busy
    timeout. MySQL: the worker's sessions are killed just before the renewal."""
    q = queue(lease_dialect, "reports")
    db, reports = q.db, q.mod
    with db.transaction() as conn:
        reports.insert(conn, reports.NewRow(payload=b"quarterly"))
    clock = fake_clock()
    deliveries: list[Any] = []
    rival_calls: list[Any] = []
    killed: list[int] = []

    async def render(job: Job[bytes]) -> None:
        deliveries.append(job.id)
        if len(deliveries) > 1:
            return
        if db.sqlite:
            blocker = sqlite3.connect(db.database, isolation_level=None, timeout=30)
            blocker.execute("BEGIN IMMEDIATE")  # another writer holds the database at 30 s
            await clock.sleep(31)
            blocker.execute("COMMIT")
            blocker.close()
        else:
            await clock.sleep(29)
            killed.append(kill_sessions(db))  # the renewal at 30 s finds its connection dead
            await clock.sleep(2)
        await rival.start()
        await clock.sleep(269)

    worker = Worker(reports.DESCRIPTOR, render, database=db.database, clock=clock)
    if db.sqlite:
        worker.backend.busy_timeout = 0.2  # type: ignore[attr-defined]
    rival = Worker(reports.DESCRIPTOR, lambda job: rival_calls.append(job.id),
                   database=db.database, clock=clock, poll_interval=5)

    run_with_rival(worker, rival)
    assert db.sqlite or killed[0] >= 1, "the worker's idle sessions were killed"
    assert rival_calls == [], "the render was delivered twice: its lease lapsed"
    assert deliveries == [1]
    assert worker.stats.acked == 1 and worker.stats.lease_lost == 0
    assert worker.stats.renewed >= 8
    assert any("row 1" in m and "renew" in m for m in messages(caplog.records)), \
        "the failed renewal was not logged"
