"""Row lock: the claim's open transaction holds the rows while their jobs run.

A crash or a cancellation rolls the transaction back, so the rows return at once, attempts
unchanged; a retry counts the attempt as it settles. With count_crashes the claim counts the
attempt in a transaction of its own first (CountedRowLock). On PostgreSQL with handlers that are
not transactional, a slot keeps one connection in pipeline mode and a batch's settlements and
COMMIT travel with the next claim (PipelinedRowLock).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from inboxgen.runtime.backends.base import (
    BEGIN,
    COMMIT,
    COMMIT_BEGIN,
    GENERIC_PLANS,
    Step,
    StepFailed,
)
from inboxgen.runtime.batching import by_op, one_statement
from inboxgen.runtime.claimstart import ClaimStart, Start, claims_from_id
from inboxgen.runtime.connecting import first_line
from inboxgen.runtime.forms.base import Form, Parts, Pending
from inboxgen.runtime.outcomes import REQUEUE, REQUEUE_AT, Settlement

if TYPE_CHECKING:
    from inboxgen.descriptor import TableDescriptor
    from inboxgen.runtime.backends.base import ServerOffers
    from inboxgen.runtime.jobs import Held

# How often a pipelined session goes idle outside a transaction between two rounds. PostgreSQL
# reports a session's table statistics (what autovacuum decides on) only there, at most once a
# second: a session whose every COMMIT is followed by the next BEGIN in one round trip never
# reports, and autovacuum never cleans the rows its jobs finished.
IDLE_EVERY = 1.0

log = logging.getLogger("inboxgen.worker")

# How many keys of finished rows a pipelined counted session keeps locked before it unlocks
# them (at least a batch's): no claim reads a finished row again, so their RELEASE can wait for
# a later round, and most rounds send none. Each key takes a slot of the server's shared lock
# table (max_locks_per_transaction x max_connections) until then.
FINISHED_KEYS_KEPT = 32

# How long a counted claim waits for the table's claim turn (MySQL's GET_LOCK; on PostgreSQL
# the wait is the session's lock_timeout).
_CLAIM_TURN_WAIT = 10.0


def row_lock(parts: Parts) -> Form:
    together = pipelined(parts)
    if parts.descriptor.count_crashes:
        if parts.descriptor.ops.release is None:
            return TurnCountedRowLock(parts)  # modules built before counted rows had keys
        return PipelinedCountedRowLock(parts) if together else CountedRowLock(parts)
    return PipelinedRowLock(parts) if together else RowLock(parts)


def pipelined(parts: Parts) -> bool:
    """Whether a batch's settlements travel with the next claim: where the driver sends steps
    together and no settlement needs a result read between its statements (a module built
    before PostgreSQL's dead letters to a table were one statement copies, then checks)."""
    return (parts.backend.rounds_together and not parts.settings.transactional
            and (parts.backend.steps_fail_in_place
                 or one_statement(parts.descriptor, "dead_letter")))


def claim_takes_keys(d: TableDescriptor) -> bool:
    """Whether a counted claim takes its rows' keys as it reads them (MySQL's CLAIM, in its
    last column), so that neither it nor its count needs a transaction around the two: in a
    module built before, CLAIM_COUNT took them, under the claim's row locks."""
    count = d.statement_params.get("CLAIM_COUNT")
    return count is not None and "row_key" not in count


def release_unlocks_session(d: TableDescriptor) -> bool:
    """Whether RELEASE names no rows and unlocks every lock of the session (MySQL's
    RELEASE_ALL_LOCKS()), where PostgreSQL's unlocks the keys of the rows it names."""
    return "id" not in d.statement_params.get("RELEASE", ())


class RowLock(Form):
    unfinished = "their transactions roll back: the rows return at once, attempts unchanged"
    returned = "the rows return at once, attempts unchanged"  # where a round rolls back

    def __init__(self, parts: Parts) -> None:
        super().__init__(parts)
        # Where the slots' next claim starts, for a CLAIM that takes one (runtime/claimstart).
        self._start = ClaimStart(self.d) if claims_from_id(self.d) else None
        # Whether a transactional job's writes are checked against the constraints deferred
        # to COMMIT before they join the batch's transaction (release_checked).
        self._check_deferred = False

    def offered(self, offers: ServerOffers) -> None:
        super().offered(offers)
        self._check_deferred = offers.deferred_constraints

    def held(self, row: Any, **extra: Any) -> Held:
        # A row's settlement commits with its round: counted then (Delivery.committed), not
        # where a round the server rolls back would count it once more when it runs again.
        return super().held(row, commits_later=True, **extra)

    def claim_start(self) -> Start:
        """Where the next claim starts (None: the head)."""
        return self._start.at() if self._start is not None else None

    def claimed_from(self, start: Start, rows: list[Any], limit: int, started: float) -> bool:
        """Note a claim from `start` that took `rows`, sent at `started` (time.monotonic()):
        the next starts after them, or at the head where this one came back short from a
        start. Returns whether the slot claims again at once (ClaimStart.took: this worker
        returned rows behind the start within a second) rather than wait as a drained queue's
        does."""
        return self._start is not None and self._start.took(
            start, rows, limit, time.monotonic() - started)

    def back_to_head(self) -> None:
        """This worker returned rows behind the start (a retry, a round rolled back): the next
        claim starts at the head, so they wait for no rewind."""
        if self._start is not None:
            self._start.returned()

    async def round(self) -> bool:
        batch = self.settings.batch
        held: list[Held] = []
        # A cancelled or broken round rolls back: its rows return at once, attempts unchanged
        # (what a crash does in this form).
        try:
            async with self.transaction() as conn:
                start, started = self.claim_start(), time.monotonic()
                rows = await self.claim(conn, self.clock.now(), batch, start=start)
                again = self.claimed_from(start, rows, batch, started)
                pending: Pending = []
                held = [self.held(r, deferred=self._defer(pending)) for r in rows]
                await self.deliver_all(held, conn)
                await self.settle_deferred(conn, pending)
        except Exception as err:
            self.report_lost(held, err)
            raise
        self.delivery.committed(held)
        return len(rows) < self.full_claim and not again

    def report_lost(self, held: list[Held], err: BaseException) -> None:
        self.back_to_head()  # the round's rows return
        if self.backend.race_lost(err):
            # Not an outage, nor lost settlements alone: a handler's statement lost a
            # deadlock, and its round's transaction went with it.
            ran = [h for h in held if h.settled or h.failure is err]
            self.stats.settlements_lost += sum(h.settled for h in held)
            ids = ", ".join(str(h.id) for h in ran[:10]) + (", ..." if len(ran) > 10 else "")
            log.warning("%s: the server rolled back the transaction of %s %s, what its "
                        "handlers wrote and settled with it: %s; %s", self.name,
                        "row" if len(ran) == 1 else "rows", ids, first_line(err),
                        self.returned)
            return
        if self.settings.transactional and isinstance(err, Exception) \
                and not self.backend.disconnected(err):
            # The batch's COMMIT refused what a handler wrote, where no constraint was checked
            # at COMMIT as the worker started (one added since): from now on each job's
            # writes are checked before they join the batch, and the rows fail alone.
            self._check_deferred = True
        settled = [h for h in held if h.settled]
        if settled:
            self.lost(settled, err)

    def _defer(self, pending: Pending) -> Pending | None:
        """Where a batch's settlements wait to run together before its COMMIT: not for
        transactional handlers, whose settlements run with their writes."""
        return None if self.settings.transactional else pending

    async def settle_deferred(self, conn: Any, pending: Pending) -> None:
        """Run a batch's settlements in its transaction, each kind together (acks as one
        statement). The rows are the transaction's, so a settlement cannot miss them: the
        results (in a pipeline, they arrive with the next claim's) need no reading."""
        await self.settle_together(conn, pending)

    async def deliver_in_transaction(self, h: Held, payload: Any, conn: Any | None) -> None:
        assert conn is not None
        backend, delivery = self.backend, self.delivery
        await backend.execute(conn, "SAVEPOINT inboxgen_job")
        outcome = await delivery.run_handler(h, payload, conn)
        if h.failure is not None and backend.race_lost(h.failure):
            # The server rolled the batch's transaction back whole (a deadlock it broke), and
            # the claim's row locks with it: the round ends as a crash would end it.
            raise h.failure
        if outcome.kind == "ack":
            if self._check_deferred:
                outcome = await delivery.release_checked(h, outcome, conn)
            else:
                await backend.execute(conn, "RELEASE SAVEPOINT inboxgen_job")
        s = delivery.decide(h, outcome)
        if outcome.kind != "ack":  # an ack released the savepoint above
            await backend.execute(conn, "ROLLBACK TO SAVEPOINT inboxgen_job")
            await backend.execute(conn, "RELEASE SAVEPOINT inboxgen_job")
        await delivery.settle(h, s, conn)

    async def settle(self, h: Held, s: Settlement, conn: Any | None) -> None:
        assert conn is not None  # the claim's transaction
        if s.action in (REQUEUE, REQUEUE_AT):
            self.back_to_head()
        await self.delivery.execute_settlement(conn, h, s)


class CountedRowLock(RowLock):
    """count_crashes: the claim counts the attempt and commits at once, so a job that kills
    its process still spends it. Each counted row's key stays locked for the session (the
    claim locks it), which keeps the row from other claims until its settlement has committed
    and RELEASE unlocks it; a crash ends the session and frees the rows, counted. Only a
    delivery that began and never settled is counted. The rows are worked and settled in a
    transaction of their own on the same session."""
    needs_one_session = True  # each counted row's key is a session lock

    unfinished = ("their transactions roll back and their keys are unlocked: the rows return "
                  "at once, the attempt spent")
    returned = "the rows return at once, the attempt spent"

    async def round(self) -> bool:
        backend, batch = self.backend, self.settings.batch
        async with backend.connection() as conn:
            await backend.begin(conn)
            try:
                start, started = self.claim_start(), time.monotonic()
                counted = await self.claim(conn, self.clock.now(), batch, start=start)
                again = self.claimed_from(start, counted, batch, started)
                await backend.commit(conn)
            except BaseException:
                # The claim may have locked keys before it failed: ending the session unlocks
                # them (and rolls back).
                with contextlib.suppress(Exception):
                    await backend.end_session(conn)
                raise
            pending: Pending = []
            held = [self.held(row, deferred=self._defer(pending)) for row in counted]
            try:
                await backend.begin(conn)
                await self.deliver_all(held, conn)
                await self.settle_deferred(conn, pending)
                await backend.commit(conn)
                self.delivery.committed(held)
            except BaseException as err:
                if isinstance(err, Exception):
                    self.report_lost(held, err)
                with contextlib.suppress(Exception):
                    await backend.rollback(conn)
                raise
            finally:
                await self._release(conn, held)
        return len(counted) < batch and not again

    async def _release(self, conn: Any, held: list[Held]) -> None:
        """Unlock the keys of settled (or rolled back) rows; where that fails or is cancelled,
        end the session instead, which unlocks them too: a pooled connection must not keep
        them."""
        if not held:
            return
        try:
            await self.calls(conn, "release", id=[h.id for h in held])
        except BaseException:
            with contextlib.suppress(Exception):
                await self.backend.end_session(conn)
            raise


class TurnCountedRowLock(RowLock):
    """count_crashes where the module has no per-row keys (one built before they came): the
    attempt is counted and committed first, so a job that kills its process still spends it;
    the rows are then locked again, all in the transaction they are worked in. From the count
    until that relock the claim holds the table's claim turn (a session lock), so no other
    claim counts the same rows for a delivery that never happens: only a delivery that began
    and never settled is counted."""
    needs_one_session = True  # the claim turn is a session lock

    async def round(self) -> bool:
        backend, batch = self.backend, self.settings.batch
        key = f"{self.d.qualified_name}:claim"
        async with backend.connection() as conn:
            await backend.begin(conn)
            # The session lock is taken in the counting transaction: no round trip of its own.
            turn = await self.calls(conn, "claim_guard", key=key, wait=_CLAIM_TURN_WAIT)
            if not turn:
                await backend.rollback(conn)
                return True  # another claim held the turn all that time: try again later
            held: list[Held] = []
            pending: Pending = []
            try:
                counted = await self.claim(conn, self.clock.now(), batch)
                await backend.commit(conn)
                await backend.begin(conn)
                for row in counted:
                    h = self.held(row, deferred=self._defer(pending))
                    if await self.calls(conn, "relock", id=h.id, attempt=h.attempt) is not None:
                        held.append(h)
            except BaseException:
                await backend.rollback(conn)
                raise
            finally:
                # Inside the relocked rows' transaction: unlocking a session lock is not undone
                # by a rollback, and the rows stay locked until the transaction ends.
                with contextlib.suppress(Exception):
                    await self.calls(conn, "claim_unguard", key=key)
            try:
                await self.deliver_all(held, conn)
                await self.settle_deferred(conn, pending)
                await backend.commit(conn)
                self.delivery.committed(held)
            except BaseException as err:
                if isinstance(err, Exception):
                    self.report_lost(held, err)
                with contextlib.suppress(Exception):
                    await backend.rollback(conn)
                raise
        return len(counted) < batch


class PipelinedRowLock(RowLock):
    """The slot keeps one connection; each round sends the last round's settlements, its
    COMMIT, a BEGIN and the next claim together (`Backend.together`: psycopg's pipeline mode,
    or one call on a threaded driver's connection thread): a batch costs one round trip. A
    round that fails rolls back what it had not committed (its rows return at once, as a crash
    leaves them), and the slot starts again on a fresh connection."""

    async def serve(self, index: int, worked: Callable[[], None]) -> None:
        """Rounds on one connection until the worker stops."""
        held: list[Held] = []  # the batch whose settlements travel with the next round
        try:
            await self._rounds(index, worked, held)
        except Exception as err:
            self.report_lost(held, err)
            raise

    async def together(self, conn: Any, pipe: Any, steps: list[Step], *,
                       idle: bool) -> list[Any]:
        """`Backend.together`. With `idle`, the steps through the COMMIT are synced first, so
        the session waits idle outside a transaction (and reports its statistics) before the
        rest: one more round trip, once per IDLE_EVERY. A COMMIT_BEGIN is then a COMMIT and a
        BEGIN of their own."""
        if idle:
            steps = [part for step in steps
                     for part in ((COMMIT, BEGIN) if step == COMMIT_BEGIN else (step,))]
        if not idle or COMMIT not in steps:
            return await self.backend.together(conn, steps)
        cut = steps.index(COMMIT) + 1
        first = await self.backend.together(conn, steps[:cut])
        await self.backend.sync(pipe)
        try:
            return first + await self.backend.together(conn, steps[cut:])
        except StepFailed as err:
            raise StepFailed(cut + err.done, err.cause) from err.cause

    async def _rounds(self, index: int, worked: Callable[[], None], held: list[Held]) -> None:
        backend, idle = self.backend, Idle()
        async with backend.session() as conn, backend.pipeline(conn) as pipe:
            seats = self.slot_seats()
            try:
                await self._plain_rounds(conn, pipe, index, worked, held, seats, idle)
            except BaseException:
                await self.drop_seats(conn, seats)
                raise

    async def _plain_rounds(self, conn: Any, pipe: Any, index: int, worked: Callable[[], None],
                            held: list[Held], seats: Any, idle: Idle) -> None:
        slots = self.slots
        in_tx = False  # a claim's transaction is open on the connection
        pending: Pending = []
        while True:
            limit, none_due = await self._next_limit(conn, seats)
            claim = limit > 0
            rows: list[Any] = []
            again = False
            if claim or in_tx:
                rows, again = await self._send_round(conn, pipe, pending, held, commit=in_tx,
                                                     claim=claim, limit=limit,
                                                     idle=idle.due())
            in_tx, pending = claim, []
            held.clear()  # committed
            worked()
            if not claim:
                if not await self._wait_unclaimed(conn, index, seats, none_due):
                    return
                continue
            full = self.full_claim if seats is None else limit
            if len(rows) == full:
                slots.wake_waiting_slot()  # a full claim: more rows are likely due
            held.extend(self.held(r, deferred=pending) for r in rows)
            await self.deliver_all(held, conn)
            if len(rows) < full or await self.seats_turn_over(conn, seats):
                # Drained: commit now rather than hold the rows through the wait (or give
                # the seats up once they have committed).
                await self._send_round(conn, pipe, pending, held, commit=True, claim=False)
                in_tx, pending = False, []
                held.clear()
                await self.give_seats(conn, seats)
                if len(rows) < full and not again:
                    await slots.wait(index, self.settings.poll_interval)

    async def _next_limit(self, conn: Any, seats: Any) -> tuple[int, bool]:
        """How many rows the slot's next round claims (0: none), and whether that is because
        none is due (Form.nothing_to_claim: the claim would take nothing)."""
        if self.slots.stopping:
            return 0, False
        if await self.nothing_to_claim(conn, self.clock.now()):
            return 0, True
        return await self.claim_limit(conn, seats), False

    async def _wait_unclaimed(self, conn: Any, index: int, seats: Any, none_due: bool) -> bool:
        """After a round that claimed nothing: wait as a drained queue's slot does where none
        was due, else for a seat; False where the slot stops (its seats given up)."""
        if self.slots.stopping:
            await self.give_seats(conn, seats)
            return False
        if none_due:
            await self.give_seats(conn, seats)
            await self.slots.wait(index, self.settings.poll_interval)
        else:  # every seat is held
            await self.slots.wait(index, await self.seat_wait(conn, seats))
        return True

    # [flow] concurrency (forms/seated_row_lock.py): the seats one slot holds. A table without
    # limits has none, and claims a batch.

    def slot_seats(self) -> Any:
        """A slot's seats, held across its rounds (None: the table has no limits)."""
        return None

    async def claim_limit(self, conn: Any, seats: Any) -> int:
        """How many rows the slot's next claim takes (0: none, every seat is held)."""
        return self.settings.batch

    async def seat_wait(self, conn: Any, seats: Any) -> float:
        """How long a slot that found every seat held waits before it tries again."""
        return self.settings.poll_interval

    async def seats_turn_over(self, conn: Any, seats: Any) -> bool:
        """Whether the slot gives its seats up after this full round."""
        return False

    async def give_seats(self, conn: Any, seats: Any) -> None:
        """Give the slot's seats up (its rounds have committed)."""

    async def drop_seats(self, conn: Any, seats: Any) -> None:
        """A round failed: end the session where the slot holds seats, which gives them up."""

    def claim_steps(self, start: Start, limit: int) -> list[Step]:
        """A round's claim, as steps of `together`, chosen by the round's nothing_to_claim.
        The claim by priority goes after GENERIC_PLANS: its generic plan, for the rest of the
        claim's transaction, where no handler's statement runs (runtime/priorities.py)."""
        claim = self.calls.step(*self.claim_call(self.clock.now(), limit, start=start))
        return [GENERIC_PLANS, claim] if self.priorities.by_priority else [claim]

    async def _send_round(self, conn: Any, pipe: Any, pending: Pending, held: list[Held], *,
                          commit: bool, claim: bool, limit: int = 0,
                          idle: bool = False) -> tuple[list[Any], bool]:
        """Send the batch's settlements, COMMIT, BEGIN and a claim together, and wait for the
        server. Returns the claimed rows, and whether the claim came back short from a start
        (RowLock.claimed_from: the slot claims again at once)."""
        steps: list[Step] = []
        for op, rows in by_op(pending).items():
            steps += self.calls.plan(op, rows)[0]  # the rows are the transaction's: no reading
        pending.clear()
        committed_after = len(steps) + 1  # steps done once the COMMIT has run
        start = self.claim_start()
        if claim:
            steps.append(COMMIT_BEGIN if commit else BEGIN)
            steps += self.claim_steps(start, limit)
        elif commit:
            steps.append(COMMIT)
        started = time.monotonic()
        try:
            results = await self.together(conn, pipe, steps, idle=idle)
        except StepFailed as err:
            if commit and err.done >= committed_after:
                self.delivery.committed(held)
                held.clear()  # the batch committed; what failed came after
            raise err.cause from None
        if commit:
            self.delivery.committed(held)
        if not claim:
            await self.backend.sync(pipe)
            return [], False
        rows = self.claimed(results[-1])
        self.claim_came(rows, limit, started)
        return rows, self.claimed_from(start, rows, limit, started)


class PipelinedCountedRowLock(PipelinedRowLock):
    """count_crashes on a pipelined connection: each round trip carries the last batch's
    settlements, the next batch's claim (it counts the rows and locks their keys), the COMMIT
    of both, the RELEASE of the settled rows' keys and the BEGIN of the transaction the next
    settlements run in. A batch costs one round trip and one commit, as without counting; a
    crash ends the session and frees the counted rows.

    The keys of rows whose settlement leaves them claimable (a retry, a dead letter) are
    unlocked in the round that settles them. Keys of finished rows (acked or dropped: deleted
    or marked processed), which no claim reads again, wait until FINISHED_KEYS_KEPT of them,
    or a batch's, have gathered, or the slot runs out of rows: most rounds send no RELEASE.

    Where RELEASE unlocks every key of the session (MySQL's names no rows), it runs after the
    settlements and before the claim instead: the settlements have locked the settled rows in
    the open transaction, which keeps them from other claims until its COMMIT.

    Where the claim takes its rows' keys as it reads them (claim_takes_keys: MySQL, which has
    no pipeline), the session runs in autocommit mode: the claim and its count commit on their
    own, and a round costs the settlements, the claim and the count. A batch's settlements
    commit together, in a transaction of their own (_settle_together; a settlement of more
    than one statement, a dead letter copied to a table, always), a single one on its own."""
    needs_one_session = True  # each counted row's key is a session lock

    unfinished = CountedRowLock.unfinished
    returned = CountedRowLock.returned

    def __init__(self, parts: Parts) -> None:
        super().__init__(parts)
        self._release_first = release_unlocks_session(self.d)
        self._keep_finished = max(FINISHED_KEYS_KEPT, self.settings.batch)
        self._autocommit = claim_takes_keys(self.d)

    async def _rounds(self, index: int, worked: Callable[[], None], held: list[Held]) -> None:
        async with self.backend.session() as conn:
            seats = self.slot_seats()
            try:
                if self._autocommit:
                    await self.backend.autocommit(conn, True)
                await self._counted_rounds(conn, index, worked, held, seats)
                if self._autocommit:  # as the pool's other users expect it
                    await self.backend.autocommit(conn, False)
            except BaseException:
                await self.drop_seats(conn, seats)
                # Keys of counted rows may still be locked on this session (a round that
                # failed after its claim, a cancelled one): end it, which unlocks them, rather
                # than give the connection back to the pool with them.
                with contextlib.suppress(Exception):
                    await self.backend.end_session(conn)
                raise

    async def _counted_rounds(self, conn: Any, index: int, worked: Callable[[], None],
                              held: list[Held], seats: Any) -> None:
        backend, slots = self.backend, self.slots
        idle = Idle()
        finished: list[Any] = []  # ids of finished rows whose keys are still locked
        async with backend.pipeline(conn) as pipe:
            in_tx = False  # a transaction is open on the connection for the next settlements
            pending: Pending = []
            while True:
                limit, none_due = await self._next_limit(conn, seats)
                claim = limit > 0
                rows: list[Any] = []
                again = False
                if claim or in_tx or pending or finished:
                    rows, again = await self._send_counted(conn, pipe, pending, held, finished,
                                                           in_tx=in_tx, claim=claim,
                                                           limit=limit, idle=idle.due())
                in_tx, pending = claim, []
                held.clear()  # committed, and their keys unlocked
                worked()
                if not claim:
                    if not await self._wait_unclaimed(conn, index, seats, none_due):
                        return
                    continue
                if len(rows) == limit:
                    slots.wake_waiting_slot()  # a full claim: more rows are likely due
                held.extend(self.held(r, deferred=pending) for r in rows)
                await self.deliver_all(held, conn)
                if len(rows) < limit or await self.seats_turn_over(conn, seats):
                    # Drained: settle now rather than hold the rows' keys through the wait (or
                    # give the seats up once the settlements have committed).
                    await self._send_counted(conn, pipe, pending, held, finished,
                                             in_tx=in_tx, claim=False)
                    in_tx, pending = False, []
                    held.clear()
                    await self.give_seats(conn, seats)
                    if len(rows) < limit and not again:
                        await slots.wait(index, self.settings.poll_interval)

    async def _settle_together(self, conn: Any, pipe: Any, steps: list[Step]) -> bool:
        """In autocommit mode, a batch's settlement statements in one transaction: one commit
        where each would make its own. Returns whether they committed. Where the transaction
        fails before its COMMIT (the server broke a deadlock with a claim that read one of the
        rows, or refused a statement), it is rolled back whole and the caller runs the
        statements again, each committing on its own: no row of the batch runs again for
        another row's sake. The rows are held by their keys meanwhile."""
        try:
            await self.together(conn, pipe, [BEGIN, *steps, COMMIT], idle=False)
            return True
        except StepFailed as err:
            if not isinstance(err.cause, Exception) or self.backend.disconnected(err.cause):
                raise err.cause from None
            log.debug("%s: a batch's settlements failed together (%s); each runs again on its "
                      "own", self.name, first_line(err.cause))
            with contextlib.suppress(Exception):
                await self.backend.rollback(conn)
            return False

    async def _send_counted(self, conn: Any, pipe: Any, pending: Pending, held: list[Held],
                            finished: list[Any], *, in_tx: bool, claim: bool, limit: int = 0,
                            idle: bool = False) -> tuple[list[Any], bool]:
        """Send the batch's settlements and a claim in one transaction, its COMMIT, the
        RELEASE of the settled rows' keys and (when claiming) the next BEGIN; in autocommit
        mode the settlements, the RELEASE and the claim, each committed on its own. Wait for
        the server. Returns the claimed rows, and whether the claim came back short from a start
        (RowLock.claimed_from: the slot claims again at once). `finished` holds the ids of
        finished rows whose keys wait to be unlocked; this round's join them."""
        steps: list[Step] = []
        # In autocommit mode, the ids of the rows each settlement step settles: each commits on
        # its own (None: the settlements commit together).
        settles: list[list[Any]] | None = [] if self._autocommit else None
        for op, rows in by_op(pending).items():
            planned = self.calls.plan(op, rows)[0]  # the rows' keys are ours: no reading
            steps += planned
            if settles is not None:
                ids = [values["id"] for values in rows]
                settles += [ids] if len(planned) == 1 else [[i] for i in ids]
        committed_after = 0  # in autocommit mode, the steps done once the settlements committed
        if self._autocommit:
            if any(not one_statement(self.d, op) for op, _ in pending):
                steps, settles = [BEGIN, *steps, COMMIT], None
            elif len(steps) > 1 and await self._settle_together(conn, pipe, steps):
                steps, settles = [], []
            committed_after = len(steps)
        elif not in_tx:
            steps.insert(0, BEGIN)
        done = {values["id"] for op, values in pending if op == "finish"}
        finished += [h.id for h in held if h.id in done]
        unlock = [h.id for h in held if h.id not in done]
        # A RELEASE that names no rows (MySQL's) unlocks the finished rows' keys as well.
        if not claim or len(finished) >= self._keep_finished or unlock and self._release_first:
            unlock += finished
            finished.clear()  # once the round has run (or its failure ended the session)
        pending.clear()
        # The RELEASE of the settled rows' keys: before the claim (`early`) or after the COMMIT.
        early = late = None
        if unlock:
            release = self.calls.step("release", {"id": unlock})
            if self._release_first:
                early = release
            else:
                late = release
        if early is not None:
            steps.append(early)
        start = self.claim_start()
        if claim:
            steps += self.claim_steps(start, limit)
        if not self._autocommit:
            # The next BEGIN chained to the COMMIT: the late RELEASE then runs in the new
            # transaction (it unlocks session locks, as well there).
            steps.append(COMMIT_BEGIN if claim else COMMIT)
            committed_after = len(steps)  # steps done once the COMMIT has run
        if late is not None:
            steps.append(late)
        started = time.monotonic()
        try:
            results = await self.together(conn, pipe, steps, idle=idle)
        except StepFailed as err:
            if err.done >= committed_after:
                self.delivery.committed(held)
                held.clear()  # the batch committed; what failed came after
            elif settles is not None:  # the settlements before the one that failed committed
                kept = {i for ids in settles[:err.done] for i in ids}
                self.delivery.committed([h for h in held if h.id in kept])
                held[:] = [h for h in held if h.id not in kept]
            raise err.cause from None
        self.delivery.committed(held)
        if not claim:
            await self.backend.sync(pipe)
            return [], False
        # The claim is the last call before the COMMIT; a RELEASE after it comes last.
        rows = self.claimed(results[-1] if late is None else results[-2])
        self.claim_came(rows, limit, started)
        return rows, self.claimed_from(start, rows, limit, started)


class Idle:
    """When a pipelined session is next due to go idle outside a transaction (IDLE_EVERY)."""

    def __init__(self) -> None:
        self.next = time.monotonic() + IDLE_EVERY

    def due(self) -> bool:
        now = time.monotonic()
        if now < self.next:
            return False
        self.next = now + IDLE_EVERY
        return True
