"""What a claim form is, and the plumbing every form shares.

A form says how a slot claims and works a round, how a delivery in a transaction and a
settlement run, and what a row still in work is left as at shutdown. It gets the parts it works
with (`Parts`) and asks the worker that runs its slots only what `Slots` says: to wait, to wake,
whether it is stopping, and which rows are in work. Each delivery runs through the form's
`Delivery` (delivery.py), which settles through the form's steps.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from inboxgen.runtime.batching import by_op
from inboxgen.runtime.claimstart import Start
from inboxgen.runtime.connecting import first_line
from inboxgen.runtime.delivery import Delivery
from inboxgen.runtime.jobs import Held
from inboxgen.runtime.outcomes import FINISH, Settlement
from inboxgen.runtime.priorities import PriorityChoice

if TYPE_CHECKING:
    from inboxgen.descriptor import TableDescriptor
    from inboxgen.runtime.backends.base import Backend, ServerOffers
    from inboxgen.runtime.batching import Calls
    from inboxgen.runtime.clock import Clock
    from inboxgen.runtime.handlers import HandlerRunner
    from inboxgen.runtime.jobs import Stats
    from inboxgen.runtime.observe import Observation
    from inboxgen.runtime.outage import Outage
    from inboxgen.runtime.presence import Presence
    from inboxgen.runtime.settings import Settings

log = logging.getLogger("inboxgen.worker")

Pending = list[tuple[str, dict[str, Any]]]  # settlements waiting to run together


class Slots(Protocol):
    """What a form asks of the worker that runs its slots."""

    @property
    def stopping(self) -> bool:
        """Told to stop: claim no more."""
        ...

    async def until_stopped(self) -> None: ...

    async def stopped_within(self, seconds: float) -> bool:
        """Wait up to `seconds`; True as soon as the worker is told to stop."""
        ...

    async def wait(self, index: int, seconds: float) -> None:
        """Task `index` waits for work: the poll interval, a wake-up, or the stop."""
        ...

    def wake_waiting_slot(self) -> bool:
        """Wake one task waiting for work; False when none waits."""
        ...

    def wake_one(self) -> None: ...

    def idle(self, index: int, waiting: bool) -> None:
        """Task `index` waits for work of the form's own (or no longer)."""
        ...

    def took(self, n: int) -> None:
        """`n` rows are in work from now on (a shutdown waits for them)."""
        ...

    def done(self, n: int) -> None:
        """`n` rows are no longer in work."""
        ...


@attrs.frozen
class Parts:
    """What a form works with."""

    descriptor: TableDescriptor
    settings: Settings
    clock: Clock
    backend: Backend
    calls: Calls
    stats: Stats
    outage: Outage
    presence: Presence
    runner: HandlerRunner
    slots: Slots
    observation: Observation | None = None  # None: nobody watches (observe.py)


class Form:
    # Shutdown: what becomes of rows still in work when their jobs are cancelled.
    unfinished = ""
    # Whether the form holds locks on one server session across transactions (advisory), which
    # a transaction pooler cannot give.
    needs_one_session = False
    # Tasks of the form's own that wait for work (their places among the worker's waiting
    # tasks): the worker is quiet only when they wait too.
    waiters: frozenset[int] = frozenset()

    def __init__(self, parts: Parts) -> None:
        self.d = parts.descriptor
        self.settings = parts.settings
        self.name = parts.settings.name
        self.clock = parts.clock
        self.backend = parts.backend
        self.calls = parts.calls
        self.stats = parts.stats
        self.outage = parts.outage
        self.presence = parts.presence
        self.slots = parts.slots
        self.observation = parts.observation
        self._due = self.d.role_attrs.get("retry_after")  # what the queue's lag is read from
        self.priorities = PriorityChoice(self.calls, self.settings.group)
        self.delivery = Delivery(descriptor=self.d, settings=self.settings, clock=self.clock,
                                 runner=parts.runner, backend=self.backend, calls=self.calls,
                                 stats=self.stats, outage=self.outage, form=self,
                                 done=self.slots.done, observation=parts.observation)

    @property
    def full_claim(self) -> int:
        """How many rows a claim that leaves rows due brings: `batch`, or one where a claim
        takes its FIFO group's head alone (a claim of fewer says the queue looked drained)."""
        return 1 if self.d.fifo else self.settings.batch

    @property
    def connections(self) -> int:
        """How many connections the form keeps busy at once: one per slot."""
        return self.settings.workers

    def claim_resources(self) -> None:
        """Before the worker's connections open: what the form holds outside the database."""

    def offered(self, offers: ServerOffers) -> None:
        """What the server offers (Backend.check_server), before the first claim."""

    def release_resources(self) -> None:
        """After the worker's connections closed (or its start failed)."""

    def start(self) -> None:
        """Once the statements are prepared: tasks of the form's own."""

    async def stop(self) -> None:
        """Once the slots have ended."""

    async def serve(self, index: int, worked: Callable[[], None]) -> None:
        """One round of slot `index`: claim, deliver, settle; then wait for the poll interval
        when the queue looked drained, or wake a waiting slot when the claim came back full."""
        drained = await self.round()
        worked()
        if drained:
            await self.slots.wait(index, self.settings.poll_interval)
        else:
            self.slots.wake_waiting_slot()  # a full claim: more rows are likely due

    async def round(self) -> bool:
        """Claim and work one batch; True when the queue looked drained."""
        raise NotImplementedError

    async def deliver_in_transaction(self, h: Held, payload: Any, conn: Any | None) -> None:
        """Run the handler with a connection whose writes commit with the ack, and settle."""
        raise NotImplementedError

    async def settle(self, h: Held, s: Settlement, conn: Any | None) -> None:
        """Execute settlement `s` of row `h` (the delivery counts it)."""
        raise NotImplementedError

    async def write(self, op: str, values: dict[str, Any]) -> bool:
        """A settlement of a row no connection of the worker holds, in a transaction of its
        own; True when it found its row."""
        async with self.transaction() as tx:
            return bool(await self.calls(tx, op, **values))

    def undecodable(self, h: Held) -> Settlement:
        """A payload that does not decode, on a table with neither a dead-letter destination
        nor a retry_after column: dropped rather than looped on."""
        log.error("%s: row %s dropped: its payload does not decode and the table has neither a "
                  "dead-letter destination nor a retry_after column", self.name, h.id)
        return Settlement(FINISH, note="drop")

    def lost(self, held: list[Held], err: BaseException) -> None:
        """A batch's transaction ended without its commit (a lost connection): what its rows
        settled is undone, and they will run again."""
        ids = ", ".join(str(h.id) for h in held[:10]) + (", ..." if len(held) > 10 else "")
        self.stats.settlements_lost += len(held)
        # In an outage, counted in the line that ends it.
        quiet = self.outage.lost_connection(err, "settlements") and \
            self.outage.settlements_lost(len(held))
        (log.debug if quiet else log.error)(
            "%s: the settlements of row(s) %s were lost with their transaction (%s); those rows "
            "will run again", self.name, ids, first_line(err))

    async def missed(self, h: Held, op: str) -> None:
        """A settlement changed no row: raises RowDeleted when the row is gone."""
        if await self.presence.gone(h.id):
            raise self.delivery.row_deleted(h, op)
        log.warning("%s: %s of row %s changed no row", self.name, op, h.id)

    # -- the plumbing every form shares -----------------------------------------------------

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Any]:
        async with self.backend.connection() as conn:
            await self.backend.begin(conn)
            try:
                yield conn
            except BaseException:
                await self.backend.rollback(conn)
                raise
            await self.backend.commit(conn)

    def claim_failed(self, err: Exception) -> None:
        """One line when claims start failing (a server restart, a lost connection); the
        further failures of the same outage are debug lines (outage.py)."""
        self.outage.claim_failed(err)

    def claim_worked(self) -> None:
        if self.outage.open is not None:
            self.outage.worked()

    async def claim(self, conn: Any, now: _dt.datetime, limit: int,
                    until: _dt.datetime | None = None, start: Start = None) -> list[Any]:
        if await self.nothing_to_claim(conn, now):
            return []
        op, values = self.claim_call(now, limit, until, start)
        started = time.monotonic()
        rows = self.claimed(await self.calls(conn, op, **values))
        self.claim_came(rows, limit, started)
        return rows

    async def nothing_to_claim(self, conn: Any, now: _dt.datetime) -> bool:
        """Choose the claim (once a second: one round trip more) and say whether it keeps to
        a list of priorities none of which has due rows (nothing_due): then no claim is sent,
        and the list is read again before the next."""
        await self.priorities.choose(conn, now)
        return self.nothing_due()

    def nothing_due(self, *, read_again: bool = True) -> bool:
        """Whether the claim keeps to a list of priorities and the last list read had none: the
        claim is not sent (it would take nothing), the observers hear that nothing waits, and
        with `read_again` the list is read before the next claim, as after one that came back
        short (an advisory read, short by design, waits for the next count)."""
        if not self.priorities.none_due:
            return False
        if read_again:
            self.priorities.came_short()
        if self.observation is not None and self._due is not None:
            self.observation.lag(0.0)
        return True

    def claim_came(self, rows: list[Any], limit: int, started: float) -> None:
        """A claim of `limit` rows begun at `started` (time.monotonic()) took `rows`: its
        observers hear of it, and one that came back short has the priorities it keeps to
        read again (MySQL)."""
        if len(rows) < limit:
            self.priorities.came_short()
        self.observed_claim(rows, limit, started)

    def observed_claim(self, rows: list[Any], limit: int, started: float) -> None:
        """Tell the observers of a claim begun at `started` (time.monotonic()) that asked for
        `limit` rows, and of the lag it shows: the oldest claimed row's time since it was due,
        or 0 when the claim came back short (nothing due is left waiting)."""
        o = self.observation
        if o is None:
            return
        o.claimed(len(rows), time.monotonic() - started)
        if self._due is None:
            return
        if len(rows) < limit:
            o.lag(0.0)
        elif rows:
            due = min(getattr(r, self._due) for r in rows)
            o.lag(max((self.clock.now() - due).total_seconds(), 0.0))

    @staticmethod
    def claimed(result: Any) -> list[Any]:
        """A claim's rows (a FIFO claim returns one row or None)."""
        if isinstance(result, list):
            return result
        return [] if result is None else [result]

    def claim_call(self, now: _dt.datetime, limit: int, until: _dt.datetime | None = None,
                   start: Start = None) -> tuple[str, dict[str, Any]]:
        """The claim statement to run and its values (FIFO: the group's head alone; `start`:
        where a claim that takes a start starts, None at the head)."""
        group = self.settings.group
        if self.d.fifo:
            return "fifo_claim", {"group": group, "now": now, "locked_until": until}
        return "claim", {"group": group, "now": now, "locked_until": until, "limit": limit,
                         "by_priority": self.priorities.by_priority,
                         **self.priorities.claim_values(), **(start or {})}

    def held(self, row: Any, **extra: Any) -> Held:
        attrs_ = self.d.role_attrs
        attempt = getattr(row, attrs_["attempt"]) if "attempt" in attrs_ else None
        return Held(row, getattr(row, attrs_["id"]), attempt, **extra)

    async def deliver_all(self, held: list[Held], conn: Any | None = None) -> None:
        """Deliver claimed rows one after another; rows a broken round never reached leave the
        in-work count too."""
        self.slots.took(len(held))
        started = 0
        try:
            await self.delivery.read_after(held, conn)
            for h in held:
                started += 1
                await self.delivery.deliver(h, conn)
        finally:
            self.slots.done(len(held) - started)

    async def settle_together(self, conn: Any, pending: Pending) -> None:
        """Run settlements that waited for each other on `conn`, each kind together (acks as
        one statement where the module has it)."""
        for op, many in by_op(pending).items():
            await self.calls.many(conn, op, many)
        pending.clear()
