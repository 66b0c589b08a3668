"""Transactional handlers: their writes on the job's connection commit with the ack and roll back
on anything else, on each claim form."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from dbcases import MakeQueue, Queue, spec_toml, typed
from semantics_util import fake_clock, serve_until, write_effect

from inboxgen import Job, Outcome, Worker, ack, drop, retry
from inboxgen.testing import run_until_idle

pytestmark = pytest.mark.usefixtures("log_inboxgen")


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


def queue_of_kinds(queue: MakeQueue, dialect: str, spec: str, ddl: str) -> Queue:
    """A queue of `spec` and `ddl` (for every dialect) holding a job of each of KINDS."""
    q = queue(dialect, spec=spec, ddl=typed(ddl, dialect))
    with q.db.transaction() as conn:
        q.mod.insert_many(conn, [q.mod.NewRow(payload=k) for k in KINDS])
    return q


LEASE_TX_SPEC = spec_toml("jobs", {"id": "id generated", "attempt": "attempt generated",
                                   "processed_at": "processed_at", "locked_until": "locked_until",
                                   "payload": "payload text"}, dialect="sqlite")
EFFECTS_DDL = "CREATE TABLE effects (note {text} NOT NULL);\n"
TX_LEASE_DDL = """
    CREATE TABLE jobs (
        id {id},
        attempt INTEGER NOT NULL DEFAULT 1,
        processed_at {time},
        locked_until {lease},
        payload TEXT NOT NULL
    );
""" + EFFECTS_DDL


@pytest.mark.parametrize("dialect", ["sqlite", "mysql"])
def test_transactional_handler_on_lease(queue: MakeQueue, dialect: str) -> None:
    q = queue_of_kinds(queue, dialect, LEASE_TX_SPEC, TX_LEASE_DDL)
    db, jobs = q.db, q.mod
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


ROW_LOCK_TX_SPEC = spec_toml("jobs", {"id": "id generated", "attempt": "attempt generated",
                                      "payload": "payload text"})
TX_ROW_LOCK_DDL = """
    CREATE TABLE jobs (
        id {id},
        attempt INTEGER NOT NULL DEFAULT 1,
        payload TEXT NOT NULL
    );
""" + EFFECTS_DDL


def test_transactional_handler_on_server_row_lock(server_dialect: str, queue: MakeQueue) -> None:
    q = queue_of_kinds(queue, server_dialect, ROW_LOCK_TX_SPEC, TX_ROW_LOCK_DDL)
    db, jobs = q.db, q.mod
    assert jobs.DESCRIPTOR.form == "row_lock"
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


def test_transactional_handler_on_server_advisory(server_dialect: str, queue: MakeQueue) -> None:
    q = queue(server_dialect, "ledger")
    db, ledger = q.db, q.mod
    db.exec(typed(EFFECTS_DDL, db.dialect))
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

    # The failed delivery comes back after its backoff (1 s)
    serve_until(worker, clock, lambda: worker.stats.acked == 3, max_seconds=30)
    assert {n for (n,) in db.rows("SELECT note FROM effects")} == KEPT
    assert attempts == {"ack": [1], "drop": [1], "retry": [1, 2], "raise": [1, 2]}
    assert db.rows("SELECT count(*) FROM ledger_jobs") == [(0,)]
    s = worker.stats
    assert (s.delivered, s.acked, s.dropped, s.retried) == (6, 3, 1, 2)
