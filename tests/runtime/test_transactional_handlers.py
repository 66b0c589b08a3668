"""Transactional handlers: their writes on the job's connection commit with the ack and roll back
on anything else, on each claim form."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from dbcases import MakeQueue
from semantics_util import drive, fake_clock, on_dialect, write_effect

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


def test_transactional_handler_on_server_row_lock(server_dialect: str, queue: MakeQueue) -> None:
    dialect = server_dialect.split("+")[0]
    q = queue(server_dialect, spec=on_dialect(ROW_LOCK_TX_SPEC, dialect),
              ddl=TX_ROW_LOCK_DDL[dialect])
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


def test_transactional_handler_on_server_advisory(server_dialect: str, queue: MakeQueue) -> None:
    q = queue(server_dialect, "ledger")
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
