"""Helpers for users' tests: a fake clock, and running a worker until its queue is idle.

With `FakeClock`, leases, renewals, poll intervals and retry_after all follow the fake time, and
`run_until_idle` jumps the clock to the next timer whenever nothing else can happen: a
five-minute job under a one-minute lease runs in milliseconds, renewing as the clock reaches
each half lease.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import heapq
import itertools

from inboxgen.runtime.worker import Worker

__all__ = ["FakeClock", "drain", "run_until_idle"]

_START_AHEAD = _dt.timedelta(minutes=1)


class FakeClock:
    """A clock that moves only when told to (or when `run_until_idle` jumps it). By default it
    starts a minute ahead of the real time, in whole seconds: rows a test's database made due
    "now" (a DEFAULT now(), written during the test's setup) are due on it, and a minute is
    short beside the schedules tests write (retries minutes or hours away)."""

    def __init__(self, start: _dt.datetime | None = None) -> None:
        if start is None:
            start = (_dt.datetime.now(_dt.UTC) + _START_AHEAD).replace(microsecond=0)
        self._now = start
        if self._now.tzinfo is None:
            raise ValueError("FakeClock needs a timezone-aware start")
        self._sleepers: list[tuple[_dt.datetime, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()
        self.sleeping_tasks: set[asyncio.Task[object]] = set()
        # Tells the worker to run async handlers in tasks of their own, so that
        # run_until_idle can see a handler that sleeps on this clock.
        self.watches_handler_tasks = True
        # Sleepers woken whose tasks have not run yet: until they do, nothing is quiet.
        self.pending_wakeups = 0

    def now(self) -> _dt.datetime:
        return self._now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        wake = self._now + _dt.timedelta(seconds=seconds)
        heapq.heappush(self._sleepers, (wake, next(self._seq), future))
        task = asyncio.current_task()
        if task is not None:
            self.sleeping_tasks.add(task)
        try:
            await future
        finally:
            if future.done() and not future.cancelled():
                self.pending_wakeups -= 1
            if task is not None:
                self.sleeping_tasks.discard(task)

    def advance(self, seconds: float) -> None:
        """Move time forward, waking every sleeper whose time has come."""
        self._now += _dt.timedelta(seconds=seconds)
        self._wake_due()

    def next_wakeup(self) -> _dt.datetime | None:
        while self._sleepers and self._sleepers[0][2].done():
            heapq.heappop(self._sleepers)
        return self._sleepers[0][0] if self._sleepers else None

    def jump(self) -> bool:
        """Move time to the next sleeper's wake-up; False when nobody sleeps."""
        wake = self.next_wakeup()
        if wake is None:
            return False
        self._now = max(self._now, wake)
        self._wake_due()
        return True

    def _wake_due(self) -> None:
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():
                future.set_result(None)
                self.pending_wakeups += 1


async def _settle(worker: Worker) -> None:
    """Let every runnable task run until nothing is under way but timers."""
    calm = 0
    clock = worker.clock
    while calm < 3:
        await asyncio.sleep(0.001)
        busy = worker.backend.busy or worker.handler_threads or (
            isinstance(clock, FakeClock) and clock.pending_wakeups)
        calm = 0 if busy else calm + 1


async def run_until_idle(worker: Worker, *, timeout: float = 60.0) -> None:
    """Run `worker` until nothing is claimable and no job is in work (real-time `timeout`).

    Starts and shuts down the worker when it was not started by the caller. With a FakeClock,
    time jumps from timer to timer; with the system clock, it passes as usual.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    started_here = not worker.started
    if started_here:
        await worker.start()
    looked_at: int | None = None  # jobs delivered when the last look began
    try:
        while True:
            await _settle(worker)
            if worker.quiet:
                if looked_at == worker.stats.delivered:
                    return
                # A last look before calling the queue idle: a claim may have passed over a due
                # row that another session's claim held for a moment (MySQL locks the rows a
                # claim reads, matching or not, until it commits), and with a FakeClock the poll
                # that would find it never comes.
                looked_at = worker.stats.delivered
                worker.slots.wake()
                continue
            clock = worker.clock
            # Jump only when every running handler waits on the fake clock: one awaiting real
            # I/O must not see its lease run out under it. A job in work with no handler running
            # is being claimed or settled (real I/O, however calm it looks): no jump then.
            tasks = worker.handler_tasks
            if (isinstance(clock, FakeClock) and worker.in_flight and tasks
                    and all(t in clock.sleeping_tasks for t in tasks)):
                clock.jump()
            if loop.time() > deadline:
                raise TimeoutError(f"{worker.name}: still busy after {timeout} s")
    finally:
        if started_here:
            await worker.shutdown()


def drain(worker: Worker, *, timeout: float = 60.0) -> None:
    """`run_until_idle` for synchronous tests."""
    asyncio.run(run_until_idle(worker, timeout=timeout))
