"""Which claim a table with priorities and due times runs: the plain one, or its twin that reads
the due rows priority by priority (CLAIM_BY_PRIORITY and CANDIDATES_BY_PRIORITY, PostgreSQL).

The plain claim reads the claim index (priority, retry_after, id) in one scan, so it reads past
every row due later at a more urgent priority than the due rows it takes: behind a million
of them a claim reads them all. Its twin skips them with one index probe per priority, but
the server plans it anew at every call (as it plans every claim), and that costs a claim of an
ordinary table a quarter more. So a worker counts the table's rows due later (SCHEDULED, which
stops counting at WALK_FROM) once every CHECK_EVERY seconds, and claims by priority while there
are WALK_FROM or more. Below that, reading past them costs the plain claim less than the twin's
planning does (about 8,000 index entries on PostgreSQL 15; docs/performance.md).

Both claims take the same rows: the choice changes what a claim costs, never what it claims.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from inboxgen.runtime.batching import Calls

WALK_FROM = 5000
CHECK_EVERY = 1.0


class PriorityChoice:
    """One worker's choice between the plain claim and the claim by priority."""

    def __init__(self, calls: Calls, group: str | None) -> None:
        self._calls = calls
        self._group = group
        self.counts = calls.has("scheduled")  # modules built before the twin have one claim
        self.by_priority = False
        self._next = 0.0  # time.monotonic() of the next count: the first claim counts
        self._counting: asyncio.Future[None] | None = None  # a slot's count under way

    def count_due(self, now: _dt.datetime) -> dict[str, Any] | None:
        """The values of the next count (SCHEDULED) when the last is CHECK_EVERY old, else
        None: one slot counts, the others claim as the last count said."""
        if not self.counts or time.monotonic() < self._next:
            return None
        self._next = time.monotonic() + CHECK_EVERY
        return {"group": self._group, "now": now, "limit": WALK_FROM}

    def counted(self, later: int) -> None:
        """What the count said: `later` rows due later (WALK_FROM at most)."""
        self.by_priority = later >= WALK_FROM

    async def choose(self, conn: Any, now: _dt.datetime) -> None:
        """Count the rows due later on `conn` when a count is due. While another slot counts,
        wait for its count: at a worker's start no slot claims before the first one."""
        if self._counting is not None:
            await asyncio.shield(self._counting)
            return
        values = self.count_due(now)
        if values is None:
            return
        self._counting = counting = asyncio.get_running_loop().create_future()
        try:
            self.counted(await self._calls(conn, "scheduled", **values))
        finally:
            self._counting = None
            if not counting.done():
                counting.set_result(None)  # a failed count too: the others claim as before
