"""What a worker's slots wait on and wake through, and the count of rows in work: the worker's
side of `forms.base.Slots`. Each waiting slot has a wake-up of its own, so a new row wakes one
slot, not all of them."""

from __future__ import annotations

import asyncio
import contextlib

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

    def reset(self) -> None:
        """Ready to serve again after a shutdown."""
        self._stopping = asyncio.Event()
        self._wakes_owed = 0

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
