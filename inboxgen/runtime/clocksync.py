"""The database's clock, for a worker on a host whose clock is off.

Every "now" the worker binds (due times, lease expiries, renewals) comes from its clock. With
the default clock on PostgreSQL and MySQL/MariaDB, that clock is a `DatabaseClock`: at start and
every few seconds the worker reads the server's time, takes this host's time halfway through
the round trip as the same instant, and keeps the difference as the clock's offset. A host 30 s
fast then neither claims a live lease nor runs a job before it is due. A test clock is never
corrected, and SQLite is one host: its process's clock is its clock.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import logging
import time
from typing import TYPE_CHECKING, Any

from inboxgen.runtime.clock import Clock, DatabaseClock, SystemClock
from inboxgen.runtime.connecting import first_line
from inboxgen.runtime.tasks import cancel_and_wait

if TYPE_CHECKING:
    from inboxgen.runtime.backends.base import Backend

log = logging.getLogger("inboxgen.worker")

SYNC_EVERY = 10.0  # seconds between readings of the server's clock
SAMPLES = 3  # readings per measurement: the one with the shortest round trip counts


async def offset_to(backend: Backend, conn: Any) -> _dt.timedelta | None:
    """How far the server's clock is ahead of this host's (None: the server has no clock of
    its own to read)."""
    best: tuple[float, _dt.timedelta] | None = None
    for _ in range(SAMPLES):
        sent = time.monotonic()
        local = _dt.datetime.now(_dt.UTC)
        server = await backend.server_now(conn)
        if server is None:
            return None
        trip = time.monotonic() - sent
        offset = server - (local + _dt.timedelta(seconds=trip / 2))
        if best is None or trip < best[0]:
            best = (trip, offset)
    # Once, after the readings: a round trip inside them would move the midpoint they assume.
    await backend.rollback(conn)
    assert best is not None
    return best[1]


def clock_for(given: Clock | None, backend: Backend) -> Clock:
    """A worker's clock: the one the caller gave (a test's, taken as it is), else the
    database's where the server has one, else this host's."""
    if given is not None:
        return given
    return DatabaseClock() if backend.server_clock else SystemClock()


class ClockSync:
    """Keeps a DatabaseClock's offset to the server's clock, and says when the host's clock
    is off by more than a fraction of the lease (the hazard it corrects). Of any other clock it
    does nothing: each method returns at once."""

    def __init__(self, clock: Clock, backend: Backend, name: str, lease_seconds: int) -> None:
        self.clock = clock if isinstance(clock, DatabaseClock) else None
        self.backend = backend
        self.name = name
        # Past this, the host's own clock would have claimed live leases or run jobs early.
        self.warn_past = max(1.0, lease_seconds / 4)
        self._warned: float | None = None  # the offset last warned about
        self._task: asyncio.Task[None] | None = None

    async def measure(self, conn: Any) -> None:
        """Read the server's clock on `conn` (the worker's start-up check does, once)."""
        if self.clock is None:
            return
        offset = await offset_to(self.backend, conn)
        if offset is None:
            return
        self.clock.offset = offset
        seconds = offset.total_seconds()
        if abs(seconds) < self.warn_past:
            return
        if self._warned is None or abs(seconds - self._warned) >= self.warn_past:
            self._warned = seconds
            log.warning("%s: this host's clock is %.1f s %s the database's (%s); due times "
                        "and leases follow the database's clock", self.name, abs(seconds),
                        "behind" if seconds > 0 else "ahead of", self.backend.label)

    def start(self) -> None:
        """Read the server's clock every SYNC_EVERY seconds, until `stop()`."""
        if self.clock is not None:
            self._task = asyncio.create_task(self._run(), name=f"{self.name}:clock")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(SYNC_EVERY)
            try:
                async with self.backend.connection() as conn:
                    await self.measure(conn)
            except Exception as err:  # the offset stands; an outage is told elsewhere
                log.debug("%s: reading the database's clock failed: %s", self.name,
                          first_line(err))
