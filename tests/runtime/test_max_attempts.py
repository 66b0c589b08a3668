"""max_attempts with a dead-letter destination: a spent job moves to the dead-letter group or
table on each claim form; one setting without the other is refused."""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import logging
from typing import Any

import pytest
from dbcases import MakeQueue, json_value, spec_toml
from dbcases import example_module as example
from semantics_util import add_confirmation, drive, fake_clock, idle, serve_until

import inboxgen
from inboxgen import Job, Outcome, Worker, retry_after
from inboxgen.runtime.outcomes import lease_expiry
from inboxgen.testing import run_until_idle

pytestmark = pytest.mark.usefixtures("log_inboxgen")


def test_row_lock_spent_job_moves_to_dead_letter_group(server_dialect: str,
                                                       queue: MakeQueue) -> None:
    q = queue(server_dialect, "mailer")
    db, mailer = q.db, q.mod
    with db.transaction() as conn:
        mailer.insert(conn, mailer.NewRow(name="emails", payload=b"to: ada"))
    clock = fake_clock()
    attempts: list[int | None] = []

    async def send(job: Job[bytes]) -> None:
        assert job.group == "emails"
        attempts.append(job.attempt)
        raise ConnectionError("smtp server down")

    worker = Worker(mailer.DESCRIPTOR, send, database=db.database, group="emails",
                    max_attempts=3, clock=clock)
    asyncio.run(run_until_idle(worker, timeout=20))

    assert attempts == [1, 2, 3]
    assert (worker.stats.delivered, worker.stats.retried, worker.stats.dead_lettered) == (3, 2, 1)
    assert db.rows("SELECT job_id, name, attempt, payload FROM email_jobs") == [
        (1, "emails.dead", 3, b"to: ada")]
    assert worker.stats.acked == 0

    # A worker of the dead-letter group can look at it: it still has its attempt count.
    kept: list[tuple[int | None, bytes]] = []

    async def inspect_dead(job: Job[bytes]) -> None:
        kept.append((job.attempt, job.payload))

    dead = Worker(mailer.DESCRIPTOR, inspect_dead, database=db.database, group="emails.dead",
                  max_attempts=10, clock=clock, listen=False)
    asyncio.run(run_until_idle(dead, timeout=20))
    assert kept == [(3, b"to: ada")]


def test_lease_spent_job_moves_to_dead_letter_table(lease_dialect: str, queue: MakeQueue,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    q = queue(lease_dialect, "emails")
    db, emails = q.db, q.mod
    clock = fake_clock()
    add_confirmation(db, emails, clock.now())
    attempts: list[tuple[int | None, dt.datetime]] = []

    def send(job: Job[Any]) -> None:
        attempts.append((job.attempt, clock.now()))
        raise ConnectionError("smtp server down")

    worker = Worker(emails.DESCRIPTOR, send, database=db.database, max_attempts=3, clock=clock)

    async def main() -> None:
        await worker.start()
        try:
            await drive(worker, clock, lambda: worker.stats.dead_lettered > 0, max_seconds=60)
        finally:
            await worker.shutdown()

    with caplog.at_level(logging.ERROR, logger="inboxgen"):
        asyncio.run(main())
    assert [a for a, _ in attempts] == [1, 2, 3]
    # One line for the move, not one per step of it.
    assert sum("moved to the dead letters" in r.getMessage() for r in caplog.records) == 1
    # The default backoff (1 s, then 2 s) is honoured: no delivery before its row is due.
    gaps = [(b - a).total_seconds() for (_, a), (_, b) in itertools.pairwise(attempts)]
    assert gaps == [1.0, 2.0]
    assert db.rows("SELECT count(*) FROM email_jobs") == [(0,)]
    assert db.rows("SELECT id, attempt, locked_until, kind FROM email_jobs_dead") == [
        (1, 3, None, "confirmation")]


def test_advisory_spent_job_moves_to_dead_letter_table(server_dialect: str,
                                                       queue: MakeQueue) -> None:
    q = queue(server_dialect, "ledger")
    db, ledger = q.db, q.mod
    with db.transaction() as conn:
        ledger.insert(conn, ledger.NewRow(account_id=42, payload={"amount": 10},
                                          headers={"trace": "t-1"}))
    clock = fake_clock()  # a minute ahead: the row's retry_after defaults to the database's now()
    attempts: list[int | None] = []

    async def post(job: Job[Any]) -> None:
        attempts.append(job.attempt)
        assert job.headers == {"trace": "t-1"}
        raise ValueError("ledger closed")

    worker = Worker(ledger.DESCRIPTOR, post, database=db.database, clock=clock, listen=False)
    assert worker.max_attempts == 3

    serve_until(worker, clock, lambda: worker.stats.dead_lettered > 0, max_seconds=60)
    assert attempts == [1, 2, 3]
    assert db.rows("SELECT count(*) FROM ledger_jobs") == [(0,)]
    assert [(*row[:3], json_value(row[3])) for row in db.rows(
        "SELECT id, account_id, attempt, payload FROM ledger_jobs_dead")] == [
        (1, 42, 3, {"amount": 10})]


def test_retry_after_delay_is_honoured_and_the_cap_still_dead_letters(lease_dialect: str,
                                                                     queue: MakeQueue) -> None:
    q = queue(lease_dialect, "emails")
    db, emails = q.db, q.mod
    clock = fake_clock()
    t0 = clock.now()
    add_confirmation(db, emails, t0)
    seen: list[tuple[int | None, float]] = []

    def send(job: Job[Any]) -> Outcome:
        seen.append((job.attempt, (clock.now() - t0).total_seconds()))
        return retry_after(dt.timedelta(minutes=10))

    worker = Worker(emails.DESCRIPTOR, send, database=db.database, max_attempts=3, clock=clock)

    async def main() -> None:
        await worker.start()
        try:
            await idle(worker)
            assert seen == [(1, 0.0)]
            due = db.rows("SELECT retry_after, locked_until FROM email_jobs")
            assert due == [(db.stored_time(t0 + dt.timedelta(minutes=10)), None)]
            clock.advance(599)  # one second short: not yet
            await idle(worker)
            assert len(seen) == 1
            clock.advance(1)
            await idle(worker)
            assert seen == [(1, 0.0), (2, 600.0)]
            clock.advance(600)
            await idle(worker)
        finally:
            await worker.shutdown()

    asyncio.run(main())
    assert seen == [(1, 0.0), (2, 600.0), (3, 1200.0)]
    assert worker.stats.dead_lettered == 1 and worker.stats.retried == 2
    assert db.rows("SELECT count(*) FROM email_jobs") == [(0,)]
    assert db.rows("SELECT id, attempt FROM email_jobs_dead") == [(1, 3)]


def test_lease_job_whose_deliveries_never_finished_is_dead_lettered_not_run_again(
        lease_dialect: str, queue: MakeQueue) -> None:
    """Three workers claimed the email and died (crash spends an attempt under a lease): with
    max_attempts 3 the next claim moves it to the dead letters without running it a fourth time."""
    q = queue(lease_dialect, "emails")
    db, emails = q.db, q.mod
    clock = fake_clock()
    add_confirmation(db, emails, clock.now())
    for attempt in (1, 2, 3):
        with db.transaction() as conn:
            if db.sqlite:
                db.execute(conn, "BEGIN IMMEDIATE")
            (row,) = emails.claim(conn, now=clock.now(),
                                  locked_until=lease_expiry(clock.now(), 30))
        assert row.attempt == attempt
        clock.advance(31)  # ... and its worker died: the lease runs out
    calls: list[Any] = []
    worker = Worker(emails.DESCRIPTOR, lambda job: calls.append(job.attempt),
                    database=db.database, max_attempts=3, clock=clock)
    asyncio.run(run_until_idle(worker, timeout=20))

    assert calls == []
    assert worker.stats.dead_lettered == 1 and worker.stats.acked == 0
    assert db.rows("SELECT count(*) FROM email_jobs") == [(0,)]
    ((order_id, attempt, locked_until),) = db.rows(
        "SELECT order_id, attempt, locked_until FROM email_jobs_dead")
    assert order_id == 1 and attempt >= 3 and locked_until is None

NO_DEAD_LETTER_SPEC = spec_toml("jobs", {"id": "id generated", "attempt": "attempt generated",
                                         "locked_until": "locked_until",
                                         "payload": "payload text"}, dialect="sqlite")
NO_DEAD_LETTER_DDL = """
    CREATE TABLE jobs (
        id INTEGER PRIMARY KEY,
        attempt INTEGER NOT NULL DEFAULT 1,
        locked_until TEXT,
        payload TEXT NOT NULL
    );
"""


def test_max_attempts_and_dead_letter_must_come_together(queue: MakeQueue) -> None:
    q = queue("sqlite", spec=NO_DEAD_LETTER_SPEC, ddl=NO_DEAD_LETTER_DDL)
    with pytest.raises(inboxgen.WorkerConfigError, match="dead-letter destination") as caught:
        Worker(q.mod.DESCRIPTOR, lambda job: None, database=q.target, max_attempts=3)
    assert caught.value.table == "jobs" and caught.value.worker == "jobs"
    assert "[dead_letter]" in str(caught.value)

    # The other half missing: a destination, and max_attempts switched off in code.
    mailer = example("mailer")
    with pytest.raises(inboxgen.WorkerConfigError, match="max_attempts is missing") as caught2:
        Worker(mailer.DESCRIPTOR, lambda job: None, database="dbname=unused", group="emails",
               max_attempts=None)
    assert caught2.value.table == "email_jobs" and caught2.value.worker == "email_jobs:emails"
