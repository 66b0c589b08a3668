"""Row lock: the claim's open transaction holds the rows while their jobs run.

A crash or a cancellation rolls the transaction back, so the rows return at once, attempts
unchanged; a retry counts the attempt as it settles. With count_crashes the claim counts the
attempt in a transaction of its own first (CountedRowLock). On PostgreSQL with handlers that are
not transactional, a slot keeps one connection in pipeline mode and a batch's settlements and
COMMIT travel with the next claim (PipelinedRowLock).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from inboxgen.runtime.backends.base import BEGIN, COMMIT, Step, StepFailed
from inboxgen.runtime.batching import by_op
from inboxgen.runtime.forms.base import Form
from inboxgen.runtime.outcomes import FINISH, Settlement

if TYPE_CHECKING:
    from inboxgen.runtime.worker import Worker, _Held

# How long a counted claim waits for the table's claim turn (MySQL's GET_LOCK; on PostgreSQL
# the wait is the session's lock_timeout).
_CLAIM_TURN_WAIT = 10.0

Pending = list[tuple[str, dict[str, Any]]]  # settlements waiting for the batch's COMMIT


def row_lock(worker: Worker) -> Form:
    d = worker.descriptor
    if d.count_crashes:
        return CountedRowLock(worker)
    if worker.backend.rounds_together and not worker.transactional:
        return PipelinedRowLock(worker)
    return RowLock(worker)


class RowLock(Form):
    unfinished = "their transactions roll back: the rows return at once, attempts unchanged"

    async def round(self) -> bool:
        w = self.w
        held: list[_Held] = []
        # A cancelled or broken round rolls back: its rows return at once, attempts unchanged
        # (what a crash does in this form).
        try:
            async with w._transaction() as conn:
                rows = await w._claim(conn, w.clock.now(), w.batch)
                pending: Pending = []
                held = [w._held(r, deferred=self._defer(pending)) for r in rows]
                await w._deliver_all(held, conn)
                await self.settle_deferred(conn, pending)
        except Exception as err:
            self.report_lost(held, err)
            raise
        return len(rows) < w.batch

    def report_lost(self, held: list[_Held], err: BaseException) -> None:
        settled = [h for h in held if h.settled]
        if settled:
            self.lost(settled, err)

    def _defer(self, pending: Pending) -> Pending | None:
        """Where a batch's settlements wait to run together before its COMMIT: not for
        transactional handlers, whose settlements run with their writes."""
        return None if self.w.transactional else pending

    async def settle_deferred(self, conn: Any, pending: Pending) -> None:
        """Run a batch's settlements in its transaction, each kind together (acks as one
        statement). The rows are the transaction's, so a settlement cannot miss them: the
        results (in a pipeline, they arrive with the next claim's) need no reading."""
        await self.w._settle_together(conn, pending)

    async def deliver_in_transaction(self, h: _Held, payload: Any, conn: Any | None) -> None:
        w = self.w
        assert conn is not None
        await w.backend.execute(conn, "SAVEPOINT inboxgen_job")
        outcome = await w._run_handler(h, payload, conn)
        s = w._decide(h, outcome)
        if s.action != FINISH or outcome.kind != "ack":
            await w.backend.execute(conn, "ROLLBACK TO SAVEPOINT inboxgen_job")
        await w.backend.execute(conn, "RELEASE SAVEPOINT inboxgen_job")
        await w._settle(h, s, conn)

    async def settle(self, h: _Held, s: Settlement, conn: Any | None) -> None:
        assert conn is not None  # the claim's transaction
        await self.w._execute_settlement(conn, h, s)


class CountedRowLock(RowLock):
    """count_crashes: the attempt is counted and committed first, so a job that kills its
    process still spends it; the rows are then locked again, all in the transaction they are
    worked in. From the count until that relock the claim holds the table's claim turn (a
    session lock), so no other claim counts the same rows for a delivery that never happens:
    only a delivery that began and never settled is counted."""

    async def round(self) -> bool:
        w = self.w
        key = f"{w.descriptor.qualified_name}:claim"
        async with w.backend.connection() as conn:
            await w.backend.begin(conn)
            # The session lock is taken in the counting transaction: no round trip of its own.
            turn = await w._call(conn, "claim_guard", key=key, wait=_CLAIM_TURN_WAIT)
            if not turn:
                await w.backend.rollback(conn)
                return True  # another claim held the turn all that time: try again later
            held: list[_Held] = []
            pending: Pending = []
            try:
                counted = await w._claim(conn, w.clock.now(), w.batch)
                await w.backend.commit(conn)
                await w.backend.begin(conn)
                for row in counted:
                    h = w._held(row, deferred=self._defer(pending))
                    if await w._call(conn, "relock", id=h.id, attempt=h.attempt) is not None:
                        held.append(h)
            except BaseException:
                await w.backend.rollback(conn)
                raise
            finally:
                # Inside the relocked rows' transaction: unlocking a session lock is not undone
                # by a rollback, and the rows stay locked until the transaction ends.
                with contextlib.suppress(Exception):
                    await w._call(conn, "claim_unguard", key=key)
            try:
                await w._deliver_all(held, conn)
                await self.settle_deferred(conn, pending)
                await w.backend.commit(conn)
            except BaseException as err:
                if isinstance(err, Exception):
                    self.report_lost(held, err)
                with contextlib.suppress(Exception):
                    await w.backend.rollback(conn)
                raise
        return len(counted) < w.batch


class PipelinedRowLock(RowLock):
    """The slot keeps one connection; each round sends the last round's settlements, its
    COMMIT, a BEGIN and the next claim together (`Backend.together`: psycopg's pipeline mode,
    or one call on a threaded driver's connection thread): a batch costs one round trip. A
    round that fails rolls back what it had not committed (its rows return at once, as a crash
    leaves them), and the slot starts again on a fresh connection."""

    async def serve(self, index: int, worked: Callable[[], None]) -> None:
        """Rounds on one connection until the worker stops."""
        held: list[_Held] = []  # the batch whose settlements travel with the next round
        try:
            await self._rounds(index, worked, held)
        except Exception as err:
            self.report_lost(held, err)
            raise

    async def _rounds(self, index: int, worked: Callable[[], None], held: list[_Held]) -> None:
        w = self.w
        async with w.backend.session() as conn, w.backend.pipeline(conn) as pipe:
            in_tx = False  # a claim's transaction is open on the connection
            pending: Pending = []
            while True:
                claim = not w._stopping.is_set()
                rows = await self._send_round(conn, pipe, pending, held, commit=in_tx,
                                              claim=claim)
                in_tx, pending = claim, []
                held.clear()  # committed
                worked()
                if not claim:
                    return
                if len(rows) == w.batch:
                    w._wake_waiting_slot()  # a full claim: more rows are likely due
                held.extend(w._held(r, deferred=pending) for r in rows)
                await w._deliver_all(held, conn)
                if len(rows) < w.batch:
                    # Drained: commit now rather than hold the rows through the wait.
                    await self._send_round(conn, pipe, pending, held, commit=True, claim=False)
                    in_tx, pending = False, []
                    held.clear()
                    await w._wait(index, w.poll_interval)

    async def _send_round(self, conn: Any, pipe: Any, pending: Pending, held: list[_Held], *,
                          commit: bool, claim: bool) -> list[Any]:
        """Send the batch's settlements, COMMIT, BEGIN and a claim together, and wait for the
        server. Returns the claimed rows."""
        w = self.w
        steps: list[Step] = []
        for op, rows in by_op(pending).items():
            steps += w.calls.plan(op, rows)[0]  # the rows are the transaction's: no reading
        pending.clear()
        committed_after = len(steps) + 1  # steps done once the COMMIT has run
        if commit:
            steps.append(COMMIT)
        if claim:
            steps += [BEGIN, w.calls.step(*w._claim_call(w.clock.now(), w.batch))]
        try:
            results = await w.backend.together(conn, steps)
        except StepFailed as err:
            if commit and err.done >= committed_after:
                held.clear()  # the batch committed; what failed came after
            raise err.cause from None
        if not claim:
            await w.backend.sync(pipe)
            return []
        return w._claimed(results[-1])
