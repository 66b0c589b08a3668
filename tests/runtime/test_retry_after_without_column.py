"""retry_after on a table without a retry_after column: the row comes back at once, with a
warning."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest
from dbcases import MakeQueue
from semantics_util import fake_clock, messages

from inboxgen import Job, Outcome, Worker, ack, retry_after
from inboxgen.testing import run_until_idle

pytestmark = pytest.mark.usefixtures("log_inboxgen")


def test_retry_after_without_column_returns_the_row_at_once_with_a_warning(
        lease_dialect: str, queue: MakeQueue, caplog: pytest.LogCaptureFixture) -> None:
    q = queue(lease_dialect, "reports")
    db, reports = q.db, q.mod
    with db.transaction() as conn:
        reports.insert(conn, reports.NewRow(payload=b"r"))
    clock = fake_clock()
    t0 = clock.now()
    seen: list[tuple[int | None, dt.datetime]] = []

    def render(job: Job[bytes]) -> Outcome:
        seen.append((job.attempt, clock.now()))
        return retry_after(3600) if job.attempt == 1 else ack()

    worker = Worker(reports.DESCRIPTOR, render, database=db.database, clock=clock)
    asyncio.run(run_until_idle(worker, timeout=20))

    assert seen == [(1, t0), (2, t0)]  # back at once: the fake clock never moved
    assert worker.stats.retried == 1 and worker.stats.acked == 1
    warnings = messages(caplog.records)
    assert any("row 1" in m and "retry_after" in m for m in warnings), warnings


def test_retry_after_without_column_on_server_row_lock(server_dialect: str, queue: MakeQueue,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    q = queue(server_dialect, "mailer")
    db, mailer = q.db, q.mod
    with db.transaction() as conn:
        mailer.insert(conn, mailer.NewRow(name="emails", payload=b"hi"))
    clock = fake_clock()
    t0 = clock.now()
    seen: list[tuple[int | None, dt.datetime]] = []

    async def send(job: Job[bytes]) -> Outcome:
        seen.append((job.attempt, clock.now()))
        return retry_after(dt.timedelta(hours=1)) if job.attempt == 1 else ack()

    worker = Worker(mailer.DESCRIPTOR, send, database=db.database, group="emails", clock=clock)
    asyncio.run(run_until_idle(worker, timeout=20))

    assert seen == [(1, t0), (2, t0)]
    assert any("row 1" in m and "retry_after" in m for m in messages(caplog.records))
    assert db.rows("SELECT count(*) FROM email_jobs") == [(0,)]
