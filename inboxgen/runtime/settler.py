"""Lease settlements of all of a worker's slots, written together.

A settlement waits here while another flush is on its way; each flush is one transaction and
one round trip (psycopg pipeline mode: BEGIN, one executemany of each generated statement, and
COMMIT), and each caller learns whether its own row settled, so only the rows whose lease was
taken get LeaseLost. Settlements are token-guarded, so one that misses its row changes nothing
and the others of the flush still commit.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

from inboxgen.runtime.batching import bind_many, by_op

if TYPE_CHECKING:
    from inboxgen.descriptor import TableDescriptor
    from inboxgen.runtime.backends import Backend


class LeaseSettler:
    def __init__(self, descriptor: TableDescriptor, backend: Backend) -> None:
        self.descriptor = descriptor
        self.backend = backend
        self._pending: list[tuple[str, dict[str, Any], asyncio.Future[bool]]] = []
        self._kick = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    def start(self) -> None:
        self._closing = False
        self._task = asyncio.create_task(self._run(), name=f"{self.descriptor.table}:settle")

    async def stop(self) -> None:
        """Write what is queued (a flush on its way ends first), then end."""
        if self._task is None:
            return
        self._closing = True
        self._kick.set()
        with contextlib.suppress(Exception):
            await self._task
        self._task = None

    async def settle(self, op: str, values: dict[str, Any]) -> bool:
        """Queue one settlement and wait for its flush: True when it changed its row."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._pending.append((op, values, future))
        self._kick.set()
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
        batch, self._pending = self._pending, []
        try:
            settled = await self._flush(batch)
        except Exception as err:
            for _, _, future in batch:
                if not future.done():
                    future.set_exception(err)
            return
        for (_, _, future), ok in zip(batch, settled, strict=True):
            if not future.done():
                future.set_result(ok)

    async def _flush(self, batch: list[tuple[str, dict[str, Any], asyncio.Future[bool]]]
                     ) -> list[bool]:
        settled = [False] * len(batch)
        indexed = by_op([(op, (i, values)) for i, (op, values, _) in enumerate(batch)])
        async with self.backend.session() as conn, self.backend.pipeline(conn) as pipe:
            await self.backend.execute(conn, "BEGIN")
            cursors = []
            for op, items in indexed.items():
                bound = bind_many(self.descriptor, op, [values for _, values in items])
                assert bound is not None  # the worker sends only what binds (bind_many)
                cursors.append(([i for i, _ in items],
                                await self.backend.execute_many(conn, *bound, returning=True)))
            await self.backend.execute(conn, "COMMIT")
            await self.backend.sync(pipe)
        for indexes, cursor in cursors:
            for i, count in zip(indexes, self.backend.row_counts(cursor), strict=True):
                settled[i] = count == 1
        return settled
