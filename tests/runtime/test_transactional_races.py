"""A transactional handler whose statement loses a deadlock: the server undoes what the job
wrote, and the job runs again, on every form and server. MariaDB rolls the whole transaction
back (its savepoints too); PostgreSQL the statement, leaving the transaction to roll back to the
job's savepoint. A Galera cluster's certification conflict at COMMIT is in test_galera.py."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import threading
import time
from typing import Any

import pytest
from dbcases import Layout, MakeQueue, Queue
from semantics_util import drive, fake_clock, handler_write, serve_until

from inboxgen import Job, Outcome, Worker, ack
from inboxgen.testing import FakeClock

ACCOUNTS = """
    CREATE TABLE accounts (id INTEGER PRIMARY KEY, n INTEGER NOT NULL);
    CREATE TABLE filler (id INTEGER PRIMARY KEY, n INTEGER NOT NULL);
"""

# Whether a session of the test's database waits for a lock (the handler, for account 2).
HANDLER_WAITS = ("SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                 "AND datname = current_database()")

LAYOUTS = {"row_lock": Layout("row_lock"),
           "row_lock counted": Layout("row_lock", group=True, count_crashes=True, dead="group"),
           "lease": Layout("lease"),
           "advisory": Layout("advisory")}


def add_jobs(q: Queue, clock: FakeClock, batch: int) -> tuple[int | None, int]:
    """The job under test, due; with a batch of two, a bystander due before it (claimed with
    it, and delivered first). Returns their ids (the bystander's None without one)."""
    conn = q.connect()
    bystander = q.add(conn, retry_after=clock.now() - dt.timedelta(seconds=6)) \
        if batch == 2 else None
    job_id = q.add(conn, retry_after=clock.now() - dt.timedelta(seconds=5))
    conn.close()
    return bystander, job_id


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("form", list(LAYOUTS))
def test_a_handler_that_loses_a_deadlock_has_its_writes_undone_and_runs_again(
        server_dialect: str, queue: MakeQueue, form: str, batch: int,
        caplog: pytest.LogCaptureFixture) -> None:
    """The handler adds 1 to accounts 1 and 2 in that order; a rival session holds account 2
    and then asks for account 1, so the two wait for each other and the server breaks the
    deadlock by failing the handler's statement (the rival has written more rows, so MariaDB
    keeps it; PostgreSQL fails whoever waited first, the handler). The second delivery runs
    and acks: each account holds the rival's 1 and one delivery's 1. Nothing is logged as an
    outage; one warning names the row and the deadlock. With a batch of two, a bystander job
    claimed with it first adds 1 to account 3 and acks: where the rollback takes the round
    (a row lock on MariaDB), its write and ack are undone too and it runs again, named in the
    warning; its write still counts once."""
    caplog.set_level(logging.INFO, logger="inboxgen")
    q = queue(server_dialect, LAYOUTS[form])
    db = q.db
    db.exec(ACCOUNTS)
    db.exec("INSERT INTO accounts (id, n) VALUES (1, 0), (2, 0)")
    db.exec("INSERT INTO filler (id, n) VALUES " + ", ".join(f"({i}, 0)" for i in range(200)))
    db.exec("INSERT INTO accounts (id, n) VALUES (3, 0)")
    clock = fake_clock()
    bystander, job_id = add_jobs(q, clock, batch)
    handler_holds_1 = threading.Event()
    rival_said: list[str] = []

    def rival() -> None:
        other = db.connect()
        try:
            db.execute(other, "UPDATE filler SET n = n + 1")
            db.execute(other, "UPDATE accounts SET n = n + 1 WHERE id = 2")
            assert handler_holds_1.wait(30)
            # Once the handler waits for account 2: PostgreSQL fails the session that waited
            # first (its deadlock check comes first), which must be the handler. MariaDB fails
            # the lighter, the handler, whichever waited first.
            deadline = time.monotonic() + 30
            while not db.mysql and not db.rows(HANDLER_WAITS)[0][0]:
                assert time.monotonic() < deadline, "the handler never waited for account 2"
                time.sleep(0.02)
            db.execute(other, "UPDATE accounts SET n = n + 1 WHERE id = 1")
            other.commit()
            rival_said.append("committed")
        except Exception as err:
            rival_said.append(repr(err))
        finally:
            other.close()

    deliveries: list[int | None] = []
    bystanders: list[int | None] = []

    async def handle(job: Job[Any]) -> Outcome:
        if job.id == bystander:
            bystanders.append(job.attempt)
            await handler_write(db, job.connection,
                                "UPDATE accounts SET n = n + 1 WHERE id = 3", ())
            return ack()
        deliveries.append(job.attempt)
        await handler_write(db, job.connection,
                            "UPDATE accounts SET n = n + 1 WHERE id = 1", ())
        if len(deliveries) == 1:
            handler_holds_1.set()
        await handler_write(db, job.connection,
                            "UPDATE accounts SET n = n + 1 WHERE id = 2", ())
        return ack()

    thread = threading.Thread(target=rival)
    thread.start()
    worker = Worker(q.mod.DESCRIPTOR, handle, database=db.database, transactional=True,
                    group="g" if LAYOUTS[form].group else None, batch=batch, clock=clock,
                    listen=False)
    unfinished = "SELECT COUNT(*) FROM jobs WHERE processed_at IS NULL"
    try:
        serve_until(worker, clock, lambda: worker.stats.acked >= batch
                    and db.rows(unfinished) == [(0,)], max_seconds=120)
    finally:
        handler_holds_1.set()
        thread.join()
    assert rival_said == ["committed"]  # the handler lost the deadlock
    assert db.rows("SELECT id, n FROM accounts ORDER BY id") == [(1, 2), (2, 2), (3, batch - 1)]
    assert db.rows("SELECT COUNT(*) FROM jobs WHERE processed_at IS NULL") == [(0,)]
    # A MariaDB row lock's rollback takes the round's claim with it: its rows return as after
    # a crash, their attempts unchanged where a crash leaves them so. Elsewhere the failure is
    # recorded, and only the job that failed runs again.
    whole = db.mysql and form.startswith("row_lock")
    uncounted = whole and form == "row_lock"
    assert deliveries == ([1, 1] if uncounted else [1, 2])
    if batch == 2:
        assert bystanders == ([1, 1] if uncounted else [1, 2] if whole else [1])
    assert worker.stats.failed_claims == 0
    # Each job acked once in the counts, the ack the rollback undid not among them.
    assert worker.stats.acked == batch
    assert worker.stats.settlements_lost == (1 if whole and batch == 2 else 0)
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.levelno >= logging.WARNING]
    assert [m for level, m in said if level >= logging.ERROR] == []
    assert len(said) == 1 and "eadlock" in said[0][1], said
    named = f"rows {bystander}, {job_id}" if whole and batch == 2 else f"row {job_id}"
    assert named in said[0][1], said


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("form", list(LAYOUTS))
def test_a_handler_whose_writes_break_a_deferred_constraint_fails_and_runs_again(
        queue: MakeQueue, form: str, batch: int, caplog: pytest.LogCaptureFixture) -> None:
    """PostgreSQL checks a DEFERRABLE INITIALLY DEFERRED foreign key (as Django declares
    them) at COMMIT, after the handler has returned. A first delivery that adds a child of a
    parent that does not exist has failed as if its insert had raised: its writes are undone,
    the failure is recorded (a retry, its attempt counted) and nothing is an outage. The second
    delivery adds the parent first and acks. With a batch of two, a bystander job claimed with
    it first adds a child of an existing parent and acks once: a row lock checks each acked
    job's deferred constraints before its writes join the batch's transaction, so the
    failure stays the one job's."""
    caplog.set_level(logging.INFO, logger="inboxgen")
    q = queue("postgres", LAYOUTS[form])
    db = q.db
    db.exec("CREATE TABLE parents (id INTEGER PRIMARY KEY);"
            "CREATE TABLE children (id INTEGER PRIMARY KEY, parent INTEGER NOT NULL "
            "REFERENCES parents (id) DEFERRABLE INITIALLY DEFERRED);"
            "INSERT INTO parents (id) VALUES (1)")
    clock = fake_clock()
    bystander, job_id = add_jobs(q, clock, batch)
    deliveries: list[int | None] = []
    bystanders: list[int | None] = []

    async def handle(job: Job[Any]) -> Outcome:
        if job.id == bystander:
            bystanders.append(job.attempt)
            await job.connection.execute("INSERT INTO children VALUES (1, 1)")
            return ack()
        deliveries.append(job.attempt)
        if len(deliveries) > 1:
            await job.connection.execute("INSERT INTO parents VALUES (99)")
        await job.connection.execute(f"INSERT INTO children VALUES ({len(deliveries) + 1}, 99)")
        return ack()

    worker = Worker(q.mod.DESCRIPTOR, handle, database=db.database, transactional=True,
                    group="g" if LAYOUTS[form].group else None, batch=batch, clock=clock,
                    listen=False)
    serve_until(worker, clock, lambda: worker.stats.acked == batch, max_seconds=120)
    assert db.rows("SELECT id, parent FROM children ORDER BY id") == (
        [(1, 1)] if batch == 2 else []) + [(3, 99)]
    assert db.rows("SELECT COUNT(*) FROM jobs WHERE processed_at IS NULL") == [(0,)]
    assert deliveries == [1, 2]
    if batch == 2:
        assert bystanders == [1]
    s = worker.stats
    assert (s.acked, s.retried, s.failed_claims, s.settlements_lost) == (batch, 1, 0, 0)
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(said) == 1 and said[0][0] == logging.WARNING, said
    assert f"row {job_id} (attempt 1" in said[0][1] and "foreign key" in said[0][1], said


@pytest.mark.parametrize("form", ["row_lock", "row_lock counted"])
def test_a_deferred_constraint_declared_after_the_worker_started_fails_its_job_alone_soon(
        queue: MakeQueue, form: str, caplog: pytest.LogCaptureFixture) -> None:
    """A row lock checks the jobs' deferred constraints before COMMIT where the database had
    any as the worker started. One declared later first shows at the batch's COMMIT, which
    undoes the round (its rows return, as from a lost connection); from then on the worker
    checks, so the next delivery fails alone, counted, and the third acks."""
    caplog.set_level(logging.INFO, logger="inboxgen")
    q = queue("postgres", LAYOUTS[form])
    db = q.db
    clock = fake_clock()
    deliveries: list[int | None] = []

    async def handle(job: Job[Any]) -> Outcome:
        deliveries.append(job.attempt)
        if len(deliveries) > 2:
            await job.connection.execute("INSERT INTO parents VALUES (99)")
        await job.connection.execute(f"INSERT INTO children VALUES ({len(deliveries)}, 99)")
        return ack()

    worker = Worker(q.mod.DESCRIPTOR, handle, database=db.database, transactional=True,
                    group="g" if LAYOUTS[form].group else None, clock=clock, listen=False)

    async def main() -> None:
        await worker.start()
        try:
            await asyncio.to_thread(
                db.exec, "CREATE TABLE parents (id INTEGER PRIMARY KEY);"
                         "CREATE TABLE children (id INTEGER PRIMARY KEY, parent INTEGER NOT NULL"
                         " REFERENCES parents (id) DEFERRABLE INITIALLY DEFERRED)")
            conn = q.connect()
            q.add(conn, retry_after=clock.now() - dt.timedelta(seconds=5))
            conn.close()
            await drive(worker, clock, lambda: len(deliveries) == 3 and db.rows(
                "SELECT COUNT(*) FROM jobs WHERE processed_at IS NULL") == [(0,)],
                max_seconds=120)
        finally:
            await worker.shutdown()

    asyncio.run(main())
    assert db.rows("SELECT id, parent FROM children") == [(3, 99)]
    # The round undone returns the row as a crash would (counted or not), the checked failure
    # counts its attempt.
    assert deliveries == ([1, 1, 2] if form == "row_lock" else [1, 2, 3])
    assert worker.stats.retried == 1


@pytest.mark.parametrize("deferred", [False, True])
@pytest.mark.parametrize("form", ["lease", "advisory"])
def test_a_sqlite_handler_whose_writes_break_a_foreign_key_fails_and_runs_again(
        queue: MakeQueue, form: str, deferred: bool, caplog: pytest.LogCaptureFixture) -> None:
    """SQLite checks foreign keys only on connections that ask (`PRAGMA foreign_keys`), as
    Django's do: a worker's connections ask, so a handler's write that breaks one fails its
    job, at the statement or (DEFERRABLE INITIALLY DEFERRED, as Django declares them) at
    COMMIT, where it used to land with a parent that does not exist. The second delivery adds
    the parent first and acks."""
    caplog.set_level(logging.INFO, logger="inboxgen")
    q = queue("sqlite", LAYOUTS[form])
    db = q.db
    when = " DEFERRABLE INITIALLY DEFERRED" if deferred else ""
    db.exec("CREATE TABLE parents (id INTEGER PRIMARY KEY);"
            "CREATE TABLE children (id INTEGER PRIMARY KEY, parent INTEGER NOT NULL "
            f"REFERENCES parents (id){when})")
    clock = fake_clock()
    _, job_id = add_jobs(q, clock, 1)
    deliveries: list[int | None] = []

    async def handle(job: Job[Any]) -> Outcome:
        deliveries.append(job.attempt)
        if len(deliveries) > 1:
            await handler_write(db, job.connection, "INSERT INTO parents VALUES (99)", ())
        await handler_write(db, job.connection,
                            f"INSERT INTO children VALUES ({len(deliveries)}, 99)", ())
        return ack()

    worker = Worker(q.mod.DESCRIPTOR, handle, database=db.database, transactional=True,
                    clock=clock, listen=False)
    serve_until(worker, clock, lambda: worker.stats.acked == 1, max_seconds=120)
    assert db.rows("SELECT id, parent FROM children ORDER BY id") == [(2, 99)]
    assert db.rows("SELECT COUNT(*) FROM jobs WHERE processed_at IS NULL") == [(0,)]
    assert deliveries == [1, 2]
    s = worker.stats
    assert (s.acked, s.retried, s.failed_claims, s.settlements_lost) == (1, 1, 0, 0)
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(said) == 1 and said[0][0] == logging.WARNING, said
    assert f"row {job_id} (attempt 1" in said[0][1] and "FOREIGN KEY" in said[0][1], said
