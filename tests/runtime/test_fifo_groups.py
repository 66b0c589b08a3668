"""FIFO groups: strictly in order, even with four workers; a retry keeps the head."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from dbcases import MakeQueue, typed
from semantics_util import SECOND, Tracker, fake_clock, idle, serve_until

from inboxgen import Job, Outcome, Worker, ack, retry, retry_after
from inboxgen.testing import run_until_idle

pytestmark = pytest.mark.usefixtures("log_inboxgen")


def _fifo_expectation(bodies: list[str]) -> list[str]:
    """m2 asks for a retry on its first delivery: it runs again before m3."""
    out: list[str] = []
    for b in bodies:
        out += [b, b] if b == "m2" else [b]
    return out


def test_fifo_chat_on_server_lease_keeps_order_with_four_workers(server_dialect: str,
                                                                 queue: MakeQueue) -> None:
    q = queue(server_dialect, "chat")
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


def test_fifo_retry_after_moves_the_head_behind_rows_due_earlier(server_dialect: str,
                                                                 queue: MakeQueue) -> None:
    q = queue(server_dialect, "chat")
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

    serve_until(worker, clock, lambda: worker.stats.acked == 4, max_seconds=60)
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
FIFO_LEASE_DDL = """
    CREATE TABLE messages (
        id {id},
        conversation {text} NOT NULL,
        attempt INTEGER NOT NULL DEFAULT 1,
        locked_until {lease},
        payload TEXT NOT NULL
    );
    CREATE INDEX messages_claim ON messages (conversation, id);
"""
# The same table under a row lock: without its lease column.
FIFO = {"lease": (FIFO_LEASE_SPEC, FIFO_LEASE_DDL),
        "row_lock": (FIFO_LEASE_SPEC.replace('    locked_until = "locked_until"\n', ""),
                     FIFO_LEASE_DDL.replace("        locked_until {lease},\n", ""))}


@pytest.mark.parametrize("kind", ["sqlite-lease", "mysql-lease", "mysql-row_lock"])
def test_fifo_messages_keep_order_with_four_workers(queue: MakeQueue, kind: str) -> None:
    # MySQL: lease claims lock the group's head row (FOR UPDATE) and look for a live lease in
    # the group; row-lock claims take the head with FOR UPDATE NOWAIT and hold it while it runs.
    dialect, form = kind.split("-")
    spec, ddl = FIFO[form]
    q = queue(dialect, spec=spec, ddl=typed(ddl, dialect), name="messages")
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


@pytest.mark.parametrize("kind", ["postgres-row_lock", "postgres-lease", "sqlite-lease"])
def test_fifo_worker_with_a_batch_goes_on_to_the_groups_next_row_without_waiting(
        queue: MakeQueue, kind: str) -> None:
    """A FIFO claim takes its group's head alone, whatever the batch: a claim of one row is a
    full one, so the slot claims again at once rather than waiting the poll interval (an hour
    here) after each job."""
    dialect, form = kind.split("-")
    spec, ddl = FIFO[form]
    q = queue(dialect, spec=spec.replace('dialect = "sqlite"', f'dialect = "{dialect}"'),
              ddl=typed(ddl, dialect), name="messages")
    bodies = [f"m{i}" for i in range(1, 6)]
    with q.db.transaction() as conn:
        q.mod.insert_many(conn, [q.mod.NewRow(conversation="c1", payload=b) for b in bodies])
    handled: list[str] = []

    async def deliver(job: Job[str]) -> None:
        handled.append(job.payload)

    worker = Worker(q.mod.DESCRIPTOR, deliver, database=q.db.database, group="c1", workers=1,
                    batch=16, poll_interval=3600, listen=False)

    async def main() -> None:
        await worker.start()
        try:
            for _ in range(200):
                if len(handled) == len(bodies):
                    break
                await asyncio.sleep(0.05)
        finally:
            await worker.shutdown()

    asyncio.run(main())
    assert handled == bodies
