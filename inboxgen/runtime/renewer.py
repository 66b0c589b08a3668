"""Renewal of all of a worker's leases together.

One task per worker renews every lease held (the rows in work and those claimed and waiting
in their batch) in one statement per round (RENEW_MANY; one statement per row where the module
has none). A lease is renewed once half of it is left; leases that would need renewing within
another quarter of it go in the same round, so rows claimed round after round share their
renewals. A renewal that fails (a busy or lost connection) is tried again within a second, one
the server rolled back whole (a deadlock it broke; on a Galera cluster, another node's write of
one of its rows that certified first) at once; only one that finds the row taken ends the lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as _dt
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from inboxgen.runtime.outcomes import lease_expiry
from inboxgen.runtime.tasks import cancel_and_wait

if TYPE_CHECKING:
    from inboxgen.runtime.batching import Calls
    from inboxgen.runtime.clock import Clock

log = logging.getLogger("inboxgen.worker")

# How many renewals in a row the server may roll back (a deadlock, a certification conflict)
# and be tried again at once; after that, as any failure: within a second, with a warning.
RENEW_AGAIN = 3


class Leased(Protocol):
    """A row while it is held under a lease (the worker's _Held)."""

    id: Any
    attempt: int | None
    token: _dt.datetime | None  # the expiry written last: the ownership token
    lost: bool
    gone: bool  # lost because the row was deleted
    settling: bool  # its settlement has begun: no more renewals
    renewing: bool  # in a renewal on its way
    progress: Any  # what its handler last reported (a table with a progress column)


class LeaseRenewer:
    def __init__(self, calls: Calls, clock: Clock, lease: int, name: str,
                 transaction: Callable[[], contextlib.AbstractAsyncContextManager[Any]],
                 renewed: Callable[[int], None],
                 gone: Callable[[Any], Awaitable[bool]],
                 lost_connection: Callable[[Exception, str], bool],
                 race_lost: Callable[[BaseException], bool]) -> None:
        self.calls = calls
        self.clock = clock
        self.lease = lease
        self.name = name
        self._transaction = transaction
        self._renewed = renewed  # counts renewals in the worker's stats
        self._gone = gone  # whether a row is no longer in the table
        self._lost_connection = lost_connection  # the worker's outage: True when it is one
        self._race_lost = race_lost  # whether the server rolled a transaction back whole
        self._held: dict[int, Leased] = {}
        self._changed = asyncio.Event()
        self._round_ended = asyncio.Event()  # set when the renewal on its way has ended
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        # Of this event loop: a worker may serve again in another.
        self._changed, self._round_ended = asyncio.Event(), asyncio.Event()
        self._task = asyncio.create_task(self._run(), name=f"{self.name}:renew")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        self._held.clear()

    def hold(self, rows: list[Any]) -> None:
        for row in rows:
            self._held[id(row)] = row
        self._changed.set()

    def release(self, rows: list[Any]) -> None:
        for row in rows:
            self._held.pop(id(row), None)

    async def settling(self, row: Leased) -> None:
        """The row's settlement begins: no renewal after this. A renewal on its way with the
        row ends first, so the settlement reads the token that stands."""
        while row.renewing:
            await self._round_ended.wait()
        row.settling = True

    def _left(self, row: Leased) -> float:
        assert row.token is not None
        return (row.token - self.clock.now()).total_seconds()

    async def _run(self) -> None:
        again = 0  # renewals rolled back in a row
        while True:
            live = [r for r in self._held.values() if not (r.settling or r.lost)]
            if not live:
                self._changed.clear()
                await self._changed.wait()
                continue
            wait = min(self._left(r) for r in live) - self.lease / 2
            if wait > 0:
                sleep = asyncio.ensure_future(self.clock.sleep(wait))
                try:
                    # A new row is due no sooner than those held: only a wait that ends early
                    # (every held row settled) needs looking at again.
                    await sleep
                finally:
                    sleep.cancel()
                continue
            due = [r for r in live if self._left(r) <= self.lease * 3 / 4]
            try:
                if not await self._renew(due):
                    await asyncio.sleep(0.01)  # each is being settled: let that finish
                again = 0
            except asyncio.CancelledError:
                raise
            except Exception as err:
                if self._race_lost(err) and again < RENEW_AGAIN:
                    # Nothing was written, and the rows may well be ours still: the renewal
                    # itself tells, at once (a taken row ends its lease there).
                    again += 1
                    log.debug("%s: renewing the lease on %s was rolled back, trying again: %s",
                              self.name, _rows(due), err)
                    continue
                again = 0
                if not self._lost_connection(err, f"renewing the lease on {_rows(due)}"):
                    log.warning("%s: renewing the lease on %s failed, trying again in 1 s (it "
                                "holds until %s): %s", self.name, _rows(due),
                                min(r.token for r in due if r.token is not None), err)
                await self.clock.sleep(min(1.0, self.lease / 2))

    async def _renew(self, due: list[Leased]) -> bool:
        """Renew what of `due` is not being settled; False when that was nothing."""
        # The transaction first, then the rows are marked: on SQLite the transaction is the
        # process's write turn, and a settlement holding it must never wait for a renewal that
        # waits for it. A row being settled is left out; the marks stay until the renewal has
        # committed, so a settlement reads the new token only once it stands.
        rows: list[Leased] = []
        try:
            async with self._transaction() as conn:
                rows = [r for r in due if not (r.settling or r.lost or r.renewing)]
                if not rows:
                    return False
                self._round_ended = asyncio.Event()
                for row in rows:
                    row.renewing = True
                new = lease_expiry(self.clock.now(), self.lease)
                values = [{"id": r.id, "locked_until": r.token, "attempt": r.attempt,
                           "new_locked_until": new, "progress": r.progress} for r in rows]
                changed = await self.calls.many(conn, "renew", values)
            assert changed is not None  # a lease's batch names the rows it changed
            for row, ok, sent in zip(rows, changed, values, strict=True):
                if ok:
                    row.token = new
                    if row.progress is sent["progress"]:
                        row.progress = None  # written: later renewals need not send it again
                    continue
                # Counted and reported when the settlement finds it (still marked renewing, so
                # that waits for this).
                row.lost = True
                if await self._gone(row.id):
                    row.gone = True
                    log.debug("%s: row %s was deleted while its job ran", self.name, row.id)
                else:
                    log.warning("%s: lease on row %s lost before it could be renewed: another "
                                "worker may run it", self.name, row.id)
            renewed = sum(changed)
            self._renewed(renewed)
            if renewed:
                log.debug("%s: renewed the lease on %d row(s), until %s", self.name, renewed,
                          new)
            return True
        finally:
            for row in rows:
                row.renewing = False
            self._round_ended.set()


def _rows(rows: list[Leased]) -> str:
    ids = ", ".join(str(r.id) for r in rows[:5])
    return f"row {ids}" if len(rows) == 1 else f"rows {ids}{', ...' if len(rows) > 5 else ''}"
