"""What a worker's slots wait on and wake through, and the count of rows in work: the worker's
side of `forms.base.Slots`. Each waiting slot has a wake-up of its own, so a new row wakes one
slot, not all of them. The wake-ups come from the worker's listener (or a service's, shared:
`wakes()`) and from this process's enqueues as they commit (`wake_on_commits()`)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable

from inboxgen import connections
from inboxgen.runtime.backends.base import Wakes
from inboxgen.runtime.clock import Clock


class WorkerSlots:
    def __init__(self, clock: Clock, workers: int) -> None:
        self.clock = clock
        self.workers = workers
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()
        self.waiting: set[int] = set()  # tasks waiting for work (slots 0, 1, ...; the form's)
        self._slot_wakes: dict[int, asyncio.Event] = {}  # waiting slots, each woken alone
        self._wakes_owed = 0  # wake_one() calls that found no slot waiting
        self.in_work = 0  # rows claimed and not yet settled
        self.listener_pid: int | None = None  # the listening session, where there is one
        self._forget_commits: Callable[[], None] | None = None

    def reset(self) -> None:
        """Ready to serve again after a shutdown."""
        self._stopping = asyncio.Event()
        self._wakes_owed = 0
        if self._forget_commits is not None:
            self._forget_commits()
            self._forget_commits = None

    def wakes(self, name: str, group: str | None,
              lost_connection: Callable[[BaseException, str], bool]) -> Wakes:
        """What a listener wakes as the rows of `group` arrive (the worker's own, or a
        service's shared by its queues), and where it reports a lost connection."""
        return Wakes(name, group, self.wake, self.wake_one, self.wake_waiting_slot,
                     lost_connection, self._listening_on)

    def _listening_on(self, pid: int) -> None:
        self.listener_pid = pid

    def wake_on_commits(self, table: str) -> None:
        """Wake a slot as each enqueue into `table` made in this process through SQLAlchemy or
        Django commits (inboxgen.connections), until `reset()`: the wake-up crosses from the
        committing thread to this event loop."""
        loop = asyncio.get_running_loop()
        self._forget_commits = connections.wake_on_commit(
            table, functools.partial(_wake_from, loop, self.wake_one))

    def stop(self) -> None:
        self._stopping.set()
        self.wake()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    async def until_stopped(self) -> None:
        await self._stopping.wait()

    async def stopped_within(self, seconds: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)
        return self._stopping.is_set()

    @property
    def stopping_event(self) -> asyncio.Event:
        """Set once told to stop (what a connection attempt gives up on)."""
        return self._stopping

    def wake(self) -> None:
        """Every waiting slot claims now instead of waiting out the poll interval."""
        event, self._wake = self._wake, asyncio.Event()
        event.set()

    def wake_one(self) -> None:
        """One job may be ready: wake one waiting slot, or, with none waiting, let the next slot
        that would wait claim at once instead (a notification is never dropped)."""
        if not self.wake_waiting_slot():
            self._wakes_owed = min(self._wakes_owed + 1, self.workers)

    def wake_waiting_slot(self) -> bool:
        for index, event in self._slot_wakes.items():
            if not event.is_set():
                event.set()
                del self._slot_wakes[index]
                return True
        return False

    def idle(self, index: int, waiting: bool) -> None:
        (self.waiting.add if waiting else self.waiting.discard)(index)

    def took(self, n: int) -> None:
        self.in_work += n

    def done(self, n: int) -> None:
        self.in_work -= n

    async def wait(self, index: int, seconds: float) -> None:
        """Task `index` waits for work: `seconds`, a wake-up, or the stop."""
        if self._wakes_owed and not self._stopping.is_set():
            self._wakes_owed -= 1  # a wake-up came while every slot was busy: claim now
            await asyncio.sleep(0)
            return
        self.waiting.add(index)
        mine = self._slot_wakes[index] = asyncio.Event()
        waits = [asyncio.ensure_future(self.clock.sleep(seconds)),
                 asyncio.ensure_future(self._wake.wait()),
                 asyncio.ensure_future(mine.wait()),
                 asyncio.ensure_future(self._stopping.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
            self.waiting.discard(index)
            if self._slot_wakes.get(index) is mine:
                del self._slot_wakes[index]


# After a wake-up sent as a COMMIT leaves (before it lands), the next ones: a claim that ran
# too early finds the row at one of them instead of at the poll.
AFTER_COMMIT_IN_FLIGHT = (0.05, 0.25, 1.0, 4.0)


def _wake_from(loop: asyncio.AbstractEventLoop, wake: Callable[[], None],
               in_flight: bool = False) -> None:
    """Run `wake` on `loop` from any thread, and again AFTER_COMMIT_IN_FLIGHT when its commit
    may not have landed yet; nothing once the loop has closed."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(wake)
        for delay in AFTER_COMMIT_IN_FLIGHT if in_flight else ():
            loop.call_soon_threadsafe(loop.call_later, delay, wake)
