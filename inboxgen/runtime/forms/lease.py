"""Lease: the claim writes an expiry, the ownership token, and commits at once.

Every settlement and renewal is guarded by the token (and the attempt, where the table has
one); one that finds the row taken by another worker changes nothing and raises LeaseLost. The
settlements of all of the worker's slots are written together (settler.py) and its leases
renewed together (renewer.py). A crash leaves the rows leased until their leases end.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from inboxgen.errors import LeaseLost, SettlementLost
from inboxgen.runtime.batching import one_statement
from inboxgen.runtime.connecting import first_line
from inboxgen.runtime.forms.base import Form
from inboxgen.runtime.outcomes import FINISH, PARK, Settlement, lease_expiry
from inboxgen.runtime.renewer import LeaseRenewer
from inboxgen.runtime.settler import LeaseSettler

if TYPE_CHECKING:
    from inboxgen.runtime.worker import Worker, _Held

log = logging.getLogger("inboxgen.worker")

_KIND = {"finish": "ack", "retry": "retry", "retry_after": "retry",
         "dead_letter": "dead letter"}


class Lease(Form):
    unfinished = "their leases stay: the rows return when the leases end"

    def __init__(self, worker: Worker) -> None:
        super().__init__(worker)
        self.settler = LeaseSettler(worker.calls, worker.backend)
        self.renewer = LeaseRenewer(worker.calls, worker.clock, worker.lease, worker.name,
                                    worker._transaction, worker._count_renewals)

    def start(self) -> None:
        self.settler.start()
        self.renewer.start()

    async def stop(self) -> None:
        await self.renewer.stop()
        await self.settler.stop()

    async def round(self) -> bool:
        w = self.w
        now = w.clock.now()
        until = lease_expiry(now, w.lease)
        if w.backend.pipelines and not w.descriptor.fifo:
            # One statement: on an autocommit session it is its own transaction, one round trip.
            async with w.backend.session() as conn:
                rows = await w._claim(conn, now, w.batch, until)
        else:
            async with w._transaction() as conn:
                rows = await w._claim(conn, now, w.batch, until)
        held = [w._held(r, token=until) for r in rows]
        if not (w.transactional and w.backend.single_writer):
            # Every claimed row renews, not only the one in work. On SQLite a transactional
            # job holds the file's write lock, so no one else can take its row meanwhile;
            # a renewal would only queue for that lock.
            self.renewer.hold(held)
        try:
            if not w.transactional and len(held) > 1:
                await self._deliver_overlapped(held)
            else:
                await w._deliver_all(held)
        finally:
            self.renewer.release(held)
        return len(rows) < w.batch

    async def _deliver_overlapped(self, held: list[_Held]) -> None:
        """The handlers still run one after another, in claim order, but a row's settlement is
        on its way while the next row's handler runs, so the batch's settlements gather in a
        few flushes instead of waiting one flush each."""
        w = self.w
        w._in_flight += len(held)
        turn = asyncio.Lock()  # fair: the rows' handlers take it in claim order
        started: set[int] = set()

        async def deliver(h: _Held) -> None:
            started.add(id(h))
            await w._deliver(h, None, turn=turn)

        tasks = [asyncio.ensure_future(deliver(h)) for h in held]
        try:
            await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        finally:
            w._in_flight -= len(held) - len(started)  # rows a broken round never reached

    async def deliver_in_transaction(self, h: _Held, payload: Any, conn: Any | None) -> None:
        w = self.w
        async with w.backend.connection() as tx:
            await w.backend.begin(tx, immediate=True)
            if w.backend.single_writer:
                # This transaction holds the file's write lock until the job settles, so no
                # other connection can claim the row: the lease needs no renewal meanwhile (and
                # a renewal, on another connection, would only wait for this very lock).
                async with h.lock:
                    h.settling = True
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
        await self._settle(h, s, None)  # the row is held by its token alone

    async def _settle(self, h: _Held, s: Settlement, tx: Any | None) -> None:
        async with h.lock:  # a renewal on its way ends first: the token is then the new one
            h.settling = True  # no renewal after this
            if tx is not None:
                await self.w._execute_settlement(tx, h, s)
                return
        await self.w._execute_settlement(None, h, s)  # with the other slots' (the settler)

    async def write(self, op: str, values: dict[str, Any]) -> bool:
        """One statement goes with the other slots' settlements (the settler)."""
        w = self.w
        try:
            if one_statement(w.descriptor, op):
                return await self.settler.settle(op, values)
            return await super().write(op, values)
        except Exception as err:
            raise SettlementLost(
                f"{_KIND.get(op, op)} of row {values['id']} lost ({first_line(err)}); it will "
                f"run again once its lease ends", worker=w.name,
                table=w.descriptor.qualified_name, statement=op.upper()) from err

    def undecodable(self, h: _Held) -> Settlement:
        log.error("%s: row %s left leased: its payload does not decode, and the table has no "
                  "dead-letter destination; it comes back when the lease ends", self.w.name,
                  h.id)
        return Settlement(PARK)

    def missed(self, h: _Held, op: str) -> None:
        w = self.w
        raise LeaseLost(f"row {h.id} is no longer held by this worker (its lease ran out and it "
                        f"was claimed again); {op} changed nothing", worker=w.name,
                        table=w.descriptor.qualified_name, statement=op.upper())
