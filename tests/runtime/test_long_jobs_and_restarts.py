"""Transactional handlers longer than the lease, and a worker served again after its shutdown
(SQLite / MariaDB)."""

from __future__ import annotations

import asyncio

import pytest
from dbcases import MakeQueue
from semantics_util import fake_clock, handler_write

from inboxgen import Job, Worker
from inboxgen.testing import run_until_idle

pytestmark = pytest.mark.usefixtures("log_inboxgen")


def test_transactional_job_longer_than_its_lease_settles_once(lease_dialect: str,
                                                              queue: MakeQueue) -> None:
    """A job twice as long as its lease still acks, once, with its writes. On SQLite the
    handler's transaction holds the write lock, so nobody can take the row while it runs; on
    MySQL the lease is renewed on other connections while the job's transaction is open."""
    q = queue(lease_dialect, "reports")
    db, reports = q.db, q.mod
    db.exec("CREATE TABLE done (id BIGINT)")
    with db.transaction() as conn:
        reports.insert(conn, reports.NewRow(payload=b"long"))
    clock = fake_clock()

    async def render(job: Job[bytes]) -> None:
        await handler_write(db, job.connection, f"INSERT INTO done (id) VALUES ({db.p})",
                            (job.id,))
        await clock.sleep(120)  # two leases long

    worker = Worker(reports.DESCRIPTOR, render, database=db.database, clock=clock,
                    transactional=True)
    asyncio.run(run_until_idle(worker, timeout=30))
    assert worker.stats.acked == 1
    assert worker.stats.lease_lost == 0
    assert worker.stats.delivered == 1
    assert db.rows("SELECT id FROM done") == [(1,)]
    assert db.rows("SELECT count(*) FROM report_jobs") == [(0,)]


def test_a_worker_can_serve_again_after_shutdown(lease_dialect: str, queue: MakeQueue) -> None:
    q = queue(lease_dialect, "reports")
    db, reports = q.db, q.mod
    seen: list[bytes] = []
    # MySQL: the other form of database=, a mapping of pymysql.connect() arguments.
    worker = Worker(reports.DESCRIPTOR, lambda job: seen.append(job.payload),
                    database=db.mysql_args if db.mysql else db.database, clock=fake_clock())
    with db.transaction() as conn:
        reports.insert(conn, reports.NewRow(payload=b"first"))
    asyncio.run(run_until_idle(worker, timeout=30))
    with db.transaction() as conn:
        reports.insert(conn, reports.NewRow(payload=b"second"))
    asyncio.run(run_until_idle(worker, timeout=30))
    assert seen == [b"first", b"second"]
