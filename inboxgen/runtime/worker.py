"""The worker: claims rows of one table (and group), runs the handler, renews, settles.

One asyncio task per worker slot. Each claim form (forms/) says how a slot claims and works a
round, and all of them end in the same place: `decide` (outcomes.py) says what a delivery's
result means, and the form's settle step executes it with the generated functions (through the
backend of the driver). Shutdown stops claiming, lets jobs in work finish within a timeout, then
leaves unfinished rows as the form's rule says.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import datetime as _dt
import functools
import inspect
import json
import logging
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, TypeVar, cast

import attrs

from inboxgen.descriptor import TableDescriptor
from inboxgen.errors import (
    LeaseLost,
    RowDeleted,
    SchemaError,
    SettlementLost,
    WorkerConfigError,
)
from inboxgen.runtime.backends import BACKENDS, Backend
from inboxgen.runtime.backends.base import Database
from inboxgen.runtime.batching import Calls, by_op, one_statement
from inboxgen.runtime.clock import Clock, SystemClock
from inboxgen.runtime.connecting import open_connections, reach, retry_delay
from inboxgen.runtime.forms import form_for
from inboxgen.runtime.outage import Outage, fold_pool_warnings, unfold_pool_warnings
from inboxgen.runtime.outcomes import (
    ACKED_OUTCOME,
    DEAD_LETTER,
    FINISH,
    PARK,
    REQUEUE,
    REQUEUE_AT,
    Backoff,
    Outcome,
    Settlement,
    decide,
    retry,
    retry_after,
)
from inboxgen.runtime.presence import Presence

log = logging.getLogger("inboxgen.worker")

P = TypeVar("P")
_UNSET: Any = object()


@attrs.frozen
class Job(Generic[P]):
    """One delivery, as the handler receives it."""

    payload: P  # the decoded payload (the whole row where the table has no payload column)
    id: Any
    attempt: int | None  # this delivery's number: the first reads 1
    row: Any  # the claimed row (the generated ClaimedRow)
    group: str | None
    headers: Mapping[str, str]
    connection: Any | None  # in transactional mode: writes here commit with the ack
    worker: str


Handler = Callable[[Job[Any]], "Outcome | None | Awaitable[Outcome | None]"]


@attrs.define
class Stats:
    delivered: int = 0
    acked: int = 0
    dropped: int = 0
    retried: int = 0
    dead_lettered: int = 0
    renewed: int = 0
    lease_lost: int = 0
    settlements_lost: int = 0  # written on a connection lost before they committed
    deleted: int = 0  # rows deleted while their jobs ran: their outcomes were not recorded
    failed_claims: int = 0


@attrs.define
class _Held:
    """A claimed row while it is in work."""

    row: Any
    id: Any
    attempt: int | None
    token: _dt.datetime | None = None  # lease: the expiry we wrote, our ownership token
    key: str | None = None  # advisory: the lock key
    lost: bool = False
    gone: bool = False  # lost because the row was deleted (not taken by another worker)
    settling: bool = False
    # Row lock, pipelined: settlements wait here for the next round trip (op, arguments).
    deferred: list[tuple[str, dict[str, Any]]] | None = None
    renewing: bool = False  # lease: in a renewal on its way (its settlement waits for it)
    started: float = 0.0  # when its delivery began (the event loop's clock)
    settled: bool = False  # its settlement ran (or waits for its batch's commit)
    # Lease: its settlement waits for the settler's flush, which then counts it or reports it
    # lost (Worker._settled_later); the slot has gone on meanwhile.
    flushing: bool = False
    handled: bool = False  # lease: its handler finished (its slot has room for another row)
    # What the handler raised (or the non-outcome it returned): logged once its settlement is
    # decided, so the line says what becomes of the row.
    failure: BaseException | None = None


class Worker:
    """Serve one queue table (and one group, where the table has groups) with a handler."""

    def __init__(
        self,
        descriptor: TableDescriptor,
        handler: Handler,
        *,
        database: Database = None,
        pool: Any = None,
        group: str | None = None,
        name: str | None = None,
        workers: int | None = None,
        batch: int | None = None,
        lease: int | None = None,
        poll_interval: float | None = None,
        max_attempts: int | None = _UNSET,
        backoff: Backoff | None = None,
        transactional: bool = False,
        listen: bool | None = None,
        clock: Clock | None = None,
        shutdown_timeout: float = 30.0,
        connect_timeout: float = 30.0,
    ) -> None:
        d = descriptor
        defaults = d.defaults
        self.descriptor = d
        self.handler = handler
        self.group = group
        self.name = name or (f"{d.table}:{group}" if group else d.table)
        self.workers = defaults.workers if workers is None else workers
        self.batch = defaults.batch if batch is None else batch
        self.lease = defaults.lease_seconds if lease is None else lease
        self.poll_interval = poll_interval if poll_interval is not None else \
            defaults.poll_interval
        self.max_attempts = defaults.max_attempts if max_attempts is _UNSET else max_attempts
        self.backoff = backoff or Backoff()
        self.transactional = transactional
        self.clock: Clock = clock or SystemClock()
        self._async_handler = inspect.iscoroutinefunction(handler)
        # A test clock that waits for quiet must see which tasks are handlers (see testing.py):
        # only then does each async handler run in a task of its own, which costs a turn of
        # the event loop per job.
        self._handler_tasks_watched = bool(getattr(self.clock, "watches_handler_tasks", False))
        self.shutdown_timeout = shutdown_timeout
        self.connect_timeout = connect_timeout  # how long start() waits for the database
        self.stats = Stats()
        self._check_settings()
        kind = BACKENDS.get(d.dialect)
        if kind is None:
            raise WorkerConfigError(f"no runtime for dialect {d.dialect}",
                                    worker=self.name, table=d.qualified_name)
        if pool is not None and not kind.takes_pool:
            raise WorkerConfigError("pool= is for PostgreSQL (psycopg_pool); a SQLite or "
                                    "MySQL worker keeps connections of its own",
                                    worker=self.name, table=d.qualified_name)
        if pool is not None:
            max_size = int(getattr(pool, "max_size", self.workers + 1))
            if max_size < 2:
                raise WorkerConfigError(
                    f"a pool of {max_size} connection cannot serve a worker: it never takes "
                    f"the pool's last connection, so give the pool at least 2",
                    worker=self.name, table=d.qualified_name)
            if self.workers > max_size - 1:
                log.warning("%s: pool of %d connections: running %d workers, not %d, so the "
                            "worker never takes the pool's last connection",
                            self.name, max_size, max(max_size - 1, 1), self.workers)
                self.workers = max(max_size - 1, 1)
        try:
            self.backend: Backend = kind.for_worker(
                d, database, pool, self.workers, transactional=transactional)
        except ValueError as err:  # NoDatabase, or a malformed address (never quoted)
            raise WorkerConfigError(str(err), worker=self.name, table=d.qualified_name) from None
        self.listen = kind.listens_by_default if listen is None else listen and kind.can_listen
        self._stopping = asyncio.Event()
        self._hurry = asyncio.Event()  # a second signal: stop without waiting for jobs
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._idle: set[int] = set()
        self._slot_wakes: dict[int, asyncio.Event] = {}  # waiting slots, each woken alone
        self._wakes_owed = 0  # wake_one() calls that found no slot waiting
        self._in_flight = 0
        self.handler_threads = 0  # synchronous handlers running in threads
        # Their threads, also those a shutdown stopped waiting for: a thread cannot be stopped.
        self._handler_runs: set[asyncio.Future[Any]] = set()
        # Plain handlers run on threads of the worker's own, one per slot: asyncio's shared
        # executor would cap them at min(32, CPUs + 4) whatever `workers` says.
        self._handler_pool: ThreadPoolExecutor | None = None
        self.handler_tasks: set[asyncio.Future[Any]] = set()  # asynchronous handlers running
        self._listener: asyncio.Task[None] | None = None
        self.listener_pid: int | None = None  # the listening session, where there is one
        self.calls = Calls(d, self.backend)
        self.outage = Outage(self)
        self.presence = Presence(d, self.backend)
        self.form = form_for(self)
        self.started = False

    # -- settings -------------------------------------------------------------------------

    def _check_settings(self) -> None:
        d = self.descriptor
        where = {"worker": self.name, "table": d.qualified_name}
        has_dest = d.dead_letter_group is not None or d.dead_letter_table is not None
        if self.max_attempts is not None and not has_dest:
            raise WorkerConfigError(
                f"max_attempts={self.max_attempts} needs a dead-letter destination: add "
                f"[dead_letter] to {d.source}", **where)
        if has_dest and self.max_attempts is None:
            raise WorkerConfigError(
                "the table has a dead-letter destination but max_attempts is missing: set "
                "runtime.max_attempts in the spec or max_attempts= here", **where)
        if self.max_attempts is not None and "attempt" not in d.roles:
            raise WorkerConfigError("max_attempts needs a column with role attempt", **where)
        if "group" in d.roles and self.group is None:
            raise WorkerConfigError("the table has groups: give the worker group=<name>",
                                    **where)
        if "group" not in d.roles and self.group is not None:
            raise WorkerConfigError("group= given, but the table has no group column", **where)
        for label, value in (("workers", self.workers), ("batch", self.batch),
                             ("lease", self.lease)):
            if value < 1:
                raise WorkerConfigError(f"{label} must be at least 1, not {value}", **where)

    # -- running --------------------------------------------------------------------------

    def run(self) -> None:
        """Serve until SIGINT or SIGTERM, then shut down gracefully; a second signal stops at
        once."""
        asyncio.run(self._run_with_signals())

    async def _run_with_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._signalled, sig)
        try:
            await self.serve()
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

    def _signalled(self, sig: signal.Signals) -> None:
        if not self._stopping.is_set():
            if self.started and self._in_flight:
                log.warning("%s: %s: stopping; waiting up to %g s for %d job(s) in work "
                            "(again to stop at once)", self.name, sig.name,
                            self.shutdown_timeout, self._in_flight)
            else:
                log.info("%s: %s: stopping", self.name, sig.name)
            self.stop()
            return
        log.warning("%s: %s again: stopping at once (%s)", self.name, sig.name,
                    self.form.unfinished)
        self._hurry.set()

    async def serve(self) -> None:
        """Start, serve until `stop()`, then shut down."""
        await self.start()
        if not self.started:  # stopped while it waited for the database
            self._stopping = asyncio.Event()
            return
        try:
            await self._stopping.wait()
        finally:
            await self.shutdown()

    async def _stopped_within(self, seconds: float) -> bool:
        """Wait up to `seconds`; True as soon as the worker is told to stop."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)
        return self._stopping.is_set()

    async def start(self) -> None:
        """Connect (waiting up to connect_timeout for a database that is not there yet),
        prepare every statement, start the worker slots. Returns without starting when the
        worker is stopped meanwhile."""
        pool = self.backend.own_pool_name
        if pool is not None:  # its warnings are folded into the worker's outage lines
            fold_pool_warnings(pool, self.outage)
        try:
            await self._start()
        except BaseException:
            if pool is not None:
                unfold_pool_warnings(pool)
            raise
        if not self.started and pool is not None:
            unfold_pool_warnings(pool)

    async def _start(self) -> None:
        self.form.claim_resources()
        try:
            if not await reach(self):
                self.form.release_resources()
                return
            if not await open_connections(self):
                await self.backend.close()
                self.form.release_resources()
                return
        except BaseException:
            self.form.release_resources()
            raise
        try:
            await self._prepare()
        except BaseException:
            await self.backend.close()
            self.form.release_resources()
            raise
        self.form.start()
        # Threads start only once plain handlers run.
        self._handler_pool = ThreadPoolExecutor(max_workers=self.workers,
                                                thread_name_prefix=f"{self.name}:handler")
        listening = self.backend.listener(self) if self.listen else None
        if listening is not None:
            self._listener = asyncio.create_task(listening, name=f"{self.name}:listen")
        self._tasks = [asyncio.create_task(self._slot(i), name=f"{self.name}:{i}")
                       for i in range(self.workers)]
        self.started = True
        log.info("%s: serving %s (%s%s) on %s, %d worker(s), batch %d", self.name,
                 self.descriptor.qualified_name, self.descriptor.form,
                 ", FIFO" if self.descriptor.fifo else "", self.backend.driver, self.workers,
                 self.batch)

    def stop(self) -> None:
        """Stop claiming; `serve()` then lets jobs in work finish and returns."""
        self._stopping.set()
        self.wake()

    def wake(self) -> None:
        """Claim now instead of waiting out the poll interval (every waiting slot)."""
        event, self._wake = self._wake, asyncio.Event()
        event.set()

    def wake_one(self) -> None:
        """One job may be ready: wake one waiting slot, or, with none waiting, let the next slot
        that would wait claim at once instead (a notification is never dropped)."""
        if not self._wake_waiting_slot():
            self._wakes_owed = min(self._wakes_owed + 1, self.workers)

    def _wake_waiting_slot(self) -> bool:
        for index, event in self._slot_wakes.items():
            if not event.is_set():
                event.set()
                del self._slot_wakes[index]
                return True
        return False

    async def shutdown(self) -> None:
        """Wait for jobs in work (up to shutdown_timeout, or a second signal), then cancel what
        remains and close."""
        self.stop()
        if self._tasks:
            hurry = asyncio.ensure_future(self._hurry.wait())
            slots = asyncio.ensure_future(asyncio.wait(self._tasks,
                                                       timeout=self.shutdown_timeout))
            await asyncio.wait([slots, hurry], return_when=asyncio.FIRST_COMPLETED)
            hurry.cancel()
            slots.cancel()
            pending = {t for t in self._tasks if not t.done()}
            for task in pending:
                task.cancel()
            if pending and not self._hurry.is_set():
                log.warning("%s: %d job(s) still in work after %g s: cancelled (%s)",
                            self.name, self._in_flight, self.shutdown_timeout,
                            self.form.unfinished)
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
        await self.form.stop()
        if self._listener is not None:
            self._listener.cancel()
            await asyncio.gather(self._listener, return_exceptions=True)
        self.form.release_resources()
        if self._handler_pool is not None:
            # Threads still running a cancelled job's handler finish on their own.
            self._handler_pool.shutdown(wait=False)
            self._handler_pool = None
        await self.backend.close()
        if self.backend.own_pool_name is not None:
            unfold_pool_warnings(self.backend.own_pool_name)
        self._tasks = []
        self._listener = None
        # Ready to start again (a worker can serve, stop, and serve once more).
        self.started = False
        self._stopping = asyncio.Event()
        self._hurry = asyncio.Event()
        self._wakes_owed = 0
        self.outage.at_stop()
        st = self.stats
        extra = ""
        if self.descriptor.form == "lease":
            extra = f", {st.renewed} lease renewal(s)"
        if st.lease_lost:
            extra += f", {st.lease_lost} lease(s) lost"
        if st.deleted:
            extra += f", {st.deleted} row(s) deleted while in work"
        log.info("%s: stopped: %d delivered, %d acked, %d dropped, %d retried, %d dead-lettered"
                 "%s", self.name, st.delivered, st.acked, st.dropped, st.retried,
                 st.dead_lettered, extra)

    @property
    def abandoned_threads(self) -> int:
        """Plain handlers a shutdown stopped waiting for, still running in their threads (the
        process cannot exit normally until they end)."""
        return sum(1 for f in self._handler_runs if not f.done())

    @property
    def in_flight(self) -> int:
        """Jobs claimed and not yet settled."""
        return self._in_flight

    @property
    def quiet(self) -> bool:
        """No job in work, no claim or statement under way, every slot waiting for work."""
        return (self._in_flight == 0 and self.backend.busy == 0
                and self._idle.issuperset(range(len(self._tasks)))
                and self._idle.issuperset(self.form.waiters))

    async def _prepare(self) -> None:
        d = self.descriptor
        async with self.backend.connection() as conn:
            await self.backend.check_server(conn, self)
            for name in d.statements:
                try:
                    await self.backend.explain(conn, name)
                except Exception as err:  # the driver's error names what is missing
                    detail = str(err).splitlines()[0] if str(err) else type(err).__name__
                    raise SchemaError(f"statement does not prepare against the database: "
                                      f"{detail}", worker=self.name,
                                      table=d.qualified_name, statement=name) from err

    # -- the slot loop --------------------------------------------------------------------

    async def _slot(self, index: int) -> None:
        failures = 0  # this slot's rounds failed in a row

        def worked() -> None:
            nonlocal failures
            failures = 0
            self._claim_worked()

        while not self._stopping.is_set():
            try:
                await self.form.serve(index, worked)
            except asyncio.CancelledError:
                raise
            except Exception as err:
                failures += 1
                self._claim_failed(err)
                await self._wait(index, retry_delay(failures))

    def _claim_failed(self, err: Exception) -> None:
        """One line when claims start failing (a server restart, a lost connection); the
        slots' further failures during the same outage are debug lines (outage.py)."""
        self.outage.claim_failed(err)

    def _claim_worked(self) -> None:
        if self.outage.open is not None:
            self.outage.worked()

    async def _wait(self, index: int, seconds: float) -> None:
        if self._wakes_owed and not self._stopping.is_set():
            self._wakes_owed -= 1  # a wake-up came while every slot was busy: claim now
            await asyncio.sleep(0)
            return
        self._idle.add(index)
        mine = self._slot_wakes[index] = asyncio.Event()
        waits = [asyncio.ensure_future(self.clock.sleep(seconds)),
                 asyncio.ensure_future(self._wake.wait()),
                 asyncio.ensure_future(mine.wait()),
                 asyncio.ensure_future(self._stopping.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
            self._idle.discard(index)
            if self._slot_wakes.get(index) is mine:
                del self._slot_wakes[index]

    async def _call(self, conn: Any, op: str, **values: Any) -> Any:
        return await self.calls(conn, op, **values)

    async def _settle_together(self, conn: Any, pending: list[tuple[str, dict[str, Any]]]
                               ) -> None:
        """Run settlements that waited for each other on `conn`, each kind together (acks as
        one statement where the module has it)."""
        for op, many in by_op(pending).items():
            await self.calls.many(conn, op, many)
        pending.clear()

    def _count_renewals(self, n: int) -> None:
        self.stats.renewed += n
        self.outage.worked()

    @contextlib.asynccontextmanager
    async def _transaction(self) -> AsyncIterator[Any]:
        async with self.backend.connection() as conn:
            await self.backend.begin(conn)
            try:
                yield conn
            except BaseException:
                await self.backend.rollback(conn)
                raise
            await self.backend.commit(conn)

    async def _claim(self, conn: Any, now: _dt.datetime, limit: int,
                     until: _dt.datetime | None = None) -> list[Any]:
        op, values = self._claim_call(now, limit, until)
        return self._claimed(await self._call(conn, op, **values))

    @staticmethod
    def _claimed(result: Any) -> list[Any]:
        """A claim's rows (a FIFO claim returns one row or None)."""
        if isinstance(result, list):
            return result
        return [] if result is None else [result]

    def _claim_call(self, now: _dt.datetime, limit: int, until: _dt.datetime | None = None
                    ) -> tuple[str, dict[str, Any]]:
        """The claim statement to run and its values (FIFO: the group's head alone)."""
        if self.descriptor.fifo:
            return "fifo_claim", {"group": self.group, "now": now, "locked_until": until}
        return "claim", {"group": self.group, "now": now, "locked_until": until, "limit": limit}

    def _held(self, row: Any, **extra: Any) -> _Held:
        attrs_ = self.descriptor.role_attrs
        attempt = getattr(row, attrs_["attempt"]) if "attempt" in attrs_ else None
        return _Held(row, getattr(row, attrs_["id"]), attempt, **extra)

    async def _deliver_all(self, held: list[_Held], conn: Any | None = None) -> None:
        """Deliver claimed rows one after another; rows a broken round never reached leave the
        in-work count too."""
        self._in_flight += len(held)
        started = 0
        try:
            for h in held:
                started += 1
                await self._deliver(h, conn)
        finally:
            self._in_flight -= len(held) - started

    # -- one delivery -----------------------------------------------------------------------

    async def _deliver(self, h: _Held, conn: Any | None = None) -> None:
        """Run the handler on one held row and settle it. `conn` holds the row (row lock and
        advisory); lease rows are held by their token alone."""
        d = self.descriptor
        if log.isEnabledFor(logging.DEBUG):
            h.started = asyncio.get_running_loop().time()
        try:
            if (self.max_attempts is not None and h.attempt is not None
                    and h.attempt > self.max_attempts):
                # Earlier deliveries never settled (their process died): the attempts are spent
                # before the handler runs again, so a job that kills its worker cannot loop.
                await self._settle(h, Settlement(
                    DEAD_LETTER, note=f"attempt {h.attempt} is past max_attempts "
                                      f"{self.max_attempts}: earlier deliveries never finished"),
                    conn)
                return
            self.stats.delivered += 1
            try:
                payload = d.decode_payload(getattr(h.row, d.role_attrs["payload"])) \
                    if d.decode_payload is not None else h.row
            except Exception as err:
                log.error("%s: row %s has a payload that does not decode (%s)", self.name,
                          h.id, err)
                await self._settle(h, self._poison(h), conn)
                return
            if self.transactional:
                await self.form.deliver_in_transaction(h, payload, conn)
                return
            outcome = await self._run_handler(h, payload, None)
            await self._settle(h, self._decide(h, outcome), conn)
        except (LeaseLost, SettlementLost, RowDeleted) as err:
            self._report_unsettled(err)
        finally:
            if not h.flushing:
                self._in_flight -= 1

    async def _run_handler(self, h: _Held, payload: Any, conn: Any | None) -> Outcome:
        d = self.descriptor
        headers: Mapping[str, str] = {}
        if "headers" in d.role_attrs:
            raw = getattr(h.row, d.role_attrs["headers"])
            headers = _decode_headers(raw)
        job: Job[Any] = Job(payload=payload, id=h.id, attempt=h.attempt, row=h.row,
                            group=self.group, headers=headers, connection=conn,
                            worker=self.name)
        result: Any
        try:
            if self._async_handler:
                run = cast("Awaitable[Outcome | None]", self.handler(job))
                if not self._handler_tasks_watched:
                    result = await run
                else:
                    # Its own task, so a fake clock can tell a handler waiting on it from one
                    # waiting on real I/O.
                    task = asyncio.ensure_future(run)
                    self.handler_tasks.add(task)
                    try:
                        result = await task
                    finally:
                        self.handler_tasks.discard(task)
            else:
                self.handler_threads += 1
                assert self._handler_pool is not None  # made by start()
                context = contextvars.copy_context()  # as asyncio.to_thread does
                thread = asyncio.get_running_loop().run_in_executor(
                    self._handler_pool, functools.partial(context.run, self.handler, job))
                self._handler_runs.add(thread)
                thread.add_done_callback(self._handler_runs.discard)
                try:
                    result = await asyncio.shield(thread)
                except asyncio.CancelledError:
                    if conn is not None and not thread.done():
                        # The handler's thread goes on with the job's connection: nothing
                        # else may use or close it until that thread is done.
                        self.backend.abandon(conn, thread)
                    raise
                finally:
                    self.handler_threads -= 1
                if inspect.isawaitable(result):
                    result = await result
        except asyncio.CancelledError:
            raise
        except Exception as err:
            if conn is not None and self.backend.disconnected(err, conn):
                # The job's connection died under the handler: the database's outage, not the
                # handler's failure. Its transaction is gone; the row comes back as from a crash.
                raise
            h.failure = err  # logged by _decide, with what becomes of the row
            if "retry_after" not in d.roles:
                return retry()
            return retry_after(self.backoff.delay(h.attempt))
        if result is None:
            return ACKED_OUTCOME
        if not isinstance(result, Outcome):
            h.failure = TypeError(f"the handler returned {result!r}, not an outcome")
            return retry()
        return result

    def _decide(self, h: _Held, outcome: Outcome) -> Settlement:
        s = decide(outcome, attempt=h.attempt, max_attempts=self.max_attempts,
                   has_retry_after="retry_after" in self.descriptor.roles, now=self.clock.now)
        if h.failure is not None:
            self._report_failure(h, s, h.failure)
        elif s.note and s.action == REQUEUE and outcome.kind == "retry_after":
            log.warning("%s: row %s: %s", self.name, h.id, s.note)
        return s

    def _report_failure(self, h: _Held, s: Settlement, err: BaseException) -> None:
        """One line for a handler that failed: the error (with its traceback) and what becomes
        of the row, as decided."""
        level = logging.WARNING
        if s.action == DEAD_LETTER:
            level = logging.ERROR
            then = f"its last attempt failed: moved to the dead letters ({self._dead_letters})"
        elif s.action == REQUEUE_AT:
            assert s.due is not None
            then = f"retrying in {(s.due - self.clock.now()).total_seconds():g} s"
        elif "retry_after" not in self.descriptor.roles:
            then = "retrying now (the table has no retry_after column for a backoff)"
        else:
            then = "retrying now"
        of = f" of {self.max_attempts}" if self.max_attempts is not None else ""
        log.log(level, "%s: handler failed on row %s (attempt %s%s): %r; %s", self.name, h.id,
                h.attempt, of, err, then,
                exc_info=err if err.__traceback__ is not None else None)

    @property
    def _dead_letters(self) -> str:
        d = self.descriptor
        if d.dead_letter_group is not None:
            return f"group {d.dead_letter_group}"
        return f"table {d.dead_letter_table}"

    def _poison(self, h: _Held) -> Settlement:
        """A payload that does not decode never will: dead-letter it, or delay it, or (with
        neither a destination nor retry_after) drop it rather than loop on it."""
        d = self.descriptor
        if d.dead_letter_group is not None or d.dead_letter_table is not None:
            return Settlement(DEAD_LETTER, note="payload does not decode")
        if "retry_after" in d.roles:
            delay = self.backoff.delay(h.attempt)
            return Settlement(REQUEUE_AT, due=self.clock.now() + delay)
        return self.form.undecodable(h)

    async def _settle(self, h: _Held, s: Settlement, conn: Any | None) -> None:
        await self.form.settle(h, s, conn)
        if not h.flushing:
            self._count(s, h)

    def _settled_later(self, h: _Held, s: Settlement,
                       err: LeaseLost | SettlementLost | RowDeleted | None) -> None:
        """A settlement the form wrote after its delivery had ended (`h.flushing`): count it,
        or report why it changed nothing."""
        if err is None:
            self._count(s, h)
            if self.outage.open is not None:  # a flush worked: an outage is over
                self.outage.worked()
        else:
            self._report_unsettled(err)
        self._in_flight -= 1

    def _report_unsettled(self, err: LeaseLost | SettlementLost | RowDeleted) -> None:
        if isinstance(err, LeaseLost):
            self.stats.lease_lost += 1
            log.warning("%s", err)
        elif isinstance(err, RowDeleted):
            self.stats.deleted += 1
            log.warning("%s", err)
        else:
            self.stats.settlements_lost += 1
            # In an outage, counted in the line that ends it.
            (log.debug if self.outage.settlements_lost(1) else log.error)("%s", err)

    def _count(self, s: Settlement, h: _Held) -> None:
        h.settled = True
        if log.isEnabledFor(logging.DEBUG):
            ms = (asyncio.get_running_loop().time() - h.started) * 1000
            log.debug("%s: row %s, attempt %s: %s in %.1f ms", self.name, h.id, h.attempt,
                      "drop" if s.note == "drop" else s.action.lower().replace("_", " "), ms)
        if s.action == FINISH:
            if s.note == "drop":
                log.info("%s: job dropped by its handler", self.name)
                self.stats.dropped += 1
            else:
                self.stats.acked += 1
        elif s.action == DEAD_LETTER:
            self.stats.dead_lettered += 1
        else:
            self.stats.retried += 1

    async def _execute_settlement(self, conn: Any | None, h: _Held, s: Settlement) -> None:
        """Run the settlement on `conn`, or (a lease, `conn` None) through the settler or in a
        transaction of its own."""
        call = self._settlement_call(h, s)
        if call is not None:
            await self._run_settlement(conn, h, *call)

    async def _run_settlement(self, conn: Any | None, h: _Held, op: str,
                              values: dict[str, Any]) -> None:
        """Run settlement `op` of row `h` with `values` (see `_execute_settlement`)."""
        if h.deferred is not None and one_statement(self.descriptor, op):
            h.deferred.append((op, values))  # run with the batch's others (_settle_together)
            return
        self._check_held(h, op)
        if conn is not None:
            ok = await self._call(conn, op, **values)
        else:
            ok = await self.form.write(op, values)  # a lease: held by its token alone
        if not ok:
            await self.form.missed(h, op)

    def _row_deleted(self, h: _Held, op: str) -> RowDeleted:
        return RowDeleted(f"row {h.id} was deleted while its job ran, so its outcome ({op}) was "
                          f"not recorded", worker=self.name,
                          table=self.descriptor.qualified_name, statement=op.upper())

    def _check_held(self, h: _Held, op: str) -> None:
        if h.gone:
            raise self._row_deleted(h, op)
        if h.lost:
            raise LeaseLost(f"lease on row {h.id} ran out while the job ran; {op} changed "
                            f"nothing", worker=self.name, table=self.descriptor.qualified_name,
                            statement=op.upper())

    def _settlement_call(self, h: _Held, s: Settlement) -> tuple[str, dict[str, Any]] | None:
        """The generated function settlement `s` of row `h` calls, and its arguments; None
        where it needs no statement."""
        d = self.descriptor
        now = self.clock.now()
        values: dict[str, Any] = {"id": h.id, "locked_until": h.token, "attempt": h.attempt,
                                  "now": now}
        if s.action == FINISH:
            op = "finish"
        elif s.action == REQUEUE:
            op = "retry"
        elif s.action == REQUEUE_AT:
            op, values["retry_after"] = "retry_after", s.due
        elif s.action == PARK:
            return None
        else:
            op = "dead_letter"
            if h.failure is None:  # a handler's failure said so already
                log.error("%s: row %s moved to the dead letters (%s): %s", self.name, h.id,
                          self._dead_letters, s.note)
        if getattr(d.ops, op) is None:
            # Row lock without an attempt column, or advisory: a plain retry needs no
            # statement (the rollback or the unlock returns the row).
            return None
        return op, values


def _decode_headers(raw: Any) -> Mapping[str, str]:
    if raw is None:
        return {}
    if isinstance(raw, (str, bytes)):
        raw = json.loads(raw)
    return {str(k): str(v) for k, v in dict(raw).items()}
