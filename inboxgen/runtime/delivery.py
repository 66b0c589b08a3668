"""One delivery: decode the payload, run the handler, decide what its result means, settle the
row and count it (as River's job executor does for one job). The rules are outcomes.py's; how a
settlement reaches the database is the claim form's (`FormSteps`)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from inboxgen.errors import LeaseLost, RowDeleted, SettlementLost
from inboxgen.runtime.batching import one_statement
from inboxgen.runtime.connecting import first_line
from inboxgen.runtime.failures import failure_text
from inboxgen.runtime.handlers import own_frames
from inboxgen.runtime.jobs import Held, Job
from inboxgen.runtime.observe import ACKED, DEAD_LETTERED, DROPPED, RETRIED
from inboxgen.runtime.outcomes import (
    ACKED_OUTCOME,
    DEAD_LETTER,
    FINISH,
    REQUEUE,
    Outcome,
    Settlement,
    after_failure,
    decide,
    retry,
    settlement_call,
    spent,
    undecodable,
    what_happens,
)
from inboxgen.values import fitted_result, json_text

if TYPE_CHECKING:
    from inboxgen.descriptor import TableDescriptor
    from inboxgen.runtime.backends.base import Backend
    from inboxgen.runtime.batching import Calls
    from inboxgen.runtime.clock import Clock
    from inboxgen.runtime.handlers import HandlerRunner
    from inboxgen.runtime.jobs import Stats
    from inboxgen.runtime.observe import Observation
    from inboxgen.runtime.outage import Outage
    from inboxgen.runtime.settings import Settings

log = logging.getLogger("inboxgen.worker")

Unsettled = LeaseLost | SettlementLost | RowDeleted


class TransactionRolledBack(Exception):
    """A transactional job's transaction that the server rolled back whole after its handler
    returned: the delivery's failure, as the handler's own error would be."""


class FormSteps(Protocol):
    """What a delivery asks of its claim form."""

    async def settle(self, h: Held, s: Settlement, conn: Any | None) -> None: ...

    async def deliver_in_transaction(self, h: Held, payload: Any,
                                     conn: Any | None) -> None: ...

    def undecodable(self, h: Held) -> Settlement: ...

    async def write(self, op: str, values: dict[str, Any]) -> bool: ...

    async def missed(self, h: Held, op: str) -> None: ...


class Delivery:
    def __init__(self, *, descriptor: TableDescriptor, settings: Settings, clock: Clock,
                 runner: HandlerRunner, backend: Backend, calls: Calls, stats: Stats,
                 outage: Outage, form: FormSteps, done: Callable[[int], None],
                 observation: Observation | None = None) -> None:
        self.d = descriptor
        self.settings = settings
        self.name = settings.name
        self.clock = clock
        self.runner = runner
        self.backend = backend
        self.calls = calls
        self.stats = stats
        self.outage = outage
        self.form = form
        self._done = done  # rows leave the worker's in-work count
        self.observation = observation
        # Read on every delivery: kept at hand.
        self._max_attempts = settings.max_attempts
        self._transactional = settings.transactional
        self._group = settings.group
        self._has_retry_after = "retry_after" in descriptor.roles
        self._has_dead_letters = (descriptor.dead_letter_group is not None
                                  or descriptor.dead_letter_table is not None)
        self._keeps_errors = "error" in descriptor.roles
        self._keeps_results = "result" in descriptor.roles
        # Older modules' descriptors have no result_type: any JSON.
        self._result_type = getattr(descriptor, "result_type", None)
        self._keeps_progress = "progress" in descriptor.roles
        # `after`: a row whose parents column is above 0 waits for other jobs.
        self._parents = descriptor.role_attrs.get("parents")
        self._headers = descriptor.role_attrs.get("headers")

    async def deliver(self, h: Held, conn: Any | None = None) -> None:
        """Run the handler on one held row and settle it. `conn` holds the row (row lock and
        advisory); lease rows are held by their token alone."""
        d = self.d
        if log.isEnabledFor(logging.DEBUG):
            h.started = asyncio.get_running_loop().time()
        try:
            past = spent(h.attempt, self._max_attempts) if self._max_attempts else None
            if past is not None:
                await self.settle(h, past, conn)
                return
            if self.waits(h):
                failed = await self.waited_for(h, conn)
                if failed is not None:
                    await self.settle(h, failed, conn)
                    return
            self.stats.delivered += 1
            if self.observation is not None:
                h.headers = self.headers(h)
                h.watch = self.observation.delivery(h.id, h.attempt, h.headers)
            try:
                payload = d.decode_payload(getattr(h.row, d.role_attrs["payload"])) \
                    if d.decode_payload is not None else h.row
            except Exception as err:
                log.error("%s: row %s has a payload that does not decode (%s)", self.name,
                          h.id, err)
                h.error = f"the payload does not decode: {failure_text(err)}"
                poisoned = self.poison(h)
                if h.watch is not None:
                    h.watch.decided(outcome_of(poisoned), err)
                await self.settle(h, poisoned, conn)
                return
            if self._transactional:
                await self.form.deliver_in_transaction(h, payload, conn)
                return
            outcome = await self.run_handler(h, payload, None)
            await self.settle(h, self.decide(h, outcome), conn)
        except (LeaseLost, SettlementLost, RowDeleted) as err:
            self.report_unsettled(err)
        finally:
            if h.watch is not None:
                h.watch.end()
            if not h.flushing:
                self._done(1)

    def waits(self, h: Held) -> bool:
        """`after`: whether row `h` waits for other jobs (its parents column is above 0)."""
        return self._parents is not None and bool(getattr(h.row, self._parents))

    async def read_after(self, held: list[Held], conn: Any | None) -> None:
        """`after`: read what became of the jobs that the claimed rows of `held` wait for, in
        one statement for the whole batch (`conn`: the claim's, else a pooled connection), into
        each one's `h.after`. Under a lease a failed read is left to each delivery, which reads
        its own row's then: the rows are claimed already."""
        if self._parents is None:
            return
        waiting = [h for h in held if self.waits(h)]
        if len(waiting) < 2 or self.d.ops.after_states is None:
            return  # one row: waited_for() reads it, the same one statement
        ids = [h.id for h in waiting]
        if conn is not None:
            found = await self.calls(conn, "after_states", ids=ids)
        else:
            try:
                async with self.backend.connection() as read:
                    found = await self.calls(read, "after_states", ids=ids)
            except Exception as err:
                log.debug("%s: the states of what rows %s wait for were not read at once (%s)",
                          self.name, ids, err)
                return
        for h in waiting:
            h.after = found[h.id]

    async def waited_for(self, h: Held, conn: Any | None) -> Settlement | None:
        """`after`: what became of the jobs row `h` waits for (its claim saw none of them
        queued unfinished), in `h.after`: read with its batch (read_after), else here. One
        that failed, where the row was enqueued with on_failure="dead_letter", dead-letters it
        without running (the Settlement); the jobs waiting for it then see it failed in turn."""
        if h.after is None and conn is not None:
            h.after = await self.calls(conn, "after_state", id=h.id)
        elif h.after is None:
            async with self.backend.connection() as read:
                h.after = await self.calls(read, "after_state", id=h.id)
        assert h.after is not None
        if not h.after.blocking:
            return None
        h.error = (f"job {h.after.blocking[0]}, which it waits for, failed (a dead letter, or "
                   f"cancelled)")
        return Settlement(DEAD_LETTER, note=h.error)

    def headers(self, h: Held) -> Mapping[str, str]:
        if self._headers is None:
            return {}
        return decode_headers(getattr(h.row, self._headers))

    async def run_handler(self, h: Held, payload: Any, conn: Any | None) -> Outcome:
        job: Job[Any] = Job(payload=payload, id=h.id, attempt=h.attempt, row=h.row,
                            group=self._group,
                            headers=self.headers(h) if h.headers is None else h.headers,
                            connection=conn,
                            worker=self.name,
                            on_progress=functools.partial(setattr, h, "progress")
                            if self._keeps_progress else None, after=h.after)
        runner = self.runner
        started = time.monotonic() if h.watch is not None else 0.0
        try:
            if runner.on_loop:  # the common case, without a coroutine of the runner's between
                result = await runner.handler(job)  # type: ignore[misc]
            else:
                result = await runner.run(job, conn)
        except asyncio.CancelledError:
            raise
        except Exception as err:
            if h.watch is not None:
                h.watch.handled(time.monotonic() - started)
            if conn is not None and self.backend.disconnected(err, conn):
                # The job's connection died under the handler: the database's outage, not the
                # handler's failure. Its transaction is gone; the row comes back as from a crash.
                raise
            # Logged by decide(), with what becomes of the row, and observed: from the
            # handler's own frame on.
            h.failure = err.with_traceback(own_frames(err.__traceback__))
            return self._after_failure(h)
        if h.watch is not None:
            h.watch.handled(time.monotonic() - started)
        if result is None:
            return ACKED_OUTCOME
        if isinstance(result, Outcome):
            return result
        if not self._keeps_results:
            h.failure = TypeError(f"the handler returned {result!r}, not an outcome (the "
                                  f"table has no result column to keep a value in)")
            return retry()
        failure: TypeError | None = None
        if self._result_type is not None:
            try:  # an instance of the class encodes: fitting it is the whole check
                result = fitted_result(result, self._result_type)
            except TypeError as err:
                failure = err
        else:
            try:
                json_text(result)  # what the ack writes: a value JSON cannot hold fails here
            except (TypeError, ValueError, msgspec.EncodeError) as err:
                failure = TypeError(f"the handler's result {result!r:.200} is not JSON: {err}")
        if failure is not None:
            h.failure = failure
            return self._after_failure(h)
        h.result = result
        return ACKED_OUTCOME

    def decide(self, h: Held, outcome: Outcome) -> Settlement:
        s = decide(outcome, attempt=h.attempt, max_attempts=self._max_attempts,
                   has_retry_after=self._has_retry_after, now=self.clock.now)
        if h.watch is not None:
            h.watch.decided(outcome_of(s), h.failure)
        if h.failure is not None:
            self._report_failure(h, s, h.failure)
        elif s.note and s.action == REQUEUE and outcome.kind == "retry_after":
            log.warning("%s: row %s: %s", self.name, h.id, s.note)
        return s

    async def release_checked(self, h: Held, outcome: Outcome, conn: Any) -> Outcome:
        """An acked transactional job's savepoint (inboxgen_job) released, once its writes
        hold against the constraints its transaction defers to COMMIT: a row lock's batch
        commits together, and a COMMIT they made fail would undo every row of the batch, and
        its claim. Where one does not hold, the handler has failed: the outcome says what
        follows, and the savepoint is still there to roll back to."""
        try:
            await self.backend.release_checked(conn, "inboxgen_job")
        except Exception as err:
            if self.backend.disconnected(err, conn):
                raise
            h.failure = err
            return self._after_failure(h)
        return outcome

    async def commit_job(self, conn: Any) -> Exception | None:
        """COMMIT a transactional job's own transaction. Where the server refuses it on a live
        connection (a deferred constraint the handler's writes broke, another Galera node's
        write), the transaction is rolled back and the error returned: the delivery's failure
        (rolled_back), for the form to record."""
        try:
            await self.backend.commit(conn)
        except Exception as err:
            with contextlib.suppress(Exception):
                await self.backend.rollback(conn)  # sqlite3 keeps a refused transaction open
            if self.backend.disconnected(err, conn):
                raise
            return err
        return None

    def rolled_back(self, h: Held, err: Exception) -> Settlement:
        """The server rolled the job's transaction back whole after its handler returned (a
        transactional handler's): its writes are undone, so the delivery failed as one whose
        handler raised. Decides (and reports) what becomes of the row."""
        h.failure = TransactionRolledBack(
            f"the server rolled back the job's transaction, the handler's writes with it: "
            f"{first_line(err)}")
        h.failure.__cause__ = err
        return self.decide(h, self._after_failure(h))

    def _after_failure(self, h: Held) -> Outcome:
        """What a delivery whose handler failed gets (h.failure says why)."""
        return after_failure(h.attempt, has_retry_after=self._has_retry_after,
                             backoff=self.settings.backoff)

    def _report_failure(self, h: Held, s: Settlement, err: BaseException) -> None:
        """One line for a handler that failed: the error and what becomes of the row, as
        decided. The traceback comes once per job, where it helps: with its last attempt's
        line (the row goes to the dead letters), or, where attempts are not limited, with its
        first failure's (every failure's, where the table does not count attempts). A retry's
        line names the error and says when it runs again."""
        then = what_happens(s, has_retry_after=self._has_retry_after, now=self.clock.now(),
                            dead_letters=self.dead_letters)
        max_attempts = self.settings.max_attempts
        of = f" of {max_attempts}" if max_attempts is not None else ""
        traced = s.action == DEAD_LETTER or (max_attempts is None and h.attempt in (None, 1))
        failed = "failed" if isinstance(err, TransactionRolledBack) else "handler failed"
        log.log(logging.ERROR if s.action == DEAD_LETTER else logging.WARNING,
                "%s: %s on row %s (attempt %s%s): %s; %s", self.name, failed, h.id,
                h.attempt, of, err if isinstance(err, TransactionRolledBack) else repr(err),
                then,
                exc_info=err if traced and err.__traceback__ is not None else None)

    @property
    def dead_letters(self) -> str:
        d = self.d
        if d.dead_letter_group is not None:
            return f"group {d.dead_letter_group}"
        return f"table {d.dead_letter_table}"

    def poison(self, h: Held) -> Settlement:
        s = undecodable(h.attempt, has_dead_letters=self._has_dead_letters,
                        has_retry_after=self._has_retry_after, backoff=self.settings.backoff,
                        now=self.clock.now)
        return s if s is not None else self.form.undecodable(h)

    async def settle(self, h: Held, s: Settlement, conn: Any | None) -> None:
        await self.form.settle(h, s, conn)
        if not h.flushing:
            self.count(s, h)

    def settled_later(self, h: Held, s: Settlement, err: Unsettled | None) -> None:
        """A settlement the form wrote after its delivery had ended (`h.flushing`): count it,
        or report why it changed nothing."""
        if err is None:
            self.count(s, h)
            if self.outage.open is not None:  # a flush worked: an outage is over
                self.outage.worked()
        else:
            self.report_unsettled(err)
        self._done(1)

    def report_unsettled(self, err: Unsettled) -> None:
        if isinstance(err, LeaseLost):
            self.stats.lease_lost += 1
            if self.observation is not None:
                self.observation.lease_lost()
            log.warning("%s", err)
        elif isinstance(err, RowDeleted):
            self.stats.deleted += 1
            log.warning("%s", err)
        else:
            self.stats.settlements_lost += 1
            # In an outage, counted in the line that ends it.
            (log.debug if self.outage.settlements_lost(1) else log.error)("%s", err)

    def count(self, s: Settlement, h: Held) -> None:
        h.settled = True
        if h.commits_later:
            h.uncounted = s  # counted once its round's transaction has committed
            return
        self._count(s, h)

    def committed(self, held: list[Held]) -> None:
        """The transaction in which `held` settled has committed: count their settlements."""
        for h in held:
            if h.uncounted is not None:
                s, h.uncounted = h.uncounted, None
                self._count(s, h)

    def _count(self, s: Settlement, h: Held) -> None:
        stats = self.stats
        if log.isEnabledFor(logging.DEBUG):
            ms = (asyncio.get_running_loop().time() - h.started) * 1000
            log.debug("%s: row %s, attempt %s: %s in %.1f ms", self.name, h.id, h.attempt,
                      "drop" if s.note == "drop" else s.action.lower().replace("_", " "), ms)
        if s.action == FINISH:
            if s.note == "drop":
                log.info("%s: job dropped by its handler", self.name)
                stats.dropped += 1
            else:
                stats.acked += 1
        elif s.action == DEAD_LETTER:
            stats.dead_lettered += 1
        else:
            stats.retried += 1
        if self.observation is not None:
            self.observation.settled(outcome_of(s))

    async def execute_settlement(self, conn: Any | None, h: Held, s: Settlement) -> None:
        """Run the settlement on `conn`, or (a lease, `conn` None) through the form's write."""
        call = self.settlement_call(h, s)
        if call is not None:
            await self.run_settlement(conn, h, *call)

    async def run_settlement(self, conn: Any | None, h: Held, op: str,
                             values: dict[str, Any]) -> None:
        """Run settlement `op` of row `h` with `values` (see `execute_settlement`)."""
        if h.deferred is not None and one_statement(self.d, op):
            h.deferred.append((op, values))  # runs with the batch's others, before its COMMIT
            return
        self.check_held(h, op)
        if conn is not None:
            ok = await self.calls(conn, op, **values)
        else:
            ok = await self.form.write(op, values)  # a lease: held by its token alone
        if not ok:
            await self.form.missed(h, op)

    def row_deleted(self, h: Held, op: str) -> RowDeleted:
        return RowDeleted(f"row {h.id} was deleted while its job ran, so its outcome ({op}) was "
                          f"not recorded", worker=self.name, table=self.d.qualified_name,
                          statement=op.upper())

    def check_held(self, h: Held, op: str) -> None:
        if h.gone:
            raise self.row_deleted(h, op)
        if h.lost:
            raise LeaseLost(f"lease on row {h.id} ran out while the job ran; {op} changed "
                            f"nothing", worker=self.name, table=self.d.qualified_name,
                            statement=op.upper())

    def settlement_call(self, h: Held, s: Settlement) -> tuple[str, dict[str, Any]] | None:
        """The generated function settlement `s` of row `h` calls, and its arguments; None
        where it needs no statement."""
        if s.action == DEAD_LETTER and h.failure is None:  # a handler's failure said so already
            log.error("%s: row %s moved to the dead letters (%s): %s", self.name, h.id,
                      self.dead_letters, s.note)
        return settlement_call(s, row_id=h.id, token=h.token, attempt=h.attempt,
                               now=self.clock.now(), ops=self.d.ops,
                               error=self.error(h, s) if self._keeps_errors else None,
                               result=h.result if s.action == FINISH else None)

    @staticmethod
    def error(h: Held, s: Settlement) -> str | None:
        """What the error column keeps of this delivery: what the handler raised, why the
        worker gave up on the row, or None (an ack; a retry the handler asked for, which
        keeps the last failure's)."""
        if s.action == FINISH:
            return None
        if h.failure is not None:
            return failure_text(h.failure)
        if h.error is not None:
            return h.error
        return s.note if s.action == DEAD_LETTER else None


def decode_headers(raw: Any) -> Mapping[str, str]:
    if raw is None:
        return {}
    if isinstance(raw, (str, bytes)):
        raw = json.loads(raw)
    return {str(k): str(v) for k, v in dict(raw).items()}


def outcome_of(s: Settlement) -> str:
    """A settlement as observers name it (observe.py)."""
    if s.action == FINISH:
        return DROPPED if s.note == "drop" else ACKED
    return DEAD_LETTERED if s.action == DEAD_LETTER else RETRIED
