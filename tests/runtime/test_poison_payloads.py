"""A poison payload (one that does not decode) is dead-lettered, never a crash loop, and never
blocks the queue."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from dbcases import MakeQueue, spec_toml, sqlite_db, sqlite_rows, typed
from dbcases import example_module as example
from semantics_util import fake_clock, messages, migration_sql

from inboxgen import Job, Worker
from inboxgen.testing import run_until_idle

pytestmark = pytest.mark.usefixtures("log_inboxgen")


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


POISON_SPEC = spec_toml("jobs", {"id": "id generated", "queue": "group",
                                 "attempt": "attempt generated", "payload": "payload json"},
                        runtime={"max_attempts": 3}, dead_letter={"group": "dead"})
POISON_DDL = """
    CREATE TABLE jobs (
        id {id},
        queue {text} NOT NULL,
        attempt INTEGER NOT NULL DEFAULT 1,
        payload TEXT NOT NULL
    );
    CREATE INDEX jobs_claim ON jobs (queue, id);
"""


def test_poison_payload_on_server_row_lock_goes_to_the_dead_letter_group(
        server_dialect: str, queue: MakeQueue) -> None:
    q = queue(server_dialect, spec=POISON_SPEC, ddl=typed(POISON_DDL, server_dialect))
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
