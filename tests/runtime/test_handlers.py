"""How handlers run: plain functions on threads of the worker's own, one per slot."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from typing import Any

import psycopg
from dbcases import Queue

from inboxgen import Job, Worker
from inboxgen.testing import run_until_idle

REQUEST = contextvars.ContextVar("REQUEST", default="none")


def test_every_slot_runs_a_plain_handler_at_once(pg_jobs: Queue) -> None:
    # Ten slots on a 2-CPU machine: asyncio's default executor would run six at a time.
    module, dsn = pg_jobs.mod, pg_jobs.target
    with psycopg.connect(dsn) as conn:
        module.insert_many(conn, [module.NewRow(payload={"n": i}) for i in range(10)])
    together = threading.Barrier(10, timeout=5)
    seen: list[tuple[int, str]] = []

    def handler(job: Job[Any]) -> None:
        try:
            together.wait()  # returns only once ten handlers wait here at the same time
        except threading.BrokenBarrierError:
            seen.append((job.payload["n"], "fewer than ten ran at once"))
            return
        seen.append((job.payload["n"], REQUEST.get()))

    async def main() -> None:
        REQUEST.set("set by the service")
        worker = Worker(module.DESCRIPTOR, handler, database=dsn, workers=10, listen=False)
        await run_until_idle(worker, timeout=30)

    asyncio.run(main())
    assert sorted(seen) == [(n, "set by the service") for n in range(10)]


def test_one_notification_wakes_one_slot(pg_jobs: Queue) -> None:
    module, dsn = pg_jobs.mod, pg_jobs.target
    picked: list[int] = []
    claims = 0

    async def handler(job: Job[Any]) -> None:
        picked.append(job.payload["n"])

    async def main() -> None:
        nonlocal claims
        # Ten idle slots, an hour's poll interval: only the notification can start a claim.
        worker = Worker(module.DESCRIPTOR, handler, database=dsn, workers=10,
                        poll_interval=3600)
        call = worker.backend.call

        async def counting(conn: Any, op: str, *args: Any, **kwargs: Any) -> Any:
            nonlocal claims
            claims += op == "claim"
            return await call(conn, op, *args, **kwargs)

        worker.backend.call = counting  # type: ignore[method-assign]
        await worker.start()
        try:
            # Deadlines far off, reached only on failure: a loaded machine is slow, not wrong.
            deadline = time.monotonic() + 60
            while not (len(worker.slots.waiting) == 10 and worker.listener_pid is not None):
                assert time.monotonic() < deadline, "the slots never all waited"
                await asyncio.sleep(0.02)  # every slot has claimed once and waits
            claims = 0
            with psycopg.connect(dsn) as conn:
                module.insert(conn, module.NewRow(payload={"n": 1}), notify=True)
            deadline = time.monotonic() + 60
            while not (picked and len(worker.slots.waiting) == 10):
                assert time.monotonic() < deadline, "the notified job was not taken"
                await asyncio.sleep(0.02)
        finally:
            await worker.shutdown()

    asyncio.run(main())
    assert picked == [1]
    # The woken slot's claim, its next one, and the one slot its full claim woke: not ten.
    assert claims <= 3, claims
