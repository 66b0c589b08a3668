"""A transactional handler whose statement loses a deadlock: the server undoes what the job
wrote, and the job runs again, on every form and server. MariaDB rolls the whole transaction
back (its savepoints too); PostgreSQL the statement, leaving the transaction to roll back to the
job's savepoint. A Galera cluster's certification conflict at COMMIT is in test_galera.py."""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from typing import Any

import pytest
from dbcases import Layout, MakeQueue
from semantics_util import fake_clock, handler_write, serve_until

from inboxgen import Job, Outcome, Worker, ack

ACCOUNTS = """
    CREATE TABLE accounts (id INTEGER PRIMARY KEY, n INTEGER NOT NULL);
    CREATE TABLE filler (id INTEGER PRIMARY KEY, n INTEGER NOT NULL);
"""

LAYOUTS = {"row_lock": Layout("row_lock"),
           "row_lock counted": Layout("row_lock", group=True, count_crashes=True, dead="group"),
           "lease": Layout("lease"),
           "advisory": Layout("advisory")}


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
    conn = q.connect()
    bystander = q.add(conn, retry_after=clock.now() - dt.timedelta(seconds=6)) \
        if batch == 2 else None
    job_id = q.add(conn, retry_after=clock.now() - dt.timedelta(seconds=5))
    conn.close()
    handler_holds_1 = threading.Event()
    rival_said: list[str] = []

    def rival() -> None:
        other = db.connect()
        try:
            db.execute(other, "UPDATE filler SET n = n + 1")
            db.execute(other, "UPDATE accounts SET n = n + 1 WHERE id = 2")
            assert handler_holds_1.wait(30)
            time.sleep(0.3)  # the handler now waits for account 2
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
    try:
        serve_until(worker, clock, lambda: worker.stats.acked == batch, max_seconds=120)
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
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.levelno >= logging.WARNING]
    assert [m for level, m in said if level >= logging.ERROR] == []
    assert len(said) == 1 and "eadlock" in said[0][1], said
    named = f"rows {bystander}, {job_id}" if whole and batch == 2 else f"row {job_id}"
    assert named in said[0][1], said
