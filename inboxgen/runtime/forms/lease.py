"""Lease: the claim writes an expiry, the ownership token, and commits at once.

Every settlement and renewal is guarded by the token (and the attempt, where the table has
one); one that finds the row taken by another worker changes nothing and raises LeaseLost. The
settlements of all of the worker's slots are written together (settler.py) and its leases
renewed together (renewer.py). A crash leaves the rows leased until their leases end.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from inboxgen.errors import LeaseLost, RowDeleted, SettlementLost
from inboxgen.runtime.batching import one_statement
from inboxgen.runtime.connecting import first_line, retry_delay
from inboxgen.runtime.forms.base import Form
from inboxgen.runtime.outcomes import FINISH, PARK, Settlement, lease_expiry
from inboxgen.runtime.renewer import LeaseRenewer
from inboxgen.runtime.settler import LeaseSettler

if TYPE_CHECKING:
    from inboxgen.runtime.worker import Worker, _Held

log = logging.getLogger("inboxgen.worker")

CLAIMER = -1  # the claimer's place among the worker's waiting tasks (slots are 0, 1, ...)

_KIND = {"finish": "ack", "retry": "retry", "retry_after": "retry",
         "dead_letter": "dead letter"}


class Lease(Form):
    """A claimer task claims for all of the worker's slots: one statement takes as many rows
    as the slots have room for (`workers * batch` rows held at most) and the slots take them
    one at a time. A slot hands each settlement to the settler and goes on with its next row;
    the flush then counts the settlement or reports it lost. A slot whose handler has finished
    makes room at once, so the next claim is on its way while the last settlements are
    written. FIFO tables claim per slot instead (one row, the group's head, per claim), and
    wait for each settlement: the group's next row is due only once its head has settled."""

    unfinished = "their leases stay: the rows return when the leases end"

    def __init__(self, worker: Worker) -> None:
        super().__init__(worker)
        self.settler = LeaseSettler(worker.calls, worker.backend)
        self.renewer = LeaseRenewer(worker.calls, worker.clock, worker.lease, worker.name,
                                    worker._transaction, worker._count_renewals,
                                    worker.presence.gone, worker.outage.lost_connection)
        self.shared_claims = not worker.descriptor.fifo
        self.waiters = frozenset({CLAIMER}) if self.shared_claims else frozenset()
        self._capacity = worker.workers * worker.batch
        self._ready: asyncio.Queue[_Held | None] = asyncio.Queue()
        self._working = 0  # rows taken by slots whose handlers have not finished
        self._room = asyncio.Event()  # set when a handler finishes
        self._claimer: asyncio.Task[None] | None = None
        # Settlements the settler wrote that changed nothing: whether their rows are gone is
        # read before they are reported.
        self._checks: set[asyncio.Future[None]] = set()

    @property
    def connections(self) -> int:
        # The claimer, the settler and the renewer; transactional jobs hold one each.
        return self.w.workers if self.w.transactional else 3

    def start(self) -> None:
        self.settler.start()
        self.renewer.start()
        if self.shared_claims:
            # Of this event loop: a worker may serve again in another.
            self._ready, self._room, self._working = asyncio.Queue(), asyncio.Event(), 0
            self._claimer = asyncio.create_task(self._claim_rounds(),
                                                name=f"{self.w.name}:claim")

    async def stop(self) -> None:
        if self._claimer is not None:
            self._claimer.cancel()
            await asyncio.gather(self._claimer, return_exceptions=True)
            self._claimer = None
        while not self._ready.empty():  # claimed, never started (a shutdown that hurried)
            h = self._ready.get_nowait()
            if h is not None:
                self.w._in_flight -= 1
        await self.renewer.stop()
        await self.settler.stop()
        while self._checks:
            await asyncio.gather(*self._checks, return_exceptions=True)

    # -- claims for every slot (the claimer) ----------------------------------------------

    async def _claim_rounds(self) -> None:
        w = self.w
        failures = 0
        try:
            while not w._stopping.is_set():
                room = self._capacity - self._working - self._ready.qsize()
                if room <= 0 or (not self._ready.empty() and room < self._capacity / 2):
                    # Wait for handlers to finish: claim for a few slots at once, not one by
                    # one, while rows are still waiting for a slot.
                    self._room.clear()
                    await _first(self._room.wait(), w._stopping.wait())
                    continue
                try:
                    got = await self._claim_for(room)
                except Exception as err:
                    failures += 1
                    w._claim_failed(err)
                    await w._wait(CLAIMER, retry_delay(failures))
                    continue
                failures = 0
                w._claim_worked()
                if got < room:
                    await w._wait(CLAIMER, w.poll_interval)  # drained: until a wake-up
        finally:
            for _ in range(w.workers):
                self._ready.put_nowait(None)  # each slot ends after the rows before it

    async def _claim_for(self, limit: int) -> int:
        """Claim up to `limit` rows into the slots' queue; returns how many came."""
        w = self.w
        now, until = self._lease_from_now()
        # One statement standing alone: on PostgreSQL an autocommit statement, on a threaded
        # driver a transaction of its own in one call.
        (result,) = await w.backend.alone([w.calls.step(*w._claim_call(now, limit, until))])
        rows = w._claimed(result)
        w._in_flight += len(rows)  # in work from the claim on: a shutdown waits for them
        held = self._hold(rows, until)
        for h in held:
            self._ready.put_nowait(h)
        return len(rows)

    async def serve(self, index: int, worked: Callable[[], None]) -> None:
        """Slot `index`: deliver rows from the claimer, one handler at a time in claim order,
        until the claimer ends. Settlements do not hold the slot up: each goes with the
        settler's next flush while the slot runs the next handler."""
        if not self.shared_claims:
            await super().serve(index, worked)
            return
        w = self.w
        failures = 0
        while True:
            if self._ready.empty():
                w._idle.add(index)
                try:
                    h = await self._ready.get()
                finally:
                    w._idle.discard(index)
            else:
                h = self._ready.get_nowait()  # no turn of the event loop per row
            if h is None:
                return  # the claimer has ended: the worker stops
            self._working += 1
            try:
                await w._deliver(h)
                failures = 0
            except Exception as err:  # its transaction broke (a transactional handler's)
                failures += 1
                w._claim_failed(err)
                await w._stopped_within(retry_delay(failures))
            finally:
                self._handled(h)
                self.renewer.release([h])

    def _handled(self, h: _Held) -> None:
        """The row's handler has finished (its settlement may still be on its way): its slot
        has room for the next claim."""
        if not h.handled:
            h.handled = True
            self._working -= 1
            self._room.set()

    # -- claims per slot (FIFO) -----------------------------------------------------------

    async def round(self) -> bool:
        w = self.w
        now, until = self._lease_from_now()
        # The FIFO claim takes the group's transaction-scoped guard first: a transaction.
        async with w._transaction() as conn:
            rows = await w._claim(conn, now, w.batch, until)
        held = self._hold(rows, until)
        try:
            await w._deliver_all(held)
        finally:
            self.renewer.release(held)
        return len(rows) < w.batch

    # -- both -----------------------------------------------------------------------------

    def _lease_from_now(self) -> tuple[_dt.datetime, _dt.datetime]:
        """Now, and the end of a lease claimed now (the claimed rows' token)."""
        now = self.w.clock.now()
        return now, lease_expiry(now, self.w.lease)

    def _hold(self, rows: list[Any], until: _dt.datetime) -> list[_Held]:
        w = self.w
        held = [w._held(r, token=until) for r in rows]
        if not (w.transactional and w.backend.single_writer):
            # Every claimed row renews, not only the one in work. On SQLite a transactional
            # job holds the file's write lock, so no one else can take its row meanwhile;
            # a renewal would only queue for that lock.
            self.renewer.hold(held)
        return held

    async def deliver_in_transaction(self, h: _Held, payload: Any, conn: Any | None) -> None:
        w = self.w
        async with w.backend.connection() as tx:
            await w.backend.begin(tx, immediate=True)
            if w.backend.single_writer:
                # This transaction holds the file's write lock until the job settles, so no
                # other connection can claim the row: the lease needs no renewal meanwhile (and
                # a renewal, on another connection, would only wait for this very lock).
                await self.renewer.settling(h)
            try:
                await w.backend.execute(tx, "SAVEPOINT inboxgen_job")
                outcome = await w._run_handler(h, payload, tx)
                s = w._decide(h, outcome)
                if outcome.kind != "ack" or s.action != FINISH:
                    # The handler's writes go; the outcome is still recorded, in the same
                    # transaction, so no other claim can slip in between.
                    await w.backend.execute(tx, "ROLLBACK TO SAVEPOINT inboxgen_job")
                await w.backend.execute(tx, "RELEASE SAVEPOINT inboxgen_job")
                await self._settle(h, s, tx)
            except BaseException:
                await w.backend.rollback(tx)
                raise
            await w.backend.commit(tx)
            w._count(s, h)

    async def settle(self, h: _Held, s: Settlement, conn: Any | None) -> None:
        if not self.shared_claims:
            await self._settle(h, s, None)  # FIFO: the group's next row waits for this one
            return
        w = self.w
        self._handled(h)  # the claimer may claim for this slot while the write is on its way
        await self.renewer.settling(h)
        call = w._settlement_call(h, s)
        if call is None:
            return
        op, values = call
        if not one_statement(w.descriptor, op):
            await w._run_settlement(None, h, op, values)  # the rarer kinds: written here, now
            return
        w._check_held(h, op)
        # With the other slots' settlements; the slot goes on, and the flush reports this one.
        h.flushing = True
        self.settler.submit(op, values, functools.partial(self._written, h, s, op))

    def _written(self, h: _Held, s: Settlement, op: str, result: bool | Exception) -> None:
        """A flush has written (or lost) a settlement handed to the settler."""
        w = self.w
        err: LeaseLost | SettlementLost | None = None
        if isinstance(result, Exception):
            w.outage.lost_connection(result, "settlements")
            err = self._settlement_lost(op, h.id, first_line(result))
        elif not result:
            check = asyncio.ensure_future(self._report_missed(h, s, op))
            self._checks.add(check)
            check.add_done_callback(self._checks.discard)
            return
        elif op == "retry":
            # The row is due again now, and the claim its handler made room for may have come
            # before this write: claim once more rather than wait for the poll.
            w.wake_one()
        w._settled_later(h, s, err)

    async def _settle(self, h: _Held, s: Settlement, tx: Any | None) -> None:
        await self.renewer.settling(h)
        # In the job's transaction, or with the other slots' settlements (the settler).
        await self.w._execute_settlement(tx, h, s)

    async def write(self, op: str, values: dict[str, Any]) -> bool:
        """One statement goes with the other slots' settlements (the settler) and waits for
        it (FIFO); the rarer kinds run in a transaction of their own."""
        w = self.w
        try:
            if one_statement(w.descriptor, op):
                return await self.settler.settle(op, values)
            return await super().write(op, values)
        except Exception as err:
            w.outage.lost_connection(err, "settlements")
            raise self._settlement_lost(op, values["id"], first_line(err)) from err

    def undecodable(self, h: _Held) -> Settlement:
        log.error("%s: row %s left leased: its payload does not decode, and the table has no "
                  "dead-letter destination; it comes back when the lease ends", self.w.name,
                  h.id)
        return Settlement(PARK)

    def _settlement_lost(self, op: str, row_id: Any, cause: str) -> SettlementLost:
        w = self.w
        return SettlementLost(f"{_KIND.get(op, op)} of row {row_id} lost ({cause}); it will "
                              f"run again once its lease ends", worker=w.name,
                              table=w.descriptor.qualified_name, statement=op.upper())

    async def missed(self, h: _Held, op: str) -> None:
        raise await self._not_held(h, op)

    async def _report_missed(self, h: _Held, s: Settlement, op: str) -> None:
        self.w._settled_later(h, s, await self._not_held(h, op))

    async def _not_held(self, h: _Held, op: str) -> LeaseLost | RowDeleted:
        """Why a settlement guarded by the lease changed nothing: the row was deleted, or it is
        another worker's now."""
        if await self.w.presence.gone(h.id):
            return self.w._row_deleted(h, op)
        return self._lease_lost(h, op)

    def _lease_lost(self, h: _Held, op: str) -> LeaseLost:
        w = self.w
        return LeaseLost(f"row {h.id} is no longer held by this worker (its lease ran out and it "
                         f"was claimed again); {op} changed nothing", worker=w.name,
                         table=w.descriptor.qualified_name, statement=op.upper())


async def _first(*waits: Awaitable[Any]) -> None:
    """Wait until one of `waits` is done; cancel the others."""
    futures = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(futures, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for f in futures:
            f.cancel()
