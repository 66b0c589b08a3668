"""The worker's log says what happens, once: a last failed attempt says the row went to the dead
letters (not that it will be retried), lease renewals are counted and logged at DEBUG, a row
deleted while its job ran is not reported as a lease lost to another worker."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from typing import Any

import pytest
from dbcases import MakeQueue
from semantics_util import add_confirmation, fake_clock, serve_until

from inboxgen import Job, Worker
from inboxgen.testing import run_until_idle

SECOND = dt.timedelta(seconds=1)


@pytest.fixture(autouse=True)
def _log_inboxgen(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="inboxgen")


def worker_lines(caplog: pytest.LogCaptureFixture, level: int = logging.INFO) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name.startswith("inboxgen") and r.levelno >= level]


@pytest.mark.parametrize(("dialect", "shape", "destination"), [
    ("postgres", "mailer", "group emails.dead"),  # row lock, no retry_after column
    ("sqlite", "emails", "table email_jobs_dead"),  # lease, backoff by retry_after
])
def test_a_last_failed_attempt_says_the_row_moved_to_the_dead_letters(
        queue: MakeQueue, caplog: pytest.LogCaptureFixture,
        dialect: str, shape: str, destination: str) -> None:
    q = queue(dialect, shape)
    db, m = q.db, q.mod
    clock = fake_clock()
    if shape == "mailer":
        with db.transaction() as conn:
            m.insert(conn, m.NewRow(name="emails", payload=b"to: ada"))
    else:
        add_confirmation(db, m, clock.now())

    def send(job: Job[Any]) -> None:
        raise ConnectionError("smtp server down")

    worker = Worker(m.DESCRIPTOR, send, database=db.database, max_attempts=3, clock=clock,
                    group="emails" if shape == "mailer" else None, listen=False)

    serve_until(worker, clock, lambda: worker.stats.dead_lettered > 0, max_seconds=60)
    assert worker.stats.dead_lettered == 1
    failures = [line for line in worker_lines(caplog) if "handler failed" in line]
    assert len(failures) == 3, failures
    *retried, last = failures
    assert all("retrying" in line for line in retried), retried
    assert "(attempt 3 of 3)" in last and "retrying" not in last, last
    assert f"moved to the dead letters ({destination})" in last, last
    # The move is said once, by that line.
    assert sum("dead letters" in line for line in worker_lines(caplog)) == 1


def test_lease_renewals_are_counted_and_logged_at_debug(
        queue: MakeQueue, caplog: pytest.LogCaptureFixture) -> None:
    q = queue("sqlite", "reports")
    db, reports = q.db, q.mod
    with db.transaction() as conn:
        reports.insert(conn, reports.NewRow(payload=b"quarterly"))
    clock = fake_clock()

    async def render(job: Job[bytes]) -> None:
        await clock.sleep(300)  # five minutes under a one-minute lease

    worker = Worker(reports.DESCRIPTOR, render, database=db.database, clock=clock)
    caplog.set_level(logging.DEBUG, logger="inboxgen")
    asyncio.run(run_until_idle(worker, timeout=30))

    assert worker.stats.acked == 1
    rounds = [line for line in worker_lines(caplog, logging.DEBUG)
              if "renewed the lease on" in line]
    assert len(rounds) >= 9, rounds  # one every half lease
    assert all("renewed the lease on 1 row(s)" in line for line in rounds), rounds
    assert worker.stats.renewed == len(rounds)
    (summary,) = [line for line in worker_lines(caplog) if ": stopped:" in line]
    assert f"{len(rounds)} lease renewal(s)" in summary, summary
    assert not [line for line in worker_lines(caplog, logging.INFO) if "renew" in line
                and ": stopped:" not in line], "renewals are not logged above DEBUG"


@pytest.mark.parametrize(("dialect", "shape"), [
    ("sqlite", "reports"), ("mysql", "reports"),  # the settler's flush finds it gone
    ("postgres", "chat"),  # FIFO: the settlement waits for its own flush
])
@pytest.mark.parametrize("found_by", ["settlement", "renewal"])
def test_a_row_deleted_while_its_job_ran_is_not_a_lease_lost_to_another_worker(
        queue: MakeQueue, caplog: pytest.LogCaptureFixture,
        dialect: str, shape: str, found_by: str) -> None:
    q = queue(dialect, shape)
    db, m = q.db, q.mod
    clock = fake_clock()
    with db.transaction() as conn:
        if shape == "chat":
            m.insert(conn, m.NewRow(conversation="c1", retry_after=clock.now() - SECOND,
                                    body="hello"))
        else:
            m.insert(conn, m.NewRow(payload=b"quarterly"))

    async def work(job: Job[Any]) -> None:
        with db.transaction() as other:  # how a job is cancelled today
            db.execute(other, f"DELETE FROM {q.table} WHERE {q.id_column} = {db.p}", (job.id,))
        if found_by == "renewal":
            await clock.sleep(45)  # the renewal at half the lease finds the row gone

    worker = Worker(m.DESCRIPTOR, work, database=db.database, clock=clock, lease=60,
                    group="c1" if shape == "chat" else None, listen=False)
    asyncio.run(run_until_idle(worker, timeout=20))

    assert (worker.stats.deleted, worker.stats.lease_lost, worker.stats.acked) == (1, 0, 0)
    lines = worker_lines(caplog, logging.WARNING)
    assert len(lines) == 1, lines
    assert "row 1 was deleted while its job ran, so its outcome (finish) was not recorded" \
        in lines[0], lines
    assert "another worker" not in lines[0] and "no longer held" not in lines[0]
    (summary,) = [line for line in worker_lines(caplog) if ": stopped:" in line]
    assert "1 row(s) deleted while in work" in summary, summary


@pytest.mark.parametrize("dialect", ["postgres", "mysql"])
def test_a_transactional_handler_failing_on_its_own_network_is_a_handler_failure(
        queue: MakeQueue, caplog: pytest.LogCaptureFixture,
        dialect: str) -> None:
    """Only the job's own connection dying is the database's outage: a handler's network
    error of its own (an OSError) is still the handler's failure, with its line."""
    q = queue(dialect, "mailer")
    db, mailer = q.db, q.mod
    with db.transaction() as conn:
        mailer.insert(conn, mailer.NewRow(name="emails", payload=b"to: ada"))
    clock = fake_clock()
    calls: list[int | None] = []

    def send(job: Job[bytes]) -> None:
        calls.append(job.attempt)
        if len(calls) == 1:
            raise ConnectionError("smtp server down")

    worker = Worker(mailer.DESCRIPTOR, send, database=db.database, group="emails",
                    max_attempts=3, clock=clock, transactional=True, listen=False)
    asyncio.run(run_until_idle(worker, timeout=20))

    assert calls == [1, 2] and worker.stats.acked == 1 and worker.stats.retried == 1
    lines = worker_lines(caplog, logging.WARNING)
    assert len(lines) == 1 and "handler failed on row 1 (attempt 1 of 3)" in lines[0], lines


@pytest.mark.parametrize("dialect", ["postgres", "mysql"])
def test_a_transactional_handler_whose_connection_dies_is_not_a_handler_failure(
        queue: MakeQueue, caplog: pytest.LogCaptureFixture,
        dialect: str) -> None:
    """The job's session is killed while its handler runs: the handler's next statement fails
    on the dead connection. That is the connection's loss (one line), not the handler's failure;
    the row comes back and its job is done."""
    q = queue(dialect, "mailer")
    db, mailer = q.db, q.mod
    with db.transaction() as conn:
        mailer.insert(conn, mailer.NewRow(name="emails", payload=b"to: ada"))
    clock = fake_clock()
    calls: list[int | None] = []

    def kill(session: int) -> None:
        killer = db.connect(autocommit=True)
        try:
            if db.mysql:
                with killer.cursor() as cur:
                    cur.execute(f"KILL CONNECTION {int(session)}")
            else:
                killer.execute("SELECT pg_terminate_backend(%s)", (session,))
        finally:
            killer.close()

    async def send_pg(job: Job[bytes]) -> None:
        calls.append(job.attempt)
        if len(calls) == 1:
            kill(job.connection.info.backend_pid)
        await job.connection.execute("SELECT 1")

    def send_mysql(job: Job[bytes]) -> None:
        calls.append(job.attempt)
        if len(calls) == 1:
            kill(job.connection.thread_id())
        with job.connection.cursor() as cur:
            cur.execute("SELECT 1")

    worker = Worker(mailer.DESCRIPTOR, send_mysql if db.mysql else send_pg,
                    database=db.database, group="emails", max_attempts=3, clock=clock,
                    transactional=True, listen=False)

    # the fake clock moves the retry's backoff along
    serve_until(worker, clock, lambda: worker.stats.acked > 0, max_seconds=60)

    assert len(calls) == 2 and worker.stats.acked == 1 and worker.stats.retried == 0, calls
    assert db.rows("SELECT count(*) FROM email_jobs") == [(0,)]
    lines = worker_lines(caplog, logging.WARNING)
    assert len(lines) == 1 and "was lost" in lines[0] and "new ones work" in lines[0], lines
    assert not [r for r in caplog.records if r.exc_info], "no traceback"


def _render_receipt(order: int) -> None:
    raise ValueError(f"order {order} has no lines")


@pytest.mark.parametrize("kind", ["plain", "async", "async watched", "transactional"])
def test_a_failed_handler_traceback_shows_the_handlers_frames_only(
        queue: MakeQueue, caplog: pytest.LogCaptureFixture, kind: str) -> None:
    """The logged traceback starts at the handler: none of inboxgen's runtime frames, nor those
    of the thread or the event loop that ran it, only the handler's and what it called."""
    q = queue("sqlite", "emails")
    # A fake clock runs an async handler in a task of its own (the runtime's testing mode).
    clock = fake_clock() if kind == "async watched" else None
    add_confirmation(q.db, q.mod, dt.datetime.now(dt.UTC) if clock is None else clock.now())

    def send_receipt(job: Job[Any]) -> None:
        _render_receipt(7)

    async def send_receipt_async(job: Job[Any]) -> None:
        await asyncio.sleep(0)
        _render_receipt(7)

    handler = send_receipt_async if kind.startswith("async") else send_receipt
    worker = Worker(q.mod.DESCRIPTOR, handler, database=q.db.database, clock=clock,
                    transactional=kind == "transactional", max_attempts=1, listen=False)
    asyncio.run(run_until_idle(worker, timeout=30))

    (record,) = [r for r in caplog.records if "handler failed" in r.getMessage()]
    assert record.exc_info is not None
    text = logging.Formatter().formatException(record.exc_info)
    frames = [line.strip() for line in text.splitlines() if line.strip().startswith("File ")]
    assert [f.rsplit(", in ", 1)[1] for f in frames] == [handler.__name__, "_render_receipt"], \
        text
    assert all(__file__ in f for f in frames), text
    assert "inboxgen" not in text and "concurrent" not in text and "asyncio" not in text, text
    assert text.endswith("ValueError: order 7 has no lines"), text


def failure_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "handler failed" in r.getMessage()]


def test_a_jobs_traceback_comes_once_with_its_last_attempt(
        queue: MakeQueue, caplog: pytest.LogCaptureFixture) -> None:
    """Each failed attempt is one line; only the last (the row goes to the dead letters) carries
    the traceback: a retry's line names the error and when it runs again."""
    q = queue("sqlite", "emails")
    clock = fake_clock()
    add_confirmation(q.db, q.mod, clock.now())

    def send(job: Job[Any]) -> None:
        raise ConnectionError("smtp server down")

    worker = Worker(q.mod.DESCRIPTOR, send, database=q.db.database, max_attempts=3,
                    clock=clock, listen=False)
    serve_until(worker, clock, lambda: worker.stats.dead_lettered > 0, max_seconds=60)
    records = failure_records(caplog)
    assert [(r.levelname, r.exc_info is not None) for r in records] == [
        ("WARNING", False), ("WARNING", False), ("ERROR", True)], [r.getMessage() for r in records]
    assert all("ConnectionError('smtp server down')" in r.getMessage() for r in records)


def test_where_attempts_are_not_limited_the_first_failure_carries_the_traceback(
        queue: MakeQueue, caplog: pytest.LogCaptureFixture) -> None:
    """No max_attempts, so no last attempt: the first failure's line carries the traceback, the
    retries' lines do not."""
    q = queue("sqlite", "reports")
    with q.db.transaction() as conn:
        q.mod.insert(conn, q.mod.NewRow(payload=b"quarterly"))
    calls: list[int | None] = []

    def render(job: Job[bytes]) -> None:
        calls.append(job.attempt)
        if len(calls) < 3:
            raise ValueError("the template is missing")

    worker = Worker(q.mod.DESCRIPTOR, render, database=q.db.database, listen=False)
    asyncio.run(run_until_idle(worker, timeout=30))
    assert calls == [1, 2, 3] and worker.stats.acked == 1
    records = failure_records(caplog)
    assert [(r.levelname, r.exc_info is not None) for r in records] == [
        ("WARNING", True), ("WARNING", False)], [r.getMessage() for r in records]
