"""Lease settlements of all of a worker's slots, written together.

A settlement waits here while another flush is on its way; each flush acks its rows with one
statement (FINISH_MANY) and runs the rarer kinds row by row, on one connection (PostgreSQL: an
autocommit session, each statement its own transaction; sqlite3 and PyMySQL: one transaction).
Each caller learns whether its own row settled, so only the rows whose lease was taken get
LeaseLost. Settlements are token-guarded: one that misses its row changes nothing and the
others still commit.

A row waiting here is no longer renewed (its settlement would race the renewal), so its lease
must not run out while it waits. A flush writes FLUSH_MOST settlements at most, and the claimer
claims no more while that many wait (`unsettled`, `flushed()`): otherwise, where the server
settles more slowly than handlers finish (a table whose deletes slow down as purge falls
behind), each flush would carry every settlement that came in during the last, each longer
than the one before, until one outlasted the lease and its rows ran again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from inboxgen.runtime.batching import Calls, by_op

log = logging.getLogger("inboxgen.worker")

if TYPE_CHECKING:
    from inboxgen.runtime.backends.base import Backend, Step


# Told what became of a settlement: True when it changed its row, False when its row is no
# longer this worker's, the error when its flush failed. Called in the flush, so it must not
# raise.
Written = Callable[["bool | Exception"], None]
Pending = list[tuple[str, dict[str, Any], Written]]


# How often a flush the server rolled back whole (a deadlock) is written again before its
# settlements are reported lost (their jobs then run again once their leases end).
FLUSH_ATTEMPTS = 3

# The most settlements one flush writes, and the most the claimer lets wait.
FLUSH_MOST = 500


class LeaseSettler:
    def __init__(self, calls: Calls, backend: Backend) -> None:
        self.calls = calls
        self.backend = backend
        self._pending: Pending = []
        self._flushing = 0  # settlements of the flush on its way
        self._kick = asyncio.Event()
        self._flushed = asyncio.Event()  # set when a flush ends (then replaced)
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    def start(self) -> None:
        self._closing = False
        # Of this event loop: a worker may serve again in another.
        self._kick, self._flushed = asyncio.Event(), asyncio.Event()
        self._task = asyncio.create_task(self._run(),
                                         name=f"{self.calls.descriptor.table}:settle")

    async def stop(self) -> None:
        """Write what is queued (a flush on its way ends first), then end."""
        if self._task is None:
            return
        self._closing = True
        self._kick.set()
        with contextlib.suppress(Exception):
            await self._task
        self._task = None

    @property
    def unsettled(self) -> int:
        """Settlements not yet written: waiting, or on their way."""
        return len(self._pending) + self._flushing

    async def flushed(self) -> None:
        """Wait for the end of the next flush (the claimer, while FLUSH_MOST wait)."""
        await self._flushed.wait()

    def submit(self, op: str, values: dict[str, Any], written: Written) -> None:
        """Queue one settlement for the next flush, which calls `written` (no future and no
        turn of the event loop per row)."""
        self._pending.append((op, values, written))
        self._kick.set()

    async def settle(self, op: str, values: dict[str, Any]) -> bool:
        """Queue one settlement and wait for its flush: True when it changed its row."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

        def written(result: bool | Exception) -> None:
            if future.done():
                return
            if isinstance(result, Exception):
                future.set_exception(result)
            else:
                future.set_result(result)

        self.submit(op, values, written)
        # Shielded: a delivery cancelled meanwhile leaves its settlement to the flush (its
        # handler has finished: the outcome stands).
        return await asyncio.shield(future)

    async def _run(self) -> None:
        while True:
            while self._pending:
                await self._flush_pending()
            if self._closing:
                return
            await self._kick.wait()
            self._kick.clear()

    async def _flush_pending(self) -> None:
        batch, self._pending = self._pending[:FLUSH_MOST], self._pending[FLUSH_MOST:]
        self._flushing = len(batch)
        try:
            await self._write(batch)
        finally:
            self._flushing = 0
            self._flushed.set()
            self._flushed = asyncio.Event()

    async def _write(self, batch: Pending) -> None:
        settled: list[bool | Exception] = []
        for attempt in range(1, FLUSH_ATTEMPTS + 1):
            try:
                settled = list(await self._flush(batch))
            except Exception as err:
                if attempt < FLUSH_ATTEMPTS and self.backend.race_lost(err):
                    continue  # a deadlock the server broke: nothing was written
                settled = [err] * len(batch)
            break
        for (op, values, written), result in zip(batch, settled, strict=True):
            try:
                written(result)
            except Exception:  # one owner's failure must not stop the flushes of the others
                log.exception("%s: reporting the %s of row %s failed",
                              self.calls.descriptor.table, op, values.get("id"))

    async def _flush(self, batch: Pending) -> list[bool]:
        settled = [False] * len(batch)
        indexed = by_op([(op, (i, values)) for i, (op, values, _) in enumerate(batch)])
        steps: list[Step] = []
        reads = []
        for op, items in indexed.items():
            planned, read = self.calls.plan(op, [values for _, values in items])
            reads.append((items, len(planned), read))
            steps += planned
        results = await self.backend.alone(steps)  # one round trip or call where it can
        at = 0
        for items, n, read in reads:
            changed = read(results[at:at + n])
            at += n
            assert changed is not None  # a lease's batch names the rows it changed
            for (i, _), ok in zip(items, changed, strict=True):
                settled[i] = ok
        return settled
