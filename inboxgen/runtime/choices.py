"""A worker's choice between a claim statement and its twin that reads fewer rows where the
table's rows lie a certain way: made from a count the worker reads once every CHECK_EVERY
seconds (one slot counts; the others claim as the last count said).

Its uses: the claim by priority behind many rows due later (priorities.py: the same rows, read
otherwise), and a key-limited claim's walk over the keys where the rows ahead belong to keys at
their limit (limits.py: within the same limits, taking turns across keys).
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from inboxgen.runtime.batching import Calls

CHECK_EVERY = 1.0


class CountedChoice:
    """Whether to claim with the twin: while the last count of `op` (read with `limit` =
    `look_ahead`) reached `walk_from`."""

    def __init__(self, calls: Calls, group: str | None, op: str, walk_from: int,
                 look_ahead: int | None = None) -> None:
        self._calls = calls
        self._group = group
        self.op = op
        self._walk_from = walk_from
        self._look_ahead = walk_from if look_ahead is None else look_ahead
        self.counts = calls.has(op)  # modules built before the twin have one claim
        self.walks = False
        self._next = 0.0  # time.monotonic() of the next count: the first claim counts
        self._counting: asyncio.Future[None] | None = None  # a slot's count under way

    def count_due(self, now: _dt.datetime) -> dict[str, Any] | None:
        """The values of the next count when the last is CHECK_EVERY old, else None."""
        if not self.counts or time.monotonic() < self._next:
            return None
        self._next = time.monotonic() + CHECK_EVERY
        return {"group": self._group, "now": now, "limit": self._look_ahead}

    def counted(self, n: Any) -> None:
        """What the count said."""
        self.walks = n >= self._walk_from

    def then(self) -> str | None:
        """What the worker reads next, with the count's values, where the count calls for a
        read more (then_read() takes its result); None: nothing."""
        return None

    def then_read(self, result: Any) -> None:
        """What the read then() named returned."""

    def recount(self) -> None:
        """Count again before the next claim."""
        self._next = 0.0

    async def choose(self, conn: Any, now: _dt.datetime) -> None:
        """Count on `conn` when a count is due. While another slot counts, wait for its count:
        at a worker's start no slot claims before the first one."""
        async def read(op: str, values: dict[str, Any]) -> Any:
            return await self._calls(conn, op, **values)

        await self.choose_with(read, now)

    async def choose_with(self, read: Callable[[str, dict[str, Any]], Awaitable[Any]],
                          now: _dt.datetime, count_takes: dict[str, Any] | None = None) -> None:
        """choose(), each statement run by `read(op, values)`; `count_takes`: values the count
        takes besides its own (a key-limited lease's count of held-back rows reads by priority
        where its claim does)."""
        if self._counting is not None:
            await asyncio.shield(self._counting)
            return
        values = self.count_due(now)
        if values is None:
            return
        self._counting = counting = asyncio.get_running_loop().create_future()
        try:
            self.counted(await read(self.op, {**values, **(count_takes or {})}))
            then = self.then()
            if then is not None:
                self.then_read(await read(then, values))
        finally:
            self._counting = None
            if not counting.done():
                counting.set_result(None)  # a failed count too: the others claim as before
