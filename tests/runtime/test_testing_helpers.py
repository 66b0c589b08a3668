"""The helpers users test with: FakeClock starts at the real time, so a row the database made
due "now" is due on it; run_until_idle looks once more before it calls a queue idle; the pytest
fixtures come with the installed package."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import psycopg
from dbcases import MakeQueue, spec_toml

from inboxgen import Job, Worker
from inboxgen.testing import FakeClock, run_until_idle

DDL = """
CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    retry_after TIMESTAMPTZ NOT NULL DEFAULT now(),
    payload JSONB NOT NULL
);
"""
SPEC = spec_toml("jobs", {"id": "id generated", "retry_after": "retry_after generated",
                          "payload": "payload"})


def test_a_row_due_now_is_delivered_on_a_default_fake_clock(
        queue: MakeQueue, inboxgen_clock: FakeClock,
        inboxgen_drain: Callable[..., None]) -> None:
    q = queue("postgres", spec=SPEC, ddl=DDL)
    module, dsn = q.mod, q.target
    with psycopg.connect(dsn) as conn:
        module.insert(conn, module.NewRow(payload={"to": "ada"}))  # due at the server's now()
    seen: list[Any] = []

    def handler(job: Job[Any]) -> None:
        seen.append(job.payload)

    worker = Worker(module.DESCRIPTOR, handler, database=dsn, clock=inboxgen_clock,
                    listen=False)
    inboxgen_drain(worker, timeout=20)
    assert seen == [{"to": "ada"}]


def test_run_until_idle_runs_a_row_another_session_held_while_the_worker_looked(
        server_dialect: str, queue: MakeQueue) -> None:
    # Another session holds the only due row as the worker claims: every slot finds nothing and
    # waits for a poll that a FakeClock never brings. Once the row is free, run_until_idle
    # still delivers it rather than call the queue idle.
    q = queue(server_dialect, "mailer")
    db, mailer = q.db, q.mod
    with db.transaction() as conn:
        mailer.insert(conn, mailer.NewRow(name="emails", payload=b"to: ada"))
    seen: list[bytes] = []

    def send(job: Job[bytes]) -> None:
        seen.append(job.payload)

    worker = Worker(mailer.DESCRIPTOR, send, database=db.database, group="emails",
                    clock=FakeClock(), listen=False)

    async def main() -> None:
        with db.transaction() as conn:
            conn.cursor().execute("SELECT job_id FROM email_jobs FOR UPDATE")
            await worker.start()
            for _ in range(400):
                await asyncio.sleep(0.025)
                if worker.quiet:
                    break
            assert worker.quiet and seen == []
        try:
            await run_until_idle(worker, timeout=20)
        finally:
            await worker.shutdown()

    asyncio.run(main())
    assert seen == [b"to: ada"]
    assert db.rows("SELECT job_id FROM email_jobs") == []
