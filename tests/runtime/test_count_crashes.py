"""count_crashes under concurrency: several workers claim one row-lock table at once, every handler
acks at once, and each job is counted exactly once; none goes to the dead letters (real
PostgreSQL and MariaDB)."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from typing import Any

import pytest
from dbcases import Layout, MakeQueue, Queue

from inboxgen import Worker

JOBS = 300
WORKERS = 3  # workers on the table at once, each with SLOTS slots
SLOTS = 4


async def drain(q: Queue, delivered: list[Any]) -> None:
    async def ack(job: Any) -> None:
        delivered.append(job.id)

    workers = [Worker(q.mod.DESCRIPTOR, ack, database=q.target, group="g", workers=SLOTS,
                      poll_interval=0.05, shutdown_timeout=10, name=f"w{i}")
               for i in range(WORKERS)]
    for w in workers:
        await w.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            rows = await asyncio.to_thread(q.rows)
            if all(r["processed_at"] is not None or r["grp"] == "dead" for r in rows):
                break
            await asyncio.sleep(0.2)
    finally:
        for w in workers:
            await w.shutdown()


@pytest.mark.parametrize("dialect", ["postgres", "mysql"])
def test_concurrent_counted_claims_count_each_delivery_once_and_dead_letter_nothing(
        queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout("row_lock", group=True, count_crashes=True, dead="group"))
    conn = q.connect()
    due = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    q.mod.insert_many(conn, [q.new(grp="g", retry_after=due) for _ in range(JOBS)])
    conn.commit()
    delivered: list[Any] = []
    asyncio.run(drain(q, delivered))
    rows = q.rows()
    dead = [r for r in rows if r["grp"] == "dead"]
    assert dead == [], f"{len(dead)} healthy jobs dead-lettered, attempts " \
                       f"{sorted({r['attempt'] for r in dead})}"
    assert all(r["processed_at"] is not None for r in rows)
    assert sorted(delivered) == sorted(r["id"] for r in rows)  # each delivered once
    # The attempt starts at 1 (the DDL default) and is counted once, at the one delivery.
    assert {r["attempt"] for r in rows} == {2}


@pytest.mark.parametrize("transactional", [False, True])
def test_counted_rows_of_a_stopped_worker_on_a_user_pool_are_free_at_once(
        queue: MakeQueue, transactional: bool) -> None:
    """A worker stopped while its jobs run gives its connections back to the user's pool
    without the counted rows' keys: another worker claims those rows at once (the attempt
    spent), where keys left on a pooled connection would hide them from every other claim
    until that connection closed."""
    from psycopg_pool import AsyncConnectionPool

    q = queue("postgres", Layout("row_lock", group=True, count_crashes=True, dead="group"))
    conn = q.connect()
    due = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    q.mod.insert_many(conn, [q.new(grp="g", retry_after=due) for _ in range(2)])
    conn.commit()
    started = asyncio.Event()

    async def stuck(job: Any) -> None:
        started.set()
        await asyncio.sleep(3600)

    later: list[Any] = []

    async def ack(job: Any) -> None:
        later.append(job.id)

    async def run() -> None:
        pool = AsyncConnectionPool(q.target, min_size=1, max_size=4, open=False)
        await pool.open()
        try:
            first = Worker(q.mod.DESCRIPTOR, stuck, pool=pool, group="g", workers=1, batch=2,
                           transactional=transactional, shutdown_timeout=0.2, name="first")
            await first.start()
            await asyncio.wait_for(started.wait(), 10)
            await first.shutdown()
            # The pool stays open, with whatever its connections still hold.
            second = Worker(q.mod.DESCRIPTOR, ack, database=q.target, group="g", workers=1,
                            batch=2, poll_interval=0.05, name="second")
            await second.start()
            deadline = time.monotonic() + 10
            while len(later) < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            await second.shutdown()
        finally:
            await pool.close()

    asyncio.run(run())
    assert len(later) == 2
    assert {r["attempt"] for r in q.rows()} == {3}  # both deliveries counted
