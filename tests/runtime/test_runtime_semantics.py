"""What the runtime promises users, shown on real databases (SQLite files, a private PostgreSQL
and a private MariaDB).

Each test runs a `Worker` against the example services of the product brief (reports, shop,
mailer, ledger, chat) or an inline spec, on a `FakeClock`, so minutes of queue time pass in
milliseconds. Rows are inspected from a fresh connection, as another process would see them.
Tests whose promise holds on MySQL/MariaDB too take the `db` fixture (postgres and mysql) or a
dialect parameter: the MySQL twins of the examples are generated_examples/mailer_mariadb.py and
the inline specs of semantics_util; the runtime binds 'now' itself, so the fake clock works
there unchanged.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from dbcases import (
    Db,
    MakeQueue,
    json_value,
    parse_sqlite_time,
    pg_exec,
    pg_rows,
    sqlite_db,
    sqlite_rows,
    sqlite_time,
)
from dbcases import example_module as example
from psycopg_pool import AsyncConnectionPool
from semantics_util import (
    REPO,
    Tracker,
    drive,
    fake_clock,
    idle,
    load_shop,
    make_db,
    messages,
    migration_sql,
    on_dialect,
)

import inboxgen
from inboxgen import Job, Outcome, Worker, ack, drop, retry, retry_after
from inboxgen.runtime.outcomes import lease_expiry
from inboxgen.testing import run_until_idle

UTC = dt.UTC
SECOND = dt.timedelta(seconds=1)


@pytest.fixture(autouse=True)
def _log_inboxgen(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="inboxgen")


# MariaDB twice: on the worker's default driver (asyncmy), then on PyMySQL.
SERVERS = ["postgres", "mysql", "mysql+pymysql"]


@pytest.fixture(params=SERVERS)
def server(request: pytest.FixtureRequest) -> str:
    """The session's PostgreSQL, then its MariaDB (on each driver)."""
    return str(request.param)


@pytest.fixture
def db(request: pytest.FixtureRequest, server: str) -> Db:
    """A fresh database on the session's PostgreSQL, then on its MariaDB."""
    return make_db(request, server)


@pytest.fixture(params=["sqlite", "mysql", "mysql+pymysql"])
def lease_dialect(request: pytest.FixtureRequest) -> str:
    """A SQLite file, then a MariaDB database: the SQLite lease examples (reports, the shop's
    emails) and their MySQL twins."""
    return str(request.param)


# -- 1, 2: reports (SQLite / MariaDB, one-minute lease) ------------------------------------------


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

    async def main() -> None:
        try:
            await run_until_idle(worker, timeout=30)
        finally:
            if rival.started:
                await rival.shutdown()

    asyncio.run(main())

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

    async def main() -> None:
        try:
            await run_until_idle(worker, timeout=30)
        finally:
            if rival.started:
                await rival.shutdown()

    asyncio.run(main())
    assert db.sqlite or killed[0] >= 1, "the worker's idle sessions were killed"
    assert rival_calls == [], "the render was delivered twice: its lease lapsed"
    assert deliveries == [1]
    assert worker.stats.acked == 1 and worker.stats.lease_lost == 0
    assert worker.stats.renewed >= 8
    assert any("row 1" in m and "renew" in m for m in messages(caplog.records)), \
        "the failed renewal was not logged"

# -- 3: shop (SQLite: transactional checkout, emails with priority and schedule) ------------------


def test_shop_checkout_order_and_emails_commit_together(sqlite_path: Path) -> None:
    shop = load_shop()
    db = sqlite3.connect(sqlite_path)
    shop.create_schema(db)
    shop.request_checkout(db, 1, "ada@example.com")
    shop.request_checkout(db, 2, "not-an-address")  # fails after writing its order
    shop.request_checkout(db, 1, "ada@example.net")  # the same order placed twice
    db.close()
    clock = fake_clock()
    sent: list[tuple[str, str, int]] = []

    def send(job: Job[Any]) -> Outcome:
        sent.append((job.payload["template"], job.payload["to"], job.payload["order"]))
        outcome: Outcome = shop.send_email(job)
        return outcome

    checkout = Worker(shop.shop_checkout.DESCRIPTOR, shop.place_order, database=sqlite_path,
                      transactional=True, clock=clock)
    emails = Worker(shop.shop_emails.DESCRIPTOR, send, database=sqlite_path, clock=clock)

    async def main() -> None:
        await run_until_idle(checkout, timeout=20)
        placed_at = dt.datetime.now(UTC)
        # Order 1 and its two emails committed with the checkout; order 2 left nothing behind.
        assert sqlite_rows(sqlite_path, "SELECT id, email FROM orders") == [
            (1, "ada@example.com")]
        queued = sqlite_rows(sqlite_path, "SELECT order_id, kind, priority, retry_after, "
                                          "processed_at FROM email_jobs ORDER BY id")
        assert [(o, k, p, done) for o, k, p, _, done in queued] == [
            (1, "confirmation", shop.URGENT, None), (1, "review", shop.ROUTINE, None)]
        review_due = parse_sqlite_time(queued[1][3])
        three_days = placed_at + dt.timedelta(days=3)
        assert three_days - dt.timedelta(minutes=1) < review_due <= three_days
        assert sqlite_rows(sqlite_path, "SELECT count(*) FROM checkout_jobs") == [(0,)]
        assert (checkout.stats.acked, checkout.stats.dropped) == (1, 2)

        # The confirmation is sent; the review request waits for its day.
        await run_until_idle(emails, timeout=20)
        assert sent == [("confirmation", "ada@example.com", 1)]
        rows = sqlite_rows(sqlite_path, "SELECT kind, processed_at, retry_after FROM email_jobs "
                                        "ORDER BY id")
        assert rows[0][:2] == ("confirmation", sqlite_time(clock.now()))
        assert rows[1] == ("review", None, queued[1][3])

        # Three days on, the review request goes too, and nothing for the second placement.
        clock.advance(3 * 24 * 3600)
        emails2 = Worker(shop.shop_emails.DESCRIPTOR, send, database=sqlite_path, clock=clock)
        await run_until_idle(emails2, timeout=20)

    asyncio.run(main())
    assert sent == [("confirmation", "ada@example.com", 1), ("review", "ada@example.com", 1)]
    assert sqlite_rows(sqlite_path, "SELECT count(*) FROM email_jobs "
                                    "WHERE processed_at IS NULL") == [(0,)]


def test_shop_urgent_email_goes_before_routine(sqlite_path: Path) -> None:
    shop = load_shop()
    emails_mod = shop.shop_emails
    db = sqlite3.connect(sqlite_path)
    shop.create_schema(db)
    clock = fake_clock()
    now = clock.now()
    with db:
        db.execute("INSERT INTO orders (id, email) VALUES (7, 'ada@example.com')")
        # The routine email is older and due earlier, and enqueued first: urgency still wins.
        emails_mod.insert(db, emails_mod.NewRow(
            priority=shop.ROUTINE, retry_after=now - dt.timedelta(hours=1), order_id=7,
            kind="newsletter", payload={"to": "ada@example.com", "template": "newsletter",
                                        "order": 7}))
        emails_mod.insert(db, emails_mod.NewRow(
            priority=shop.URGENT, retry_after=now, order_id=7, kind="password-reset",
            payload={"to": "ada@example.com", "template": "password-reset", "order": 7}))
    db.close()
    order: list[str] = []

    def send(job: Job[Any]) -> None:
        order.append(job.payload["template"])

    worker = Worker(emails_mod.DESCRIPTOR, send, database=sqlite_path, clock=clock)
    asyncio.run(run_until_idle(worker, timeout=20))
    assert order == ["password-reset", "newsletter"]


# -- 4: mailer (PostgreSQL / MariaDB, row lock): a table missing a column stops startup -----------

MAILER = {"postgres": "mailer", "mysql": "mailer_mariadb"}
MAILER_WITHOUT_ATTEMPT = {  # the mailer's table (and claim index), its attempt column missing
    "postgres": "CREATE TABLE email_jobs (job_id BIGSERIAL PRIMARY KEY, name TEXT NOT NULL, "
                "payload BYTEA NOT NULL)",
    "mysql": "CREATE TABLE email_jobs (job_id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, "
             "name VARCHAR(191) NOT NULL, payload LONGBLOB NOT NULL, "
             "KEY email_jobs_claim (name, job_id))",
}


def test_mailer_missing_column_stops_startup_naming_worker_table_statement(db: Db) -> None:
    mailer = example(MAILER[db.dialect])
    db.exec(MAILER_WITHOUT_ATTEMPT[db.dialect])
    db.exec("INSERT INTO email_jobs (name, payload) VALUES ('emails', 'hi')")
    calls: list[Any] = []

    async def send(job: Job[bytes]) -> None:
        calls.append(job.id)

    worker = Worker(mailer.DESCRIPTOR, send, database=db.database, group="emails")
    with pytest.raises(inboxgen.SchemaError) as caught:
        asyncio.run(worker.start())
    err = caught.value
    assert isinstance(err, inboxgen.WorkerError) and isinstance(err, inboxgen.InboxgenError)
    assert (err.worker, err.table, err.statement) == ("email_jobs:emails", "email_jobs", "CLAIM")
    text = str(err)
    for part in ("email_jobs:emails", "email_jobs", "CLAIM", "attempt"):
        assert part in text
    assert not worker.started

    # run_until_idle stops the same way, and nothing was ever claimed.
    worker2 = Worker(mailer.DESCRIPTOR, send, database=db.database, group="emails")
    with pytest.raises(inboxgen.SchemaError, match="CLAIM"):
        asyncio.run(run_until_idle(worker2, timeout=20))
    assert calls == [] and worker2.stats.delivered == 0
    assert db.rows("SELECT job_id, name FROM email_jobs") == [(1, "emails")]


# -- 5: LeaseLost: a holder whose lease ran out cannot settle a row another worker took ------------


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
        server: str, queue: MakeQueue, caplog: pytest.LogCaptureFixture) -> None:
    q = queue(server, "chat")
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


# -- 6: max_attempts with a dead-letter destination ------------------------------------------------


def test_row_lock_spent_job_moves_to_dead_letter_group(server: str, queue: MakeQueue) -> None:
    q = queue(server, "mailer")
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
    with db.transaction() as conn:
        db.execute(conn, "INSERT INTO orders (id, email) VALUES (1, 'ada@example.com')")
        emails.insert(conn, emails.NewRow(priority=0, retry_after=clock.now(), order_id=1,
                                          kind="confirmation", payload={"to": "ada@example.com"}))
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


def test_advisory_spent_job_moves_to_dead_letter_table(server: str, queue: MakeQueue) -> None:
    q = queue(server, "ledger")
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

    async def main() -> None:
        await worker.start()
        try:
            await drive(worker, clock, lambda: worker.stats.dead_lettered > 0, max_seconds=60)
        finally:
            await worker.shutdown()

    asyncio.run(main())
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
    with db.transaction() as conn:
        db.execute(conn, "INSERT INTO orders (id, email) VALUES (1, 'ada@example.com')")
        emails.insert(conn, emails.NewRow(priority=0, retry_after=t0, order_id=1,
                                          kind="confirmation", payload={"to": "ada@example.com"}))
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
    with db.transaction() as conn:
        db.execute(conn, "INSERT INTO orders (id, email) VALUES (1, 'ada@example.com')")
        emails.insert(conn, emails.NewRow(priority=0, retry_after=clock.now(), order_id=1,
                                          kind="confirmation", payload={"to": "ada@example.com"}))
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

NO_DEAD_LETTER_SPEC = """
    table = "jobs"
    dialect = "sqlite"

    [columns]
    id = { role = "id", generated = true }
    attempt = { role = "attempt", generated = true }
    locked_until = "locked_until"
    payload = { role = "payload", codec = "text" }
"""
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


# -- 7: a poison payload is dead-lettered, never a crash loop -------------------------------------


def test_poison_payload_is_dead_lettered_and_the_worker_keeps_serving(
        lease_dialect: str, queue: MakeQueue, caplog: pytest.LogCaptureFixture) -> None:
    q = queue(lease_dialect, "emails")
    db, emails = q.db, q.mod
    clock = fake_clock()
    now = clock.now()
    with db.transaction() as conn:
        db.execute(conn, "INSERT INTO orders (id, email) VALUES (1, 'a@example.com'), "
                         "(2, 'b@example.com'), (3, 'c@example.com')")
        emails.insert(conn, emails.NewRow(priority=0, retry_after=now, order_id=1,
                                          kind="confirmation", payload={"to": "a@example.com"}))
        db.execute(conn, f"INSERT INTO email_jobs (priority, retry_after, order_id, kind, payload) "
                         f"VALUES (0, {db.p}, 2, 'confirmation', {db.p})",
                   (db.time_param(now), b'{"to": "b@exa'))
        emails.insert(conn, emails.NewRow(priority=0, retry_after=now, order_id=3,
                                          kind="confirmation", payload={"to": "c@example.com"}))
    sent: list[Any] = []

    def send(job: Job[Any]) -> None:
        sent.append(job.payload["to"])

    worker = Worker(emails.DESCRIPTOR, send, database=db.database, clock=clock)
    asyncio.run(run_until_idle(worker, timeout=20))

    assert sent == ["a@example.com", "c@example.com"]
    assert worker.stats.dead_lettered == 1 and worker.stats.acked == 2
    assert worker.stats.delivered == 3  # the poison row was claimed once, not over and over
    assert db.rows("SELECT order_id, attempt, payload FROM email_jobs_dead") == [
        (2, 1, b'{"to": "b@exa')]
    assert db.rows("SELECT order_id FROM email_jobs "
                   "WHERE processed_at IS NOT NULL ORDER BY id") == [(1,), (3,)]
    assert any("row 2" in m and "decode" in m for m in messages(caplog.records, logging.ERROR))




POISON_SPEC = """
    table = "jobs"
    dialect = "postgres"

    [columns]
    id = { role = "id", generated = true }
    queue = "group"
    attempt = { role = "attempt", generated = true }
    payload = { role = "payload", codec = "json" }

    [runtime]
    max_attempts = 3

    [dead_letter]
    group = "dead"
"""
POISON_DDL = {
    "postgres": """
        CREATE TABLE jobs (
            id BIGSERIAL PRIMARY KEY,
            queue TEXT NOT NULL,
            attempt INTEGER NOT NULL DEFAULT 1,
            payload TEXT NOT NULL
        );
        CREATE INDEX jobs_claim ON jobs (queue, id);
    """,
    "mysql": """
        CREATE TABLE jobs (
            id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
            queue VARCHAR(191) NOT NULL,
            attempt INT NOT NULL DEFAULT 1,
            payload TEXT NOT NULL,
            KEY jobs_claim (queue, id)
        );
    """,
}


def test_poison_payload_on_server_row_lock_goes_to_the_dead_letter_group(
        server: str, queue: MakeQueue) -> None:
    dialect = server.split("+")[0]
    q = queue(server, spec=on_dialect(POISON_SPEC, dialect), ddl=POISON_DDL[dialect])
    db, jobs = q.db, q.mod
    db.exec("INSERT INTO jobs (queue, payload) VALUES ('work', '{\"n\": 1}'), "
            "('work', '{\"n\": 2'), ('work', '{\"n\": 3}')")
    served: list[Any] = []

    async def handle(job: Job[Any]) -> None:
        served.append(job.payload["n"])

    worker = Worker(jobs.DESCRIPTOR, handle, database=db.database, group="work",
                    clock=fake_clock(), listen=False)
    asyncio.run(run_until_idle(worker, timeout=20))

    assert served == [1, 3]
    assert worker.stats.dead_lettered == 1
    assert db.rows("SELECT id, queue, attempt, payload FROM jobs") == [
        (2, "dead", 1, '{"n": 2')]

def test_poison_payload_without_destination_does_not_block_the_queue(sqlite_path: Path) -> None:
    checkout = example("shop_checkout")  # json payload; no dead letters, no retry_after
    db = sqlite_db(sqlite_path, migration_sql("shop"))
    db.execute("INSERT INTO checkout_jobs (payload) VALUES (?)", (b"{not json",))
    checkout.insert_many(db, [checkout.NewRow(payload={"order_id": i}) for i in (2, 3)])
    served: list[Any] = []

    def place(job: Job[Any]) -> None:
        served.append(job.payload["order_id"])

    worker = Worker(checkout.DESCRIPTOR, place, database=sqlite_path, clock=fake_clock())

    async def main() -> None:
        await worker.start()
        try:
            await asyncio.sleep(0.5)  # half a second of real time; the fake clock stands still
        finally:
            await worker.shutdown()

    asyncio.run(main())
    assert served == [2, 3], "the poison row kept the other rows from being served"
    poison_deliveries = worker.stats.delivered - len(served)
    assert poison_deliveries <= 3, f"the poison row was claimed {poison_deliveries} times"
    assert sqlite_rows(sqlite_path, "SELECT id, payload FROM checkout_jobs") == [
        (1, b"{not json")]

# -- 8: transactional handlers: writes commit with the ack, roll back on anything else -----------


def _tx_outcome(job: Job[Any]) -> Outcome:
    """ack / drop acks or drops; retry and raise do so on the first delivery, then ack."""
    kind = job.payload if isinstance(job.payload, str) else job.payload["kind"]
    if kind == "drop":
        return drop()
    if kind == "retry" and job.attempt == 1:
        return retry()
    if kind == "raise" and job.attempt == 1:
        raise RuntimeError("handler failed after writing")
    return ack()


KINDS = ["ack", "drop", "retry", "raise"]
KEPT = {"ack:1", "retry:2", "raise:2"}  # only writes made by deliveries that acked


LEASE_TX_SPEC = """
    table = "jobs"
    dialect = "sqlite"

    [columns]
    id = { role = "id", generated = true }
    attempt = { role = "attempt", generated = true }
    processed_at = "processed_at"
    locked_until = "locked_until"
    payload = { role = "payload", codec = "text" }
"""
TX_LEASE_DDL = {
    "sqlite": """
        CREATE TABLE jobs (
            id INTEGER PRIMARY KEY,
            attempt INTEGER NOT NULL DEFAULT 1,
            processed_at TEXT,
            locked_until TEXT,
            payload TEXT NOT NULL
        );
        CREATE TABLE effects (note TEXT NOT NULL);
    """,
    "mysql": """
        CREATE TABLE jobs (
            id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
            attempt INT NOT NULL DEFAULT 1,
            processed_at DATETIME(6) NULL,
            locked_until DATETIME NULL,
            payload TEXT NOT NULL
        );
        CREATE TABLE effects (note VARCHAR(191) NOT NULL);
    """,
}


@pytest.mark.parametrize("dialect", ["sqlite", "mysql"])
def test_transactional_handler_on_lease(queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, spec=on_dialect(LEASE_TX_SPEC, dialect), ddl=TX_LEASE_DDL[dialect])
    db, jobs = q.db, q.mod
    with db.transaction() as conn:
        jobs.insert_many(conn, [jobs.NewRow(payload=k) for k in KINDS])
    clock = fake_clock()

    def handle(job: Job[str]) -> Outcome:  # sync: runs in a thread, on the job's connection
        assert job.connection is not None  # transactional mode hands the handler a connection
        db.execute(job.connection, f"INSERT INTO effects (note) VALUES ({db.p})",
                   (f"{job.payload}:{job.attempt}",))
        return _tx_outcome(job)

    worker = Worker(jobs.DESCRIPTOR, handle, database=db.database, transactional=True,
                    clock=clock)
    asyncio.run(run_until_idle(worker, timeout=20))

    assert {n for (n,) in db.rows("SELECT note FROM effects")} == KEPT
    # Every outcome was still recorded: each row is finished, retries counted their attempt.
    assert db.rows("SELECT payload, attempt, processed_at IS NOT NULL, "
                   "locked_until FROM jobs ORDER BY id") == [
        ("ack", 2, 1, None), ("drop", 2, 1, None), ("retry", 3, 1, None), ("raise", 3, 1, None)]
    s = worker.stats
    assert (s.delivered, s.acked, s.dropped, s.retried) == (6, 3, 1, 2)


ROW_LOCK_TX_SPEC = """
    table = "jobs"
    dialect = "postgres"

    [columns]
    id = { role = "id", generated = true }
    attempt = { role = "attempt", generated = true }
    payload = { role = "payload", codec = "text" }
"""
TX_ROW_LOCK_DDL = {
    "postgres": """
        CREATE TABLE jobs (
            id BIGSERIAL PRIMARY KEY,
            attempt INTEGER NOT NULL DEFAULT 1,
            payload TEXT NOT NULL
        );
        CREATE TABLE effects (note TEXT NOT NULL);
    """,
    "mysql": """
        CREATE TABLE jobs (
            id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
            attempt INT NOT NULL DEFAULT 1,
            payload TEXT NOT NULL
        );
        CREATE TABLE effects (note VARCHAR(191) NOT NULL);
    """,
}
EFFECTS_DDL = {"postgres": "CREATE TABLE effects (note TEXT NOT NULL)",
               "mysql": "CREATE TABLE effects (note VARCHAR(191) NOT NULL)"}


async def handler_write(db: Db, conn: Any, sql: str, params: Any) -> None:
    """An async handler's write on the job's connection: psycopg's is async, PyMySQL's blocks
    (so it runs in a thread), sqlite3's is quick and runs in place."""
    if db.mysql:
        await asyncio.to_thread(db.execute, conn, sql, params)
    elif db.sqlite:
        conn.execute(sql, params)
    else:
        await conn.execute(sql, params)


async def write_effect(db: Db, conn: Any, note: str) -> None:
    await handler_write(db, conn, f"INSERT INTO effects (note) VALUES ({db.p})", (note,))


def test_transactional_handler_on_server_row_lock(server: str, queue: MakeQueue) -> None:
    dialect = server.split("+")[0]
    q = queue(server, spec=on_dialect(ROW_LOCK_TX_SPEC, dialect), ddl=TX_ROW_LOCK_DDL[dialect])
    db, jobs = q.db, q.mod
    assert jobs.DESCRIPTOR.form == "row_lock"
    with db.transaction() as conn:
        jobs.insert_many(conn, [jobs.NewRow(payload=k) for k in KINDS])
    clock = fake_clock()
    attempts: dict[str, list[int | None]] = {}

    async def handle(job: Job[str]) -> Outcome:
        attempts.setdefault(job.payload, []).append(job.attempt)
        assert job.connection is not None
        await write_effect(db, job.connection, f"{job.payload}:{job.attempt}")
        return _tx_outcome(job)

    worker = Worker(jobs.DESCRIPTOR, handle, database=db.database, transactional=True,
                    clock=clock, listen=False)
    asyncio.run(run_until_idle(worker, timeout=20))

    assert {n for (n,) in db.rows("SELECT note FROM effects")} == KEPT
    # The retries were recorded (the attempt counted), and every row is finished (deleted).
    assert attempts == {"ack": [1], "drop": [1], "retry": [1, 2], "raise": [1, 2]}
    assert db.rows("SELECT count(*) FROM jobs") == [(0,)]
    s = worker.stats
    assert (s.delivered, s.acked, s.dropped, s.retried) == (6, 3, 1, 2)


def test_transactional_handler_on_server_advisory(server: str, queue: MakeQueue) -> None:
    q = queue(server, "ledger")
    db, ledger = q.db, q.mod
    db.exec(EFFECTS_DDL[db.dialect])
    with db.transaction() as conn:
        ledger.insert_many(conn, [ledger.NewRow(account_id=i, payload={"kind": k})
                                  for i, k in enumerate(KINDS)])
    clock = fake_clock()
    attempts: dict[str, list[int | None]] = {}

    async def handle(job: Job[Any]) -> Outcome:
        kind = job.payload["kind"]
        attempts.setdefault(kind, []).append(job.attempt)
        assert job.connection is not None
        await write_effect(db, job.connection, f"{kind}:{job.attempt}")
        return _tx_outcome(job)

    worker = Worker(ledger.DESCRIPTOR, handle, database=db.database, transactional=True,
                    clock=clock, listen=False)

    async def main() -> None:
        await worker.start()
        try:  # the failed delivery comes back after its backoff (1 s)
            await drive(worker, clock, lambda: worker.stats.acked == 3, max_seconds=30)
        finally:
            await worker.shutdown()

    asyncio.run(main())
    assert {n for (n,) in db.rows("SELECT note FROM effects")} == KEPT
    assert attempts == {"ack": [1], "drop": [1], "retry": [1, 2], "raise": [1, 2]}
    assert db.rows("SELECT count(*) FROM ledger_jobs") == [(0,)]
    s = worker.stats
    assert (s.delivered, s.acked, s.dropped, s.retried) == (6, 3, 1, 2)


# -- 9: retry_after on a table without a retry_after column ---------------------------------------


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



def test_retry_after_without_column_on_server_row_lock(server: str, queue: MakeQueue,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    q = queue(server, "mailer")
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

# -- 10: FIFO groups: strictly in order, even with four workers; retry keeps the head -------------


def _fifo_expectation(bodies: list[str]) -> list[str]:
    """m2 asks for a retry on its first delivery: it runs again before m3."""
    out: list[str] = []
    for b in bodies:
        out += [b, b] if b == "m2" else [b]
    return out


def test_fifo_chat_on_server_lease_keeps_order_with_four_workers(server: str,
                                                                 queue: MakeQueue) -> None:
    q = queue(server, "chat")
    db, chat = q.db, q.mod
    clock = fake_clock()
    bodies = [f"m{i}" for i in range(1, 13)]
    with db.transaction() as conn:
        due = clock.now() - SECOND  # all due at the same time: the id keeps them in order
        chat.insert_many(conn, [chat.NewRow(conversation="c1", retry_after=due, body=b)
                                for b in bodies])
        chat.insert(conn, chat.NewRow(conversation="c2", retry_after=due, body="other"))
    handled: list[str] = []
    tracker = Tracker()

    async def deliver(job: Job[str]) -> Outcome:
        with tracker:
            handled.append(job.payload)
            await asyncio.sleep(0.003)  # give the other workers time to try the group
            return retry() if job.payload == "m2" and job.attempt == 1 else ack()

    # Two worker processes' worth: four slots each, all serving conversation c1.
    workers = [Worker(chat.DESCRIPTOR, deliver, database=db.database, group="c1", workers=4,
                      clock=clock, listen=False, name=f"chat-{i}") for i in (1, 2)]
    assert [w.workers for w in workers] == [4, 4]

    def left() -> int:
        ((n,),) = db.rows(f"SELECT count(*) FROM {q.table} WHERE conversation = 'c1'")
        return int(n)

    async def main() -> None:
        for w in workers:
            await w.start()
        try:
            for _ in range(50):
                await asyncio.gather(*(idle(w) for w in workers))
                if left() == 0:
                    break
                clock.advance(1)
        finally:
            for w in workers:
                await w.shutdown()

    asyncio.run(main())
    assert handled == _fifo_expectation(bodies)
    assert tracker.peak == 1
    assert sum(w.stats.delivered for w in workers) == len(bodies) + 1
    assert db.rows(f"SELECT conversation, body FROM {q.table}") == [("c2", "other")]



def test_fifo_retry_after_moves_the_head_behind_rows_due_earlier(server: str,
                                                                 queue: MakeQueue) -> None:
    q = queue(server, "chat")
    db, chat = q.db, q.mod
    clock = fake_clock()
    t0 = clock.now()
    with db.transaction() as conn:
        chat.insert_many(conn, [chat.NewRow(conversation="c1", retry_after=t0 - SECOND, body=b)
                                for b in ("m1", "m2", "m3", "m4")])
    handled: list[tuple[str, float]] = []

    async def deliver(job: Job[str]) -> Outcome:
        handled.append((job.payload, (clock.now() - t0).total_seconds()))
        return retry_after(10) if job.payload == "m2" and job.attempt == 1 else ack()

    worker = Worker(chat.DESCRIPTOR, deliver, database=db.database, group="c1", workers=2,
                    clock=clock, listen=False)

    async def main() -> None:
        await worker.start()
        try:
            await drive(worker, clock, lambda: worker.stats.acked == 4, max_seconds=60)
        finally:
            await worker.shutdown()

    asyncio.run(main())
    assert handled == [("m1", 0), ("m2", 0), ("m3", 0), ("m4", 0), ("m2", 10)]

FIFO_LEASE_SPEC = """
    table = "messages"
    dialect = "sqlite"
    fifo = true

    [columns]
    id = { role = "id", generated = true }
    conversation = "group"
    attempt = { role = "attempt", generated = true }
    locked_until = "locked_until"
    payload = { role = "payload", codec = "text" }
"""
FIFO_ROW_LOCK_SPEC = """
    table = "messages"
    dialect = "mysql"
    fifo = true

    [columns]
    id = { role = "id", generated = true }
    conversation = "group"
    attempt = { role = "attempt", generated = true }
    payload = { role = "payload", codec = "text" }
"""
FIFO_DDL = {
    "sqlite-lease": """
        CREATE TABLE messages (
            id INTEGER PRIMARY KEY,
            conversation TEXT NOT NULL,
            attempt INTEGER NOT NULL DEFAULT 1,
            locked_until TEXT,
            payload TEXT NOT NULL
        );
        CREATE INDEX messages_claim ON messages (conversation, id);
    """,
    "mysql-lease": """
        CREATE TABLE messages (
            id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
            conversation VARCHAR(191) NOT NULL,
            attempt INT NOT NULL DEFAULT 1,
            locked_until DATETIME NULL,
            payload TEXT NOT NULL,
            KEY messages_claim (conversation, id)
        );
    """,
    "mysql-row_lock": """
        CREATE TABLE messages (
            id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
            conversation VARCHAR(191) NOT NULL,
            attempt INT NOT NULL DEFAULT 1,
            payload TEXT NOT NULL,
            KEY messages_claim (conversation, id)
        );
    """,
}


@pytest.mark.parametrize("kind", list(FIFO_DDL))
def test_fifo_messages_keep_order_with_four_workers(queue: MakeQueue, kind: str) -> None:
    # MySQL: lease claims lock the group's head row (FOR UPDATE) and look for a live lease in
    # the group; row-lock claims take the head with FOR UPDATE NOWAIT and hold it while it runs.
    dialect, form = kind.split("-")
    spec = FIFO_LEASE_SPEC if form == "lease" else FIFO_ROW_LOCK_SPEC
    q = queue(dialect, spec=on_dialect(spec, dialect), ddl=FIFO_DDL[kind], name="messages")
    db, messages_mod = q.db, q.mod
    assert messages_mod.DESCRIPTOR.fifo and messages_mod.DESCRIPTOR.form == form
    bodies = [f"m{i}" for i in range(1, 9)]
    rows = [messages_mod.NewRow(conversation="c1", payload=b) for b in bodies]
    rows.insert(3, messages_mod.NewRow(conversation="c2", payload="other"))
    with db.transaction() as conn:
        messages_mod.insert_many(conn, rows)
    clock = fake_clock()
    handled: list[str] = []
    tracker = Tracker()
    lock = threading.Lock()

    def deliver(job: Job[str]) -> Outcome:  # sync: runs in a thread, side by side if allowed
        with lock:
            tracker.__enter__()
            handled.append(job.payload)
        time.sleep(0.005)
        with lock:
            tracker.__exit__()
        return retry() if job.payload == "m2" and job.attempt == 1 else ack()

    worker = Worker(messages_mod.DESCRIPTOR, deliver, database=db.database, group="c1",
                    workers=4, clock=clock)
    assert worker.workers == 4
    asyncio.run(run_until_idle(worker, timeout=20))

    assert handled == _fifo_expectation(bodies)
    assert tracker.peak == 1
    assert db.rows("SELECT conversation, payload FROM messages") == [("c2", "other")]


# -- 11: the pool rule: never take the pool's last connection -------------------------------------


def test_worker_never_takes_the_pools_last_connection(
        pg_dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    mailer = example("mailer")
    pg_exec(pg_dsn, migration_sql("mailer"))
    with psycopg.connect(pg_dsn) as conn:
        mailer.insert_many(conn, [mailer.NewRow(name="emails", payload=b"%d" % i)
                                  for i in range(12)])
    clock = fake_clock()
    tracker = Tracker()
    spare: list[int] = []

    async def main() -> Worker:
        # (psycopg_pool's default min_size is 4, more than this max_size: min_size=1 here)
        pool = AsyncConnectionPool(pg_dsn, min_size=1, max_size=3, open=False)

        async def send(job: Job[bytes]) -> None:
            with tracker:
                await asyncio.sleep(0.005)
                stats = pool.get_stats()
                spare.append(3 - stats["pool_size"] + stats.get("pool_available", 0))

        worker = Worker(mailer.DESCRIPTOR, send, pool=pool, group="emails", workers=8,
                        clock=clock)
        assert worker.workers == 2
        await pool.open(wait=True)
        try:
            await run_until_idle(worker, timeout=20)
        finally:
            await pool.close()
        return worker

    worker = asyncio.run(main())
    assert worker.stats.acked == 12
    assert tracker.peak <= 2
    assert min(spare) >= 1, "a connection of the pool was always left for the service"
    assert any("never takes the pool's last connection" in m and "running 2 workers" in m
               for m in messages(caplog.records))
    assert pg_rows(pg_dsn, "SELECT count(*) FROM email_jobs") == [(0,)]



def test_worker_refuses_a_pool_with_no_connection_to_spare(pg_dsn: str) -> None:
    mailer = example("mailer")
    pool = AsyncConnectionPool(pg_dsn, min_size=1, max_size=1, open=False)
    with pytest.raises(inboxgen.WorkerConfigError, match="pool"):
        Worker(mailer.DESCRIPTOR, lambda job: None, pool=pool, group="emails", workers=1)

# -- 12: the `inboxgen worker module:attr` command -------------------------------------------------


CLI_MODULE = """
    import time
    from pathlib import Path

    from generated_examples import reports
    from inboxgen import Worker

    HERE = Path(__file__).resolve().parent
    NOT_A_WORKER = 42


    def render(job):
        text = job.payload.decode()
        if text == "slow":  # still in work when SIGTERM comes: it finishes first
            with open(HERE / "done.txt", "a", encoding="utf-8") as out:
                out.write("slow-start\\n")
            time.sleep(1.0)
        with open(HERE / "done.txt", "a", encoding="utf-8") as out:
            out.write(text + "\\n")


    def make_worker():
        return Worker(reports.DESCRIPTOR, render, database=HERE / "queue.db", poll_interval=0.05)


    def make_nothing():
        return "not a worker"


    def make_unprepared_worker():
        return Worker(reports.DESCRIPTOR, render, database=HERE / "empty.db")
"""


def _cli(tmp_path: Path, target: str, **kwargs: Any) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))
    return subprocess.Popen([sys.executable, "-m", "inboxgen", "worker", target], cwd=tmp_path,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **kwargs)


def test_cli_worker_serves_until_sigterm_then_exits_0(tmp_path: Path) -> None:
    (tmp_path / "myqueues.py").write_text(textwrap.dedent(CLI_MODULE), encoding="utf-8")
    reports = example("reports")
    db = sqlite_db(tmp_path / "queue.db", migration_sql("reports"))
    reports.insert_many(db, [reports.NewRow(payload=b"report-%d" % i) for i in range(3)])
    done = tmp_path / "done.txt"

    def lines() -> list[str]:
        return done.read_text(encoding="utf-8").splitlines() if done.exists() else []

    def wait_for(line: str) -> None:
        deadline = time.monotonic() + 15
        while line not in lines() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert line in lines(), (line, lines())

    proc = _cli(tmp_path, "myqueues:make_worker")
    try:
        wait_for("report-2")
        # Jobs enqueued while it runs are served too; SIGTERM comes while "slow" is in work.
        reports.insert(db, reports.NewRow(payload=b"late"))
        wait_for("late")
        reports.insert(db, reports.NewRow(payload=b"slow"))
        wait_for("slow-start")
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert lines() == ["report-0", "report-1", "report-2", "late", "slow-start", "slow"]
    assert "stopped" in err
    assert sqlite_rows(tmp_path / "queue.db", "SELECT count(*) FROM report_jobs") == [(0,)]


@pytest.mark.parametrize("target", ["myqueues:NOT_A_WORKER", "myqueues:make_nothing"])
def test_cli_worker_target_that_is_not_a_worker_exits_2(tmp_path: Path, target: str) -> None:
    (tmp_path / "myqueues.py").write_text(textwrap.dedent(CLI_MODULE), encoding="utf-8")
    proc = _cli(tmp_path, target)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2, (out, err)
    assert f"{target} is not an inboxgen Worker" in err
    assert "Traceback" not in err


def test_cli_worker_whose_table_is_missing_exits_1_naming_the_statement(tmp_path: Path) -> None:
    (tmp_path / "myqueues.py").write_text(textwrap.dedent(CLI_MODULE), encoding="utf-8")
    sqlite3.connect(tmp_path / "empty.db").close()  # a database file without the table
    proc = _cli(tmp_path, "myqueues:make_unprepared_worker")
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 1, (out, err)
    assert "SchemaError" in err and "report_jobs" in err and "statement CLAIM" in err
    assert "Traceback" not in err


# -- 13: async and sync handlers -------------------------------------------------------------------


def test_async_handler_runs_on_the_event_loop(sqlite_path: Path) -> None:
    reports = example("reports")
    db = sqlite_db(sqlite_path, migration_sql("reports"))
    reports.insert_many(db, [reports.NewRow(payload=b"a"), reports.NewRow(payload=b"b")])
    seen: list[tuple[bytes, bool]] = []

    async def render(job: Job[bytes]) -> Outcome:
        await asyncio.sleep(0)
        seen.append((job.payload, threading.current_thread() is threading.main_thread()))
        return ack()

    worker = Worker(reports.DESCRIPTOR, render, database=sqlite_path, clock=fake_clock())
    asyncio.run(run_until_idle(worker, timeout=20))
    assert seen == [(b"a", True), (b"b", True)]
    assert worker.stats.acked == 2
    assert sqlite_rows(sqlite_path, "SELECT count(*) FROM report_jobs") == [(0,)]


def test_sync_handler_runs_in_a_thread(sqlite_path: Path) -> None:
    reports = example("reports")
    db = sqlite_db(sqlite_path, migration_sql("reports"))
    reports.insert_many(db, [reports.NewRow(payload=b"a"), reports.NewRow(payload=b"b")])
    seen: list[tuple[bytes, bool]] = []

    def render(job: Job[bytes]) -> Outcome | None:
        assert job.connection is None  # not transactional: no connection handed over
        time.sleep(0.01)  # blocking work does not stall the event loop
        seen.append((job.payload, threading.current_thread() is threading.main_thread()))
        return None if job.payload == b"a" else ack()  # None means ack

    worker = Worker(reports.DESCRIPTOR, render, database=sqlite_path, clock=fake_clock())
    asyncio.run(run_until_idle(worker, timeout=20))
    assert seen == [(b"a", False), (b"b", False)]
    assert worker.stats.acked == 2
    assert sqlite_rows(sqlite_path, "SELECT count(*) FROM report_jobs") == [(0,)]


# -- Transactional handlers longer than the lease; a worker served twice (SQLite / MariaDB) ----


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
