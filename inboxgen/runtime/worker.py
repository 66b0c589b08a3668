"""The worker: claims rows of one table (and group), runs the handler, renews, settles.

One asyncio task per worker slot. Each claim form has its own loop, and all of them end in the
same place: `decide` (outcomes.py) says what a delivery's result means, and the form's settle
step executes it with the generated functions (backends.py). Shutdown stops claiming, lets jobs
in work finish within a timeout, then leaves unfinished rows as the form's rule says.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import datetime as _dt
import functools
import inspect
import json
import logging
import random
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Generic, TypeVar

import attrs

from inboxgen.descriptor import TableDescriptor
from inboxgen.errors import LeaseLost, SchemaError, WorkerConfigError
from inboxgen.runtime.backends import (
    AdvisoryRegistry,
    Backend,
    MySQLBackend,
    PostgresBackend,
    SqliteBackend,
)
from inboxgen.runtime.batching import bind_many, by_op, one_statement
from inboxgen.runtime.clock import Clock, SystemClock
from inboxgen.runtime.outcomes import (
    DEAD_LETTER,
    FINISH,
    PARK,
    REQUEUE,
    REQUEUE_AT,
    Backoff,
    Outcome,
    Settlement,
    ack,
    decide,
    lease_expiry,
    retry,
    retry_after,
)
from inboxgen.runtime.settler import LeaseSettler

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
    settling: bool = False
    # Row lock, pipelined: settlements wait here for the next round trip (op, arguments).
    deferred: list[tuple[str, dict[str, Any]]] | None = None
    lock: asyncio.Lock = attrs.field(factory=asyncio.Lock)
    renewal: asyncio.Task[None] | None = None


class Worker:
    """Serve one queue table (and one group, where the table has groups) with a handler."""

    def __init__(
        self,
        descriptor: TableDescriptor,
        handler: Handler,
        *,
        database: str | Path | Mapping[str, Any] | None = None,
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
        self.shutdown_timeout = shutdown_timeout
        self.stats = Stats()
        self._check_settings()
        if pool is not None and d.dialect != "postgres":
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
        self.backend: Backend
        if d.dialect == "sqlite":
            if database is None:
                raise WorkerConfigError("a SQLite worker needs database=<path of the file>",
                                        worker=self.name, table=d.qualified_name)
            self.backend = SqliteBackend(d, str(database))
            self.listen = False
        elif d.dialect == "postgres":
            if database is None and pool is None:
                raise WorkerConfigError("a PostgreSQL worker needs database=<conninfo or URL> "
                                        "or pool=<psycopg_pool.AsyncConnectionPool>",
                                        worker=self.name, table=d.qualified_name)
            self.backend = PostgresBackend(d, str(database) if database else None, pool=pool,
                                           size=self.workers)
            self.listen = True if listen is None else listen
        elif d.dialect == "mysql":
            if database is None:
                raise WorkerConfigError("a MySQL/MariaDB worker needs database=<URL like "
                                        "mysql://user@host:3306/name, or connect() arguments>",
                                        worker=self.name, table=d.qualified_name)
            self.backend = MySQLBackend(d, database if not isinstance(database, Path)
                                        else str(database))
            self.listen = False
        else:
            raise WorkerConfigError(f"no runtime for dialect {d.dialect}",
                                    worker=self.name, table=d.qualified_name)
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._idle: set[int] = set()
        self._slot_wakes: dict[int, asyncio.Event] = {}  # waiting slots, each woken alone
        self._wakes_owed = 0  # wake_one() calls that found no slot waiting
        self._in_flight = 0
        self.handler_threads = 0  # synchronous handlers running in threads
        # Plain handlers run on threads of the worker's own, one per slot: asyncio's shared
        # executor would cap them at min(32, CPUs + 4) whatever `workers` says.
        self._handler_pool: ThreadPoolExecutor | None = None
        self.handler_tasks: set[asyncio.Future[Any]] = set()  # asynchronous handlers running
        self._listener: asyncio.Task[None] | None = None
        self.listener_pid: int | None = None  # the listening session, where there is one
        self._signature_cache: dict[str, frozenset[str]] = {}
        self._keys_in_work: set[str] = set()  # advisory keys this worker's slots hold
        # Advisory: when this worker settled each id lately (a sequence number), so candidates
        # read before a settlement cost no round trip; an id settled before the read is a new
        # row (SQLite may reuse the largest rowid) and is tried as usual.
        self._settle_seq = 0
        self._settled_at: dict[Any, int] = {}
        self._settled_order: collections.deque[Any] = collections.deque()
        self._advisory_reach = 0  # how many candidates the next advisory round reads, at least
        self._outage: tuple[_dt.datetime, int] | None = None  # since when claims fail
        # Row lock without count_crashes on a driver with pipeline mode, non-transactional
        # handlers: a round's settlements and COMMIT travel with the next claim.
        self._pipelined = (d.form == "row_lock" and not d.count_crashes and not transactional
                           and self.backend.pipelines)
        # Lease on a driver with pipeline mode: the slots' settlements are written together.
        self._settler = LeaseSettler(d, self.backend) if (
            d.form == "lease" and self.backend.pipelines) else None
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
        """Serve until SIGINT or SIGTERM, then shut down gracefully."""
        asyncio.run(self._run_with_signals())

    async def _run_with_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.stop)
        try:
            await self.serve()
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

    async def serve(self) -> None:
        """Start, serve until `stop()`, then shut down."""
        await self.start()
        try:
            await self._stopping.wait()
        finally:
            await self.shutdown()

    async def start(self) -> None:
        """Open connections, prepare every statement, start the worker slots."""
        self._claim_advisory_file()
        try:
            await self.backend.open()
        except BaseException:
            AdvisoryRegistry.release_file(self)
            raise
        try:
            await self._prepare()
        except BaseException:
            await self.backend.close()
            AdvisoryRegistry.release_file(self)
            raise
        if self._settler is not None:
            self._settler.start()
        # Threads start only once plain handlers run.
        self._handler_pool = ThreadPoolExecutor(max_workers=self.workers,
                                                thread_name_prefix=f"{self.name}:handler")
        if self.listen and isinstance(self.backend, PostgresBackend):
            from inboxgen.runtime.listener import listen

            self._listener = asyncio.create_task(listen(self), name=f"{self.name}:listen")
        self._tasks = [asyncio.create_task(self._slot(i), name=f"{self.name}:{i}")
                       for i in range(self.workers)]
        self.started = True
        log.info("%s: serving %s (%s%s), %d worker(s), batch %d", self.name,
                 self.descriptor.qualified_name, self.descriptor.form,
                 ", FIFO" if self.descriptor.fifo else "", self.workers, self.batch)

    def _claim_advisory_file(self) -> None:
        """SQLite keeps advisory locks in the process: a second process serving advisory rows
        of the same file would deliver them twice, so it is refused."""
        if self.descriptor.form != "advisory" or not isinstance(self.backend, SqliteBackend):
            return
        database = str(Path(self.backend.path).resolve())
        if not AdvisoryRegistry.claim_file(database, self):
            raise WorkerConfigError(
                f"another process serves advisory rows of {self.backend.path}: SQLite keeps "
                f"advisory locks in one process, so run the advisory workers of a database "
                f"file in one process (or use the lease form)",
                worker=self.name, table=self.descriptor.qualified_name)

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
        """Wait for jobs in work (up to shutdown_timeout), then cancel what remains and close."""
        self.stop()
        if self._tasks:
            done, pending = await asyncio.wait(self._tasks, timeout=self.shutdown_timeout)
            for task in pending:
                task.cancel()
            if pending:
                log.warning("%s: %d job(s) still in work after %g s: cancelled (%s)",
                            self.name, self._in_flight, self.shutdown_timeout,
                            _UNFINISHED[self.descriptor.form])
                await asyncio.gather(*pending, return_exceptions=True)
        if self._settler is not None:
            await self._settler.stop()
        if self._listener is not None:
            self._listener.cancel()
            await asyncio.gather(self._listener, return_exceptions=True)
        AdvisoryRegistry.release_all(self)
        AdvisoryRegistry.release_file(self)
        if self._handler_pool is not None:
            # Threads still running a cancelled job's handler finish on their own.
            self._handler_pool.shutdown(wait=False)
            self._handler_pool = None
        await self.backend.close()
        self._tasks = []
        self._listener = None
        # Ready to start again (a worker can serve, stop, and serve once more).
        self.started = False
        self._stopping = asyncio.Event()
        self._wakes_owed = 0
        log.info("%s: stopped", self.name)

    @property
    def in_flight(self) -> int:
        """Jobs claimed and not yet settled."""
        return self._in_flight

    @property
    def quiet(self) -> bool:
        """No job in work, no claim or statement under way, every slot waiting for work."""
        return (self._in_flight == 0 and self.backend.busy == 0
                and len(self._idle) == len(self._tasks))

    async def _check_server(self, conn: Any) -> None:
        """PostgreSQL: session features behind a transaction pooler. MySQL/MariaDB: the version
        floor, and a binary log format that allows READ COMMITTED writes."""
        if isinstance(self.backend, PostgresBackend):
            await self._check_session_pooling(conn)
        if not isinstance(self.backend, MySQLBackend):
            return
        from inboxgen.runtime.serverversion import require_supported

        where = {"worker": self.name, "table": self.descriptor.qualified_name}
        (text,) = await self.backend.query(conn, "SELECT VERSION()")
        require_supported(str(text), **where)
        log_bin, binlog_format = await self.backend.query(
            conn, "SELECT @@log_bin, @@binlog_format")
        if int(log_bin or 0) and str(binlog_format).upper() == "STATEMENT":
            raise WorkerConfigError(
                "the server's binlog_format is STATEMENT, which refuses the READ COMMITTED "
                "transactions the claims run in: set binlog_format to ROW or MIXED", **where)

    async def _check_session_pooling(self, conn: Any) -> None:
        """Advisory locks and LISTEN live on a server session. Behind a transaction pooler
        (PgBouncer's pool_mode=transaction) two transactions of one client connection may run
        on different server sessions: where that shows, refuse the advisory form and poll
        instead of listening."""
        pids = set()
        for _ in range(3):
            cur = await conn.execute("SELECT pg_backend_pid()")
            pids.add((await cur.fetchone())[0])
            await conn.commit()
        if len(pids) == 1:
            return
        where = {"worker": self.name, "table": self.descriptor.qualified_name}
        if self.descriptor.form == "advisory":
            raise WorkerConfigError(
                "the connection is behind a transaction pooler (each transaction ran on another "
                "server session), where advisory locks do not hold: connect directly or use "
                "session pooling", **where)
        if self.listen:
            log.warning("%s: behind a transaction pooler LISTEN cannot work: polling every "
                        "%g s instead", self.name, self.poll_interval)
            self.listen = False

    async def _prepare(self) -> None:
        d = self.descriptor
        async with self.backend.connection() as conn:
            await self._check_server(conn)
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
                if self._pipelined:
                    await self._pipelined_session(index, worked)
                else:
                    await self._round(index, worked)
            except asyncio.CancelledError:
                raise
            except Exception as err:
                failures += 1
                self._claim_failed(err)
                await self._wait(index, _retry_delay(failures))

    async def _round(self, index: int, worked: Callable[[], None]) -> None:
        drained = await self._claim_and_work()
        worked()
        if drained:
            await self._wait(index, self.poll_interval)
        else:
            self._wake_waiting_slot()  # a full claim: more rows are likely due

    async def _pipelined_session(self, index: int, worked: Callable[[], None]) -> None:
        """Row lock in pipeline mode, until the worker stops. The slot keeps one connection in
        pipeline mode; each round queues the last round's settlements, its COMMIT, a BEGIN and
        the next claim, and the claim's fetch sends them all: a batch costs one round trip. A
        round that fails rolls back (its rows return at once, as a crash leaves them), and the
        slot starts again on a fresh connection."""
        async with self.backend.session() as conn, self.backend.pipeline(conn) as pipe:
            in_tx = False  # a claim's transaction is open on the connection
            pending: list[tuple[str, dict[str, Any]]] = []
            while True:
                claim = not self._stopping.is_set()
                rows = await self._send_round(conn, pipe, pending, commit=in_tx, claim=claim)
                in_tx, pending = claim, []
                worked()
                if not claim:
                    return
                if len(rows) == self.batch:
                    self._wake_waiting_slot()  # a full claim: more rows are likely due
                held = [self._held(r, deferred=pending) for r in rows]
                await self._deliver_all(held, conn)
                if len(rows) < self.batch:
                    # Drained: commit now rather than hold the rows through the wait.
                    await self._send_round(conn, pipe, pending, commit=True, claim=False)
                    in_tx, pending = False, []
                    await self._wait(index, self.poll_interval)

    async def _send_round(self, conn: Any, pipe: Any, pending: list[tuple[str, dict[str, Any]]],
                          *, commit: bool, claim: bool) -> list[Any]:
        """Queue settlements, COMMIT, BEGIN and a claim; the claim's fetch (or, without a
        claim, a sync) sends them and waits for the server. Returns the claimed rows."""
        # A row lock's rows are this transaction's, so a settlement cannot miss them: its
        # result (which arrives with the claim's) needs no reading.
        for op, many in by_op(pending).items():
            bound = bind_many(self.descriptor, op, many) if len(many) > 1 else None
            if bound is not None:
                # One message per row, no cursor per row.
                await self.backend.execute_many(conn, *bound)
                continue
            for values in many:
                await self._call(conn, op, **values)
        if commit:
            await self.backend.execute(conn, "COMMIT")
        if not claim:
            await self.backend.sync(pipe)
            return []
        await self.backend.execute(conn, "BEGIN")
        return await self._claim(conn, self.clock.now(), self.batch)

    def _claim_failed(self, err: Exception) -> None:
        """One line when claims start failing (a server restart, a lost connection); the
        slots' further failures during the same outage are debug lines."""
        self.stats.failed_claims += 1
        if self._outage is None:
            self._outage = (self.clock.now(), self.stats.failed_claims)
            log.error("%s: claims failing, trying again with a short backoff: %s",
                      self.name, err)
        else:
            log.debug("%s: claim failed again: %s", self.name, err)

    def _claim_worked(self) -> None:
        if self._outage is None:
            return
        since, first = self._outage
        self._outage = None
        log.warning("%s: claims work again after %.1f s (%d failed)", self.name,
                    (self.clock.now() - since).total_seconds(),
                    self.stats.failed_claims - first + 1)

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

    async def _claim_and_work(self) -> bool:
        """One round of claiming and working; True when the queue looked drained (the claim
        came back short), so the slot waits for the poll interval or a wake-up."""
        form = self.descriptor.form
        if form == "lease":
            return await self._lease_round() < self.batch
        if form == "row_lock":
            return await self._row_lock_round() < self.batch
        return await self._advisory_round()

    def _args(self, op: str, **values: Any) -> dict[str, Any]:
        """Keep the arguments the generated function takes (they follow the table's roles)."""
        names = self._signature_cache.get(op)
        if names is None:
            fn = getattr(self.descriptor.ops, op)
            names = frozenset(inspect.signature(fn).parameters) - {"conn"}
            self._signature_cache[op] = names
        return {k: v for k, v in values.items() if k in names}

    async def _call(self, conn: Any, op: str, **values: Any) -> Any:
        return await self.backend.call(conn, op, **self._args(op, **values))

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
        if self.descriptor.fifo:
            row = await self._call(conn, "fifo_claim", group=self.group, now=now,
                                   locked_until=until)
            return [] if row is None else [row]
        rows: list[Any] = await self._call(conn, "claim", group=self.group, now=now,
                                           locked_until=until, limit=limit)
        return rows

    def _held(self, row: Any, **extra: Any) -> _Held:
        attrs_ = self.descriptor.role_attrs
        attempt = getattr(row, attrs_["attempt"]) if "attempt" in attrs_ else None
        return _Held(row, getattr(row, attrs_["id"]), attempt, **extra)

    # -- lease ------------------------------------------------------------------------------

    async def _lease_round(self) -> int:
        now = self.clock.now()
        until = lease_expiry(now, self.lease)
        if self._settler is not None and not self.descriptor.fifo:
            # One statement: on an autocommit session it is its own transaction, one round trip.
            async with self.backend.session() as conn:
                rows = await self._claim(conn, now, self.batch, until)
        else:
            async with self._transaction() as conn:
                rows = await self._claim(conn, now, self.batch, until)
        held = [self._held(r, token=until) for r in rows]
        for h in held:  # every claimed row renews from the start, not only the one in work
            h.renewal = asyncio.create_task(self._renew(h))
        try:
            if self._settler is not None and not self.transactional and len(held) > 1:
                await self._deliver_overlapped(held)
            else:
                await self._deliver_all(held)
        finally:
            for h in held:
                if h.renewal is not None:
                    h.renewal.cancel()
        return len(rows)

    async def _deliver_overlapped(self, held: list[_Held]) -> None:
        """Lease rows through the settler: the handlers still run one after another, in claim
        order, but a row's settlement is on its way while the next row's handler runs, so the
        batch's settlements gather in a few flushes instead of waiting one flush each."""
        self._in_flight += len(held)
        turn = asyncio.Lock()  # fair: the rows' handlers take it in claim order
        started: set[int] = set()

        async def deliver(h: _Held) -> None:
            started.add(id(h))
            await self._deliver(h, None, turn=turn)

        tasks = [asyncio.ensure_future(deliver(h)) for h in held]
        try:
            await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        finally:
            self._in_flight -= len(held) - len(started)  # rows a broken round never reached

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

    async def _renew(self, h: _Held) -> None:
        """Renew every half lease. A renewal that fails (a busy or lost connection) is tried
        again every second; only a renewal that finds the row taken ends the lease."""
        wait = self.lease / 2
        while True:
            await self.clock.sleep(wait)
            if h.settling or h.lost:
                return
            ok = None
            try:
                # The transaction first, then the row's lock, as every settlement takes them:
                # on SQLite the transaction is the process's write turn, and a settlement
                # holding it must never wait for a renewal that waits for it.
                async with self._transaction() as conn, h.lock:
                    if h.settling or h.lost:
                        return
                    new = lease_expiry(self.clock.now(), self.lease)
                    ok = await self._call(conn, "renew", id=h.id, locked_until=h.token,
                                          attempt=h.attempt, new_locked_until=new)
                    if ok:
                        h.token = new
            except asyncio.CancelledError:
                raise
            except Exception as err:
                log.warning("%s: renewing the lease on row %s failed, trying again in 1 s "
                            "(it holds until %s): %s", self.name, h.id, h.token, err)
                wait = min(1.0, self.lease / 2)
                continue
            wait = self.lease / 2
            if ok:
                self.stats.renewed += 1
            else:
                h.lost = True  # counted when the settlement reports it
                log.warning("%s: lease on row %s lost before it could be renewed: another "
                            "worker may run it", self.name, h.id)
                return

    async def _settle_lease(self, h: _Held, s: Settlement, conn: Any | None = None) -> None:
        if conn is None and self._settler is None:
            # The transaction before the row's lock (see _renew).
            async with self._transaction() as tx:
                await self._settle_lease(h, s, tx)
            return
        async with h.lock:  # the renewal ends under the row's lock
            h.settling = True
            if h.renewal is not None:
                h.renewal.cancel()
            if conn is not None:
                await self._execute_settlement(conn, h, s)
                return
        await self._execute_settlement(None, h, s)  # with the other slots' (the settler)

    # -- row lock ---------------------------------------------------------------------------

    async def _row_lock_round(self) -> int:
        if self.descriptor.count_crashes:
            return await self._counted_row_lock_round()
        # A cancelled or broken round rolls back: its rows return at once, attempts unchanged
        # (what a crash does in this form).
        async with self._transaction() as conn:
            rows = await self._claim(conn, self.clock.now(), self.batch)
            await self._deliver_all([self._held(r) for r in rows], conn)
        return len(rows)

    async def _counted_row_lock_round(self) -> int:
        """count_crashes: the attempt is counted and committed first, so a job that kills its
        process still spends it; the rows are then locked again, all in the transaction they
        are worked in. From the count until that relock the claim holds the table's claim turn
        (a session lock), so no other claim counts the same rows for a delivery that never
        happens: only a delivery that began and never settled is counted."""
        key = f"{self.descriptor.qualified_name}:claim"
        async with self.backend.connection() as conn:
            await self.backend.begin(conn)
            # The session lock is taken in the counting transaction: no round trip of its own.
            turn = await self._call(conn, "claim_guard", key=key, wait=_CLAIM_TURN_WAIT)
            if not turn:
                await self.backend.rollback(conn)
                return 0  # another claim held the turn all that time: try again later
            held: list[_Held] = []
            try:
                counted = await self._claim(conn, self.clock.now(), self.batch)
                await self.backend.commit(conn)
                await self.backend.begin(conn)
                for row in counted:
                    h = self._held(row)
                    if await self._call(conn, "relock", id=h.id, attempt=h.attempt) is not None:
                        held.append(h)
            except BaseException:
                await self.backend.rollback(conn)
                raise
            finally:
                # Inside the relocked rows' transaction: unlocking a session lock is not undone
                # by a rollback, and the rows stay locked until the transaction ends.
                with contextlib.suppress(Exception):
                    await self._call(conn, "claim_unguard", key=key)
            try:
                await self._deliver_all(held, conn)
            except BaseException:
                await self.backend.rollback(conn)
                raise
            await self.backend.commit(conn)
        return len(counted)

    # -- advisory ---------------------------------------------------------------------------

    async def _advisory_round(self) -> bool:
        """Lock and take up to `batch` of the due rows. Rows whose key another slot or process
        holds are skipped; the round counts as drained only when fewer rows were due than it
        read."""
        got = 0
        held = 0  # candidates passed over: their keys are held here or elsewhere
        # Rows in work stay due (and first in claim order) until they settle: read past this
        # worker's own, and further still while whole pages turn out held by other processes.
        limit = max(self.batch + self.workers + len(self._keys_in_work), self._advisory_reach)
        async with self.backend.connection() as conn:
            read_at = self._settle_seq
            candidates = await self._call(conn, "candidates", group=self.group,
                                          now=self.clock.now(), limit=limit)
            await self.backend.commit(conn)
            for row in candidates:
                if got >= self.batch:
                    break
                row_id = getattr(row, self.descriptor.role_attrs["id"])
                if self._settled_at.get(row_id, -1) >= read_at:
                    continue  # a slot of this worker settled it since the candidates were read
                key = self.descriptor.advisory_key(row) if self.descriptor.advisory_key else ""
                if key in self._keys_in_work:
                    held += 1
                    continue  # another slot of this worker holds it: no round trip to learn so
                self._keys_in_work.add(key)  # reserved before the lock's round trip
                if not await self._lock(conn, key):
                    self._keys_in_work.discard(key)
                    held += 1
                    continue
                try:
                    async with self._on(conn):
                        taken = await self._call(conn, "take", id=row_id, group=self.group,
                                                 now=self.clock.now())
                    if taken is None:
                        continue  # finished or rescheduled since the candidates were read
                    got += 1
                    self._in_flight += 1
                    await self._deliver(self._held(taken, key=key), conn)
                finally:
                    self._keys_in_work.discard(key)
                    await self._unlock(conn, key)
        if len(candidates) < limit:
            self._advisory_reach = 0
            return got < self.batch
        # A full page: the next round reads past as many held rows as this one met (twice as
        # far when they left this round short), since the free rows lie further on.
        margin = self.batch + self.workers
        self._advisory_reach = min(_ADVISORY_MAX_REACH,
                                   (2 * max(held, limit) if got < self.batch else held) + margin)
        if got == 0:
            # Every due row we read is held by others (a shared key, or other slots): look
            # again shortly rather than wait out the poll interval.
            await asyncio.sleep(0.01)
        return False

    @contextlib.asynccontextmanager
    async def _on(self, conn: Any) -> AsyncIterator[Any]:
        """A transaction on a connection the caller holds (advisory: the lock's session)."""
        await self.backend.begin(conn)
        try:
            yield conn
        except BaseException:
            await self.backend.rollback(conn)
            raise
        await self.backend.commit(conn)

    async def _lock(self, conn: Any, key: str) -> bool:
        if self.backend.dialect == "sqlite":
            database = getattr(self.backend, "path", "")
            return AdvisoryRegistry.try_lock(str(Path(database).resolve()), key, self)
        ok = bool(await self._call(conn, "lock", key=key))
        await self.backend.commit(conn)
        return ok

    async def _unlock(self, conn: Any, key: str) -> None:
        if self.backend.dialect == "sqlite":
            database = getattr(self.backend, "path", "")
            AdvisoryRegistry.unlock(str(Path(database).resolve()), key, self)
            return
        with contextlib.suppress(Exception):  # a broken session has released it already
            await self.backend.rollback(conn)
            await self._call(conn, "unlock", key=key)
            await self.backend.commit(conn)

    # -- one delivery -----------------------------------------------------------------------

    async def _deliver(self, h: _Held, conn: Any | None = None, *,
                       turn: asyncio.Lock | None = None) -> None:
        """Run the handler on one held row and settle it. `conn` holds the row (row lock and
        advisory); lease rows are held by their token alone. `turn`, where given, is held while
        the handler runs (and released before the settlement)."""
        d = self.descriptor
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
                await self._deliver_in_transaction(h, payload, conn)
                return
            async with turn or contextlib.nullcontext():
                outcome = await self._run_handler(h, payload, None)
            await self._settle(h, self._decide(h, outcome), conn)
        except LeaseLost as err:
            self.stats.lease_lost += 1
            log.warning("%s", err)
        finally:
            self._in_flight -= 1

    async def _deliver_in_transaction(self, h: _Held, payload: Any, conn: Any | None) -> None:
        form = self.descriptor.form
        if form == "row_lock":
            assert conn is not None
            await self.backend.execute(conn, "SAVEPOINT inboxgen_job")
            outcome = await self._run_handler(h, payload, conn)
            s = self._decide(h, outcome)
            if s.action != FINISH or outcome.kind != "ack":
                await self.backend.execute(conn, "ROLLBACK TO SAVEPOINT inboxgen_job")
            await self.backend.execute(conn, "RELEASE SAVEPOINT inboxgen_job")
            await self._settle(h, s, conn)
            return
        if form == "advisory":
            assert conn is not None
            await self.backend.begin(conn)
            outcome = await self._run_handler(h, payload, conn)
            s = self._decide(h, outcome)
            if outcome.kind == "ack" and s.action == FINISH:
                await self._execute_settlement(conn, h, s)
                await self.backend.commit(conn)
                self._count(s)
                return
            await self.backend.rollback(conn)
            await self._settle(h, s, conn)
            return
        async with self.backend.connection() as tx:
            sqlite = self.backend.dialect == "sqlite"
            await self.backend.begin(tx, immediate=True)
            if sqlite:
                # This transaction holds SQLite's write lock until the job settles, so no other
                # connection can claim the row: the lease needs no renewal meanwhile (and a
                # renewal, on another connection, would only wait for this very lock).
                async with h.lock:
                    if h.renewal is not None:
                        h.renewal.cancel()
            try:
                await self.backend.execute(tx, "SAVEPOINT inboxgen_job")
                outcome = await self._run_handler(h, payload, tx)
                s = self._decide(h, outcome)
                if outcome.kind != "ack" or s.action != FINISH:
                    # The handler's writes go; the outcome is still recorded, in the same
                    # transaction, so no other claim can slip in between.
                    await self.backend.execute(tx, "ROLLBACK TO SAVEPOINT inboxgen_job")
                await self.backend.execute(tx, "RELEASE SAVEPOINT inboxgen_job")
                await self._settle_lease(h, s, tx)
            except BaseException:
                await self.backend.rollback(tx)
                raise
            await self.backend.commit(tx)
            self._count(s)

    async def _run_handler(self, h: _Held, payload: Any, conn: Any | None) -> Outcome:
        d = self.descriptor
        headers: Mapping[str, str] = {}
        if "headers" in d.role_attrs:
            raw = getattr(h.row, d.role_attrs["headers"])
            headers = _decode_headers(raw)
        job: Job[Any] = Job(payload=payload, id=h.id, attempt=h.attempt, row=h.row,
                            group=self.group, headers=headers, connection=conn,
                            worker=self.name)
        try:
            if inspect.iscoroutinefunction(self.handler):
                # Its own task, so a fake clock can tell a handler waiting on it from one
                # waiting on real I/O.
                task = asyncio.ensure_future(self.handler(job))
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
            if "retry_after" not in d.roles:
                log.warning("%s: handler failed on row %s (attempt %s): %r; retrying now (the "
                            "table has no retry_after column for a backoff)", self.name, h.id,
                            h.attempt, err)
                return retry()
            delay = self.backoff.delay(h.attempt)
            log.warning("%s: handler failed on row %s (attempt %s): %r; retrying in %g s",
                        self.name, h.id, h.attempt, err, delay.total_seconds())
            return retry_after(delay)
        if result is None:
            return ack()
        if not isinstance(result, Outcome):
            log.error("%s: handler returned %r, not an outcome: retrying the job", self.name,
                      result)
            return retry()
        return result

    def _decide(self, h: _Held, outcome: Outcome) -> Settlement:
        s = decide(outcome, attempt=h.attempt, max_attempts=self.max_attempts,
                   has_retry_after="retry_after" in self.descriptor.roles, now=self.clock.now())
        if s.note and s.action == REQUEUE and outcome.kind == "retry_after":
            log.warning("%s: row %s: %s", self.name, h.id, s.note)
        return s

    def _poison(self, h: _Held) -> Settlement:
        """A payload that does not decode never will: dead-letter it, or delay it, or (with
        neither a destination nor retry_after) drop it rather than loop on it."""
        d = self.descriptor
        if d.dead_letter_group is not None or d.dead_letter_table is not None:
            return Settlement(DEAD_LETTER, note="payload does not decode")
        if "retry_after" in d.roles:
            delay = self.backoff.delay(h.attempt)
            return Settlement(REQUEUE_AT, due=self.clock.now() + delay)
        if d.form == "lease":
            log.error("%s: row %s left leased: its payload does not decode, and the table has "
                      "no dead-letter destination; it comes back when the lease ends",
                      self.name, h.id)
            return Settlement(PARK)
        log.error("%s: row %s dropped: its payload does not decode and the table has neither a "
                  "dead-letter destination nor a retry_after column", self.name, h.id)
        return Settlement(FINISH, note="drop")

    async def _settle(self, h: _Held, s: Settlement, conn: Any | None) -> None:
        if self.descriptor.form == "lease":
            await self._settle_lease(h, s)
        elif self.descriptor.form == "advisory":
            assert conn is not None
            async with self._on(conn):
                await self._execute_settlement(conn, h, s)
            if s.action in (FINISH, DEAD_LETTER):  # gone for good: retried rows come back
                self._remember_settled(h.id)
        else:
            assert conn is not None
            await self._execute_settlement(conn, h, s)
        self._count(s)

    def _remember_settled(self, row_id: Any) -> None:
        self._settled_at[row_id] = self._settle_seq
        self._settle_seq += 1
        self._settled_order.append(row_id)
        if len(self._settled_order) > 4096:
            old = self._settled_order.popleft()
            if self._settled_at.get(old, 0) < self._settle_seq - 4096:
                del self._settled_at[old]

    def _count(self, s: Settlement) -> None:
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
            return
        else:
            op = "dead_letter"
            log.error("%s: row %s moved to the dead letters (%s): %s", self.name, h.id,
                      d.dead_letter_group or d.dead_letter_table, s.note)
        if getattr(d.ops, op) is None:
            # Row lock without an attempt column, or advisory: a plain retry needs no
            # statement (the rollback or the unlock returns the row).
            return
        if h.deferred is not None and one_statement(d, op):
            h.deferred.append((op, values))  # sent with the next claim (_send_round)
            return
        if h.lost:
            raise LeaseLost(f"lease on row {h.id} ran out while the job ran; {op} changed "
                            f"nothing", worker=self.name, table=d.qualified_name,
                            statement=op.upper())
        if conn is not None:
            ok = await self._call(conn, op, **values)
        elif self._settler is not None and bind_many(d, op, [values]) is not None:
            ok = await self._settler.settle(op, values)
        else:
            async with self._transaction() as tx:
                ok = await self._call(tx, op, **values)
        if not ok:
            if d.form == "lease":
                raise LeaseLost(f"row {h.id} is no longer held by this worker (its lease ran "
                                f"out and it was claimed again); {op} changed nothing",
                                worker=self.name, table=d.qualified_name, statement=op.upper())
            log.warning("%s: %s of row %s changed no row", self.name, op, h.id)


def _retry_delay(failures: int) -> float:
    """After a failed round: 50 ms, doubling up to 1 s, with jitter so that slots and processes
    do not reconnect in step."""
    ceiling: float = min(1.0, 0.05 * 2.0 ** min(failures - 1, 10))
    return random.uniform(0.5, 1.0) * ceiling


# How long a counted row-lock claim waits for the table's claim turn (MySQL's GET_LOCK; on
# PostgreSQL the wait is the session's lock_timeout).
_CLAIM_TURN_WAIT = 10.0
# The most candidates one advisory round reads while the rows ahead are held by others.
_ADVISORY_MAX_REACH = 4096

_UNFINISHED = {
    "row_lock": "their transactions roll back: the rows return at once, attempts unchanged",
    "lease": "their leases stay: the rows return when the leases end",
    "advisory": "their locks are released: the rows return at once",
}


def _decode_headers(raw: Any) -> Mapping[str, str]:
    if raw is None:
        return {}
    if isinstance(raw, (str, bytes)):
        raw = json.loads(raw)
    return {str(k): str(v) for k, v in dict(raw).items()}
