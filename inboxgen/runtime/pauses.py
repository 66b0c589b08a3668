"""Pausing a queue ([flow] pauses) through a worker: the module's pause(), resume() and
paused(), run and committed on the worker's own connections.

A pause is a row of the table's pause table; every claim statement of the table takes nothing
while a row names the queue (or the worker's group), so a pause holds for every worker of every
process from its commit on, and jobs in work finish. Resuming deletes the row; this worker's
slots claim at once (on PostgreSQL the generated resume() also notifies the listening ones).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from inboxgen.descriptor import TableDescriptor
from inboxgen.errors import WorkerConfigError, WorkerError
from inboxgen.runtime.backends import Backend
from inboxgen.runtime.batching import Calls


class Pauses:
    """A worker's view of its table's pauses (`worker.pauses`)."""

    def __init__(self, descriptor: TableDescriptor, calls: Calls, backend: Backend,
                 where: Mapping[str, str], connected: Callable[[], bool],
                 wake: Callable[[], None]) -> None:
        self._grouped = "group" in descriptor.roles
        self._calls, self._backend, self._where = calls, backend, dict(where)
        self._connected, self._wake = connected, wake

    async def pause(self, group: str | None = None) -> None:
        """Pause the table's queue (`group` None) or one of its groups, for every worker of
        every process: their claims take none of its jobs until resumed. Jobs in work
        finish."""
        await self._run("pause", group)

    async def resume(self, group: str | None = None) -> bool:
        """Lift a pause of the queue (`group` None; groups paused on their own stay paused) or
        of one group; returns whether there was one. This worker claims at once, others
        within their poll interval (on PostgreSQL, as the resume commits)."""
        lifted = bool(await self._run("resume", group))
        self._wake()
        return lifted

    async def paused(self) -> list[str | None]:
        """What is paused: None for the whole queue, else each paused group."""
        found: list[str | None] = await self._run("paused", None)
        return found

    async def _run(self, op: str, group: str | None) -> Any:
        if not self._calls.has(op):
            raise WorkerConfigError("the table has no pause table: name one in its spec's "
                                    "[flow] pauses and build again", **self._where)
        if group is not None and not self._grouped:
            raise WorkerConfigError(f"the table has no groups: pause or resume it whole, not "
                                    f"group {group!r}", **self._where)
        if not self._connected():
            raise WorkerError("start the worker before pausing or resuming through it (or "
                              "call the module's pause() / resume() on a connection of yours)",
                              **self._where)
        values = {} if group is None else {"group": group}
        (result,) = await self._backend.alone([self._calls.step(op, values)])
        return result
