"""Lease: the claim writes an expiry, the ownership token, and commits at once.

Every settlement and renewal is guarded by the token (and the attempt, where the table has
one); one that finds the row taken by another worker changes nothing and raises LeaseLost. The
settlements of all of the worker's slots are written together (settler.py) and its leases
renewed together (renewer.py). A crash leaves the rows leased until their leases end.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as _dt
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from inboxgen.errors import LeaseLost, RowDeleted, SettlementLost
from inboxgen.runtime.batching import one_statement
from inboxgen.runtime.claimstart import ClaimStart, Start, claims_from_id
from inboxgen.runtime.connecting import first_line, retry_delay
from inboxgen.runtime.forms.base import Form, Parts
from inboxgen.runtime.limits import KeyChoice, claim_in_turn, fair_turns, limited
from inboxgen.runtime.outcomes import FINISH, PARK, Settlement, lease_expiry
from inboxgen.runtime.renewer import LeaseRenewer
from inboxgen.runtime.settler import FLUSH_MOST, LeaseSettler
from inboxgen.runtime.tasks import cancel_and_wait

if TYPE_CHECKING:
    from inboxgen.runtime.jobs import Held

log = logging.getLogger("inboxgen.worker")

CLAIMER = -1  # the claimer's place among the worker's waiting tasks (slots are 0, 1, ...)

_KIND = {"finish": "ack", "retry": "retry", "retry_after": "retry",
         "dead_letter": "dead letter"}

# How many fair claims in a row a claimer makes while each takes nothing and walks past keys
# with nothing due (all in work, or due later) before it waits for the poll: the walk goes on
# from there at the next, and a queue of many such keys costs a few claims a poll, not a walk
# over all of them.
FAIR_WALKS_AHEAD = 8


class Lease(Form):
    """A claimer task claims for all of the worker's slots: one statement takes as many rows
    as the slots have room for (`workers * batch` rows held at most) and the slots take them
    one at a time. A slot hands each settlement to the settler and goes on with its next row;
    the flush then counts the settlement or reports it lost. A slot whose handler has finished
    makes room at once, so the next claim is on its way while the last settlements are
    written. FIFO tables claim otherwise (FifoLease)."""

    unfinished = "their leases stay: the rows return when the leases end"
    waiters = frozenset({CLAIMER})

    def __init__(self, parts: Parts) -> None:
        super().__init__(parts)
        settings = parts.settings
        self.settler = LeaseSettler(self.calls, self.backend)
        self.renewer = LeaseRenewer(self.calls, self.clock, settings.lease, self.name,
                                    self.transaction, self._renewed, self.presence.gone,
                                    self.outage.lost_connection, self.backend.race_lost)
        self._capacity = settings.workers * settings.batch
        self._ready: asyncio.Queue[Held | None] = asyncio.Queue()
        self._working = 0  # rows taken by slots whose handlers have not finished
        self._room = asyncio.Event()  # set when a handler finishes
        self._claimer: asyncio.Task[None] | None = None
        # Where the next claim starts, for a CLAIM that takes `from_id` (PostgreSQL tables
        # claimed in id order).
        self._start = ClaimStart(self.d) if claims_from_id(self.d) else None
        self._limited = limited(self.d)  # [flow] limits: claims take turns
        self._fair = fair_turns(self.d, self.settings.group)  # [flow] fair: the walk's place
        # [flow] key_concurrency: whether claims walk the keys (while rows of keys at their
        # limit stand ahead), and the walk's place.
        self.keys = KeyChoice(self.calls, self.settings.group)
        self._key_walk = fair_turns(self.d, self.settings.group, "CLAIM_BY_KEY")
        # Settlements the settler wrote that changed nothing: whether their rows are gone is
        # read before they are reported, MISSED_READS at a time (_start_claimer).
        self._checks: set[asyncio.Future[None]] = set()
        self._check_turns = asyncio.Semaphore(MISSED_READS)

    @property
    def connections(self) -> int:
        # The claimer, the settler and the renewer; transactional jobs hold one each.
        return self.settings.workers if self.settings.transactional else 3

    def _renewed(self, n: int) -> None:
        self.stats.renewed += n
        self.outage.worked()

    def start(self) -> None:
        self.settler.start()
        self.renewer.start()
        self._start_claimer()

    def _start_claimer(self) -> None:
        # Of this event loop: a worker may serve again in another.
        self._ready, self._room, self._working = asyncio.Queue(), asyncio.Event(), 0
        self._check_turns = asyncio.Semaphore(MISSED_READS)
        self._claimer = asyncio.create_task(self._claim_rounds(), name=f"{self.name}:claim")

    async def stop(self) -> None:
        await cancel_and_wait(self._claimer)
        self._claimer = None
        while not self._ready.empty():  # claimed, never started (a shutdown that hurried)
            h = self._ready.get_nowait()
            if h is not None:
                self.slots.done(1)
        await self.renewer.stop()
        await self.settler.stop()
        while self._checks:
            await asyncio.gather(*self._checks, return_exceptions=True)

    # -- claims for every slot (the claimer) ----------------------------------------------

    async def _claim_rounds(self) -> None:
        slots = self.slots
        failures = 0
        empty_walks = 0  # fair claims in a row that took nothing, passing keys with nothing due
        try:
            while not slots.stopping:
                if self.settler.unsettled >= FLUSH_MOST:
                    # Settlements fall behind: their rows' leases are not renewed while they
                    # wait, so claim no more until a flush has written some (settler.py).
                    await _first(self.settler.flushed(), slots.until_stopped())
                    continue
                room = self._capacity - self._working - self._ready.qsize()
                if room <= 0 or (not self._ready.empty() and room < self._capacity / 2):
                    # Wait for handlers to finish: claim for a few slots at once, not one by
                    # one, while rows are still waiting for a slot.
                    self._room.clear()
                    await _first(self._room.wait(), slots.until_stopped())
                    continue
                try:
                    got = await self._claim_for(room)
                except Exception as err:
                    failures += 1
                    self.claim_failed(err)
                    await slots.wait(CLAIMER, retry_delay(failures))
                    continue
                failures = 0
                self.claim_worked()
                if (self._limited or self._fair is not None) and 0 < got < room:
                    # The limits may have kept fewer rows than the claim read; a fair walk
                    # that reached the last key starts again from the first.
                    continue
                walk = self._key_walk if self.keys.by_key else self._fair
                passed = got == 0 and walk is not None and walk.passed_over
                empty_walks = empty_walks + 1 if passed else 0
                if passed and empty_walks < FAIR_WALKS_AHEAD:
                    continue  # its walk passed keys with nothing due: the next keys may have
                if got < room:
                    # Drained (or, limited, full): until a wake-up.
                    await slots.wait(CLAIMER, self.settings.poll_interval)
        finally:
            for _ in range(self.settings.workers):
                self._ready.put_nowait(None)  # each slot ends after the rows before it

    async def _claim_for(self, limit: int) -> int:
        """Claim up to `limit` rows into the slots' queue; returns how many came. Where the
        claim takes a start (ClaimStart), a claim from there that comes back short claims the
        rest from the head at once: rows behind the start are due too."""
        if self._start is None or self.keys.by_key:  # (a walk over the keys takes no start)
            return len((await self._claim_once(limit, None))[0])
        start = self._start.at()
        got, seconds = await self._claim_once(limit, start)
        if seconds is None:
            return 0  # no claim sent: nothing is due (nothing_due)
        self._start.took(start, got, limit, seconds)
        # Short from a start, took() went back to the head. A limited claim that kept rows is
        # claimed again at once by the claimer's loop (the limits may have cut it short): a
        # claim from the head here would be a second one.
        if start is not None and len(got) < limit and not (self._limited and got):
            more, seconds = await self._claim_once(limit - len(got), None)
            if seconds is not None:
                self._start.took(None, more, limit - len(got), seconds)
            return len(got) + len(more)
        return len(got)

    async def _claim_once(self, limit: int, start: Start) -> tuple[list[Any], float | None]:
        """One claim of up to `limit` rows (from `start` on, where the claim takes one) into
        the slots' queue; returns the rows claimed, in claim order, and the seconds the claim
        statement took (the counts a worker makes once a second left out; None: no claim was
        sent)."""
        now, until = self._lease_from_now()
        # Once a second, where the table has a claim by priority or a walk over the keys: the
        # count of rows due later first, as the count of the keys' held-back rows reads as the
        # claim does (by priority, or in one scan).
        for choice in (self.priorities, self.keys):
            walk = {"by_priority": self.priorities.by_priority, **self.priorities.claim_values()}
            await choice.choose_with(self._read_alone, now, walk)
        if self.nothing_due():
            return [], None
        op, values = self.claim_call(now, limit, until)
        step = self.calls.step(op, {**values, **(start or {}), "by_key": self.keys.by_key})
        started = time.monotonic()
        # A walk over the key's values runs its generic plan, and so does the claim by
        # priority on PostgreSQL (runtime/priorities.py): a limited claim in its transaction
        # (under the turn), one statement alone (a fair claim without limits, a claim by
        # priority) with the setting in one round trip (Backend.alone_planned_once).
        # (Elsewhere the setting is nothing: Backend.alone_planned_once is `alone`.)
        generic_plan = self._fair is not None or self.keys.by_key or self.priorities.by_priority
        if self._limited:
            result = await claim_in_turn(self.backend, self.calls, step,
                                         generic_plan=generic_plan)
        elif generic_plan:
            result = await self.backend.alone_planned_once(step)
        else:
            # One statement standing alone: on PostgreSQL an autocommit statement, on a
            # threaded driver a transaction of its own in one call.
            (result,) = await self.backend.alone([step])
        rows = self.claimed(result)
        seconds = time.monotonic() - started
        self.claim_came(rows, limit, started)
        self.slots.took(len(rows))  # in work from the claim on: a shutdown waits for them
        held = self._hold(rows, until)
        try:
            await self.delivery.read_after(held, None)  # `after`: a batch's waiting rows at once
        finally:
            for h in held:  # (a stop that cancels the read still finds them there)
                self._ready.put_nowait(h)
        return [h.row for h in held], seconds

    async def _read_alone(self, op: str, values: dict[str, Any]) -> Any:
        """A count's read, one statement standing alone (Backend.alone)."""
        (result,) = await self.backend.alone([self.calls.step(op, values)])
        return result

    async def serve(self, index: int, worked: Callable[[], None]) -> None:
        """Slot `index`: deliver rows from the claimer, one handler at a time in claim order,
        until the claimer ends. Settlements do not hold the slot up: each goes with the
        settler's next flush while the slot runs the next handler."""
        slots = self.slots
        failures = 0
        while True:
            if self._ready.empty():
                slots.idle(index, True)
                try:
                    h = await self._ready.get()
                finally:
                    slots.idle(index, False)
            else:
                h = self._ready.get_nowait()  # no turn of the event loop per row
            if h is None:
                return  # the claimer has ended: the worker stops
            self._working += 1
            try:
                await self.delivery.deliver(h)
                failures = 0
            except Exception as err:  # its transaction broke (a transactional handler's)
                failures += 1
                self.claim_failed(err)
                await slots.stopped_within(retry_delay(failures))
            finally:
                self._handled(h)
                self.renewer.release([h])

    def _handled(self, h: Held) -> None:
        """The row's handler has finished (its settlement may still be on its way): its slot
        has room for the next claim."""
        if not h.handled:
            h.handled = True
            self._working -= 1
            self._room.set()

    # -- both -----------------------------------------------------------------------------

    def _lease_from_now(self) -> tuple[_dt.datetime, _dt.datetime]:
        """Now, and the end of a lease claimed now (the claimed rows' token)."""
        now = self.clock.now()
        return now, lease_expiry(now, self.settings.lease)

    def _hold(self, rows: list[Any], until: _dt.datetime) -> list[Held]:
        held = [self.held(r, token=until) for r in rows]
        if not (self.settings.transactional and self.backend.single_writer):
            # Every claimed row renews, not only the one in work. On SQLite a transactional
            # job holds the file's write lock, so no one else can take its row meanwhile;
            # a renewal would only queue for that lock.
            self.renewer.hold(held)
        return held

    async def deliver_in_transaction(self, h: Held, payload: Any, conn: Any | None) -> None:
        backend, delivery = self.backend, self.delivery
        async with backend.connection() as tx:
            await backend.begin(tx, immediate=True)
            if backend.single_writer:
                # This transaction holds the file's write lock until the job settles, so no
                # other connection can claim the row: the lease needs no renewal meanwhile (and
                # a renewal, on another connection, would only wait for this very lock).
                await self.renewer.settling(h)
            failed: Exception | None = None
            try:
                await backend.execute(tx, "SAVEPOINT inboxgen_job")
                outcome = await delivery.run_handler(h, payload, tx)
                s = delivery.decide(h, outcome)
                # Unless the server rolled the transaction back whole, its savepoint too:
                if h.failure is None or not backend.race_lost(h.failure):
                    if outcome.kind != "ack" or s.action != FINISH:
                        # The handler's writes go; the outcome is still recorded, in the same
                        # transaction, so no other claim can slip in between.
                        await backend.execute(tx, "ROLLBACK TO SAVEPOINT inboxgen_job")
                    await backend.execute(tx, "RELEASE SAVEPOINT inboxgen_job")
                await self._settle(h, s, tx)
            except Exception as err:
                with contextlib.suppress(Exception):
                    await backend.rollback(tx)
                if not backend.race_lost(err):
                    raise
                failed = err  # rolled back whole before its COMMIT (a deadlock, another node)
            except BaseException:
                await backend.rollback(tx)
                raise
            else:
                failed = await delivery.commit_job(tx)  # None where it committed
            if failed is not None:
                # The server undid the job's transaction after its handler returned: the
                # handler's writes are gone, so the delivery failed. The lease, committed with
                # the claim, still holds the row: the failure is recorded in a transaction of
                # its own, guarded by it.
                s = delivery.rolled_back(h, failed)
                await backend.begin(tx, immediate=True)
                try:
                    await self._settle(h, s, tx)
                except BaseException:
                    await backend.rollback(tx)
                    raise
                await backend.commit(tx)
            delivery.count(s, h)

    async def settle(self, h: Held, s: Settlement, conn: Any | None) -> None:
        delivery = self.delivery
        self._handled(h)  # the claimer may claim for this slot while the write is on its way
        await self.renewer.settling(h)
        call = delivery.settlement_call(h, s)
        if call is None:
            return
        op, values = call
        if not one_statement(self.d, op):
            await delivery.run_settlement(None, h, op, values)  # the rarer kinds: written now
            return
        delivery.check_held(h, op)
        # With the other slots' settlements; the slot goes on, and the flush reports this one.
        h.flushing = True
        self.settler.submit(op, values, functools.partial(self._written, h, s, op))

    def _written(self, h: Held, s: Settlement, op: str, result: bool | Exception) -> None:
        """A flush has written (or lost) a settlement handed to the settler."""
        err: LeaseLost | SettlementLost | None = None
        if isinstance(result, Exception):
            self.outage.lost_connection(result, "settlements")
            err = self._settlement_lost(op, h.id, first_line(result))
        elif not result:
            check = asyncio.ensure_future(self._report_missed(h, s, op))
            self._checks.add(check)
            check.add_done_callback(self._checks.discard)
            return
        elif op == "retry" or self._limited:
            # The row is due again now (or, limited, its seat is free), and the claim its
            # handler made room for may have come before this write: claim once more rather
            # than wait for the poll.
            self.slots.wake_one()
        self.delivery.settled_later(h, s, err)

    async def _settle(self, h: Held, s: Settlement, tx: Any | None) -> None:
        await self.renewer.settling(h)
        # In the job's transaction, or with the other slots' settlements (the settler).
        await self.delivery.execute_settlement(tx, h, s)

    async def write(self, op: str, values: dict[str, Any]) -> bool:
        """One statement goes with the other slots' settlements (the settler) and waits for
        it (FIFO); the rarer kinds run in a transaction of their own."""
        try:
            if one_statement(self.d, op):
                return await self.settler.settle(op, values)
            return await super().write(op, values)
        except Exception as err:
            self.outage.lost_connection(err, "settlements")
            raise self._settlement_lost(op, values["id"], first_line(err)) from err

    def undecodable(self, h: Held) -> Settlement:
        log.error("%s: row %s left leased: its payload does not decode, and the table has no "
                  "dead-letter destination; it comes back when the lease ends", self.name,
                  h.id)
        return Settlement(PARK)

    def _settlement_lost(self, op: str, row_id: Any, cause: str) -> SettlementLost:
        return SettlementLost(f"{_KIND.get(op, op)} of row {row_id} lost ({cause}); it will "
                              f"run again once its lease ends", worker=self.name,
                              table=self.d.qualified_name, statement=op.upper())

    async def missed(self, h: Held, op: str) -> None:
        raise await self._not_held(h, op)

    async def _report_missed(self, h: Held, s: Settlement, op: str) -> None:
        async with self._check_turns:
            err = await self._not_held(h, op)
        self.delivery.settled_later(h, s, err)

    async def _not_held(self, h: Held, op: str) -> LeaseLost | RowDeleted:
        """Why a settlement guarded by the lease changed nothing: the row was deleted, or it is
        another worker's now."""
        if await self.presence.gone(h.id):
            return self.delivery.row_deleted(h, op)
        return self._lease_lost(h, op)

    def _lease_lost(self, h: Held, op: str) -> LeaseLost:
        return LeaseLost(f"row {h.id} is no longer held by this worker (its lease ran out and it "
                         f"was claimed again); {op} changed nothing", worker=self.name,
                         table=self.d.qualified_name, statement=op.upper())


# The most reads at once of whether rows whose settlements missed are gone: each takes a
# connection, and a flush may miss thousands of rows at once (after the database stalled past
# their leases), where one connection each would pass the server's limit.
MISSED_READS = 2


async def _first(*waits: Awaitable[Any]) -> None:
    """Wait until one of `waits` is done; cancel the others."""
    futures = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(futures, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for f in futures:
            f.cancel()


class FifoLease(Lease):
    """A FIFO table's lease: each slot claims for itself, one row per claim (its group's head),
    and waits for each settlement: the group's next row is due only once its head has
    settled."""

    waiters: frozenset[int] = frozenset()

    def _start_claimer(self) -> None:
        pass  # each slot claims for itself

    serve = Form.serve  # a round per slot: claim, deliver, settle, then wait or go on

    async def round(self) -> bool:
        batch = self.settings.batch
        now, until = self._lease_from_now()
        # The FIFO claim takes the group's transaction-scoped guard first: a transaction.
        async with self.transaction() as conn:
            rows = await self.claim(conn, now, batch, until)
        held = self._hold(rows, until)
        try:
            await self.deliver_all(held)
        finally:
            self.renewer.release(held)
        return len(rows) < self.full_claim

    async def settle(self, h: Held, s: Settlement, conn: Any | None) -> None:
        await self._settle(h, s, None)  # the group's next row waits for this one
