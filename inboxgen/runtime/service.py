"""The service: several queues in one process, one pool per PostgreSQL database, start-up and
shutdown hooks, one start-up check, one shutdown and one signal handling for all.

Each queue is a Worker; the service builds them, shares a pool between the PostgreSQL ones of
one database, and runs them together. The pool is sized by one rule:
each queue's `workers` count, plus one per queue (for its claims, renewals and settlements),
plus what the service's handlers take for their own work (`handler_connections`). A worker
never takes more than its slots and that one, so the pool is never exceeded, and no queue waits
on another's connections. The PostgreSQL queues of one database that listen share one LISTEN
session, the one connection kept outside the pool there.

A start checks every queue (its address, then its database, server and statements) before any
queue claims or any endpoint is served: a service that cannot start has claimed nothing. Only the
drivers of the service's databases are imported (psycopg and its pool for PostgreSQL queues).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import inspect
import logging
import signal
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

import attrs

from inboxgen.descriptor import TableDescriptor
from inboxgen.errors import ServiceStartFailed, WorkerConfigError, WorkerError
from inboxgen.runtime.backends.base import Database, Wakes
from inboxgen.runtime.clock import Clock
from inboxgen.runtime.jobs import Handler
from inboxgen.runtime.observe import Observer
from inboxgen.runtime.outage import fold_pool_warnings, unfold_pool_warnings
from inboxgen.runtime.outcomes import Backoff
from inboxgen.runtime.schedules import Schedule, keep
from inboxgen.runtime.settings import UNSET, settings_for
from inboxgen.runtime.signals import run_with_signals, say_signalled
from inboxgen.runtime.tasks import cancel_and_wait
from inboxgen.runtime.worker import Worker

__all__ = ["Service"]

log = logging.getLogger("inboxgen.service")

Hook = Callable[[], "Awaitable[None] | None"]
H = TypeVar("H", bound=Hook)


class Service:
    """Serve several queue tables in one process.

    `database` is where queues go unless `queue(..., database=...)` says otherwise. Register
    queues with `queue()`, hooks with `on_startup` / `on_shutdown`, then `run()` (signals
    included), or `await serve()` on a loop of yours.
    """

    def __init__(self, database: Database = None, *, name: str = "service",
                 handler_connections: int = 0, shutdown_timeout: float = 30.0,
                 connect_timeout: float = 30.0, clock: Clock | None = None,
                 observers: Sequence[Observer] = ()) -> None:
        if handler_connections < 0:
            raise WorkerConfigError("handler_connections must be 0 or more", worker=name)
        self.name = name
        self.database = database
        self.handler_connections = handler_connections
        self.shutdown_timeout = shutdown_timeout
        self.connect_timeout = connect_timeout
        self.clock = clock
        self.observers: list[Observer] = list(observers)  # told of every queue (observe.py)
        self.workers: list[Worker] = []
        self._queued: list[_Queue] = []
        self._startup: list[Hook] = []
        self._serving: list[Hook] = []  # once every queue passed its checks (an endpoint's)
        self._shutdown: list[Hook] = []
        self._pools: dict[str, Any] = {}
        self._listeners: list[asyncio.Task[None]] = []
        self._schedules: list[tuple[Schedule, TableDescriptor, str]] = []
        self._keepers: list[asyncio.Task[None]] = []
        self._stop = asyncio.Event()
        self.started = False
        # Handler threads the last shutdown stopped waiting for (see Worker.abandoned_threads).
        self.abandoned_threads = 0

    # -- what the service serves ----------------------------------------------------------

    def queue(self, descriptor: TableDescriptor, handler: Handler, *,
              database: Database = None, group: str | None = None, name: str | None = None,
              workers: int | None = None, batch: int | None = None, lease: int | None = None,
              poll_interval: float | None = None, max_attempts: int | None = UNSET,
              backoff: Backoff | None = None, transactional: bool = False,
              listen: bool | None = None) -> None:
        """Serve `descriptor`'s table (and `group`) with `handler`; the settings are a
        Worker's. The queue's settings are checked now; the database is reached at start."""
        if self.started:
            raise WorkerConfigError("queues are added before the service starts",
                                    worker=self.name)
        where = self._on(database)
        if where is None:
            raise WorkerConfigError("the service has no database: give Service(database=...) "
                                    "or queue(..., database=...)", worker=self.name,
                                    table=descriptor.qualified_name)
        # The Worker's own checks, now rather than at start: a settings mistake is the
        # caller's, and says so where the queue is added.
        s = settings_for(descriptor, group=group, name=name, workers=workers, batch=batch,
                         lease=lease, poll_interval=poll_interval, max_attempts=max_attempts,
                         backoff=backoff, transactional=transactional)
        if any(q.name == s.name for q in self._queued):
            raise WorkerConfigError(f"two queues are named {s.name!r}: give one a name=",
                                    worker=self.name, table=descriptor.qualified_name)
        self._queued.append(_Queue(
            descriptor=descriptor, handler=handler, database=where, name=s.name,
            workers=s.workers, options=dict(
                group=group, name=name, workers=workers, batch=batch, lease=lease,
                poll_interval=poll_interval, max_attempts=max_attempts, backoff=backoff,
                transactional=transactional, listen=listen)))

    def on_startup(self, hook: H) -> H:
        """Run `hook` (a function taking nothing, sync or async) at start, before any queue
        checks its table: migrations go here. Hooks run in the order they were added."""
        self._startup.append(hook)
        return hook

    def on_shutdown(self, hook: H) -> H:
        """Run `hook` once every queue has stopped, in the order added."""
        self._shutdown.append(hook)
        return hook

    def schedule(self, name: str, descriptor: TableDescriptor,
                 row: Callable[[dt.datetime], Any], *, every: dt.timedelta | None = None,
                 cron: str | None = None, database: Database = None) -> None:
        """Keep the next occurrence of a periodic job in `descriptor`'s table: every `every`
        (counted from the Unix epoch, UTC) or at the times of `cron` (UTC; the `cron` extra).
        `row(at)` builds the occurrence due at `at`: its retry_after `at`, and a unique key
        made from `at` (for example `f"{name}:{at:%Y-%m-%dT%H:%M}"`), so that every process of
        the service enqueues each occurrence once between them. The table needs a unique key
        and a retry_after column, and a queue of this service to run the jobs."""
        where = self._on(database)
        table = descriptor.qualified_name
        if "retry_after" not in descriptor.roles:
            raise WorkerConfigError(f"schedule {name!r}: table {table} has no retry_after "
                                    f"column to hold an occurrence's due time",
                                    worker=self.name, table=table)
        if descriptor.ops.insert_unique is None:
            raise WorkerConfigError(f"schedule {name!r}: table {table} has no insert_unique(): "
                                    f"give it a unique key (the spec's `unique`), which keeps "
                                    f"each occurrence once, and rebuild its module",
                                    worker=self.name, table=table)
        if any(sch.name == name for sch, _, _ in self._schedules):
            raise WorkerConfigError(f"two schedules are named {name!r}", worker=self.name)
        self._schedules.append((Schedule(name, row, every=every, cron=cron), descriptor,
                                str(where)))

    def expose_metrics(self, port: int = 9464, host: str = "127.0.0.1",
                       registry: Any = None) -> Any:
        """Serve Prometheus metrics of every queue on http://host:port/metrics while the
        service runs (needs inboxgen[prometheus]); bound to 127.0.0.1 unless told otherwise.
        Returns the `inboxgen.contrib.prometheus.Prometheus` observer."""
        from inboxgen.contrib.prometheus import Prometheus

        metrics = Prometheus(registry=registry)
        self.observers.append(metrics)
        # Served once every queue passed its checks: a service that cannot start serves none.
        self._serving.append(lambda: metrics.start_server(port, host))
        self.on_shutdown(metrics.stop_server)
        return metrics

    def pool_size(self, database: Database = None) -> int:
        """The connections the service's pool on `database` (a PostgreSQL one) holds at most:
        each queue's workers, one more per queue, and `handler_connections`."""
        key = str(self._on(database))
        return sum(q.workers + 1 for q in self._queued
                   if str(q.database) == key) + self.handler_connections

    def pool(self, database: Database = None) -> Any:
        """The service's psycopg_pool.AsyncConnectionPool on a PostgreSQL `database` (open
        while the service runs): handlers take their own connections from it."""
        key = str(self._on(database))
        try:
            return self._pools[key]
        except KeyError:
            raise WorkerConfigError("no PostgreSQL queue of the service is on that database "
                                    "(or the service has not started)",
                                    worker=self.name) from None

    def _on(self, database: Database) -> Database:
        """The database a queue, schedule or pool given `database` is on."""
        return database if database is not None else self.database

    # -- running --------------------------------------------------------------------------

    def run(self) -> None:
        """Serve until SIGINT or SIGTERM, then shut down gracefully; a second signal stops at
        once."""
        run_with_signals(self.serve, self._signalled)

    def _signalled(self, sig: signal.Signals) -> None:
        again = self._stop.is_set()
        busy = [w for w in self.workers if w.started and w.in_flight]
        say_signalled(log, self.name, sig, again=again, in_work=sum(w.in_flight for w in busy),
                      timeout=self.shutdown_timeout,
                      unfinished="; ".join(f"{w.name}: {w.form.unfinished}" for w in busy))
        (self.hurry if again else self.stop)()

    async def serve(self) -> None:
        """Start, serve until `stop()`, then shut down."""
        await self.start()
        try:
            await self._stop.wait()
        finally:
            await self.shutdown()

    async def start(self) -> None:
        """Check every queue's settings and address, run the start-up hooks, then check every
        queue on its database (connect, the server, every statement) before any claims: when
        one cannot start, close what the others opened and raise ServiceStartFailed naming
        every problem. Then serve the endpoints (expose_metrics) and start every queue."""
        if not self._queued:
            raise WorkerConfigError("the service has no queues: add them with queue()",
                                    worker=self.name)
        for sch, descriptor, where in self._schedules:
            if self._queue_of(descriptor, where) is None:
                raise WorkerConfigError(f"schedule {sch.name!r}: no queue of the service runs "
                                        f"table {descriptor.qualified_name}'s jobs on that "
                                        f"database: add one with queue()", worker=self.name)
        self._stop = asyncio.Event()
        self._make_pools()
        try:  # each Worker checks its address as it is built, before anything connects
            self.workers = [self._worker(q) for q in self._queued]
            self._fold_pool_warnings()
            for hook in self._startup:
                await _call(hook)
            ready = await self._prepare()
            if ready:
                for hook in self._serving:
                    await _call(hook)
                listening = self._listeners_to_start()
        except BaseException:
            await self._unprepare()
            raise
        if not ready:
            await self._unprepare()
            return
        for w in self.workers:
            w.begin()
        self.started = True
        self._listeners = [asyncio.create_task(c, name=f"{self.name}:listen")
                           for c in listening]
        self._keep_schedules()
        log.info("%s: serving %d queue(s)%s", self.name, len(self.workers), "".join(
            f"; pool of {p.max_size} on {_label(w)}" for w, p in self._labelled_pools()))

    async def _prepare(self) -> bool:
        """Every queue's checks, all at once, with one warning per database that is not there
        yet: True when all passed; False when stopped meanwhile; ServiceStartFailed naming
        every queue that failed (any other error as it is)."""
        for pool in self._pools.values():
            await pool.open(wait=False)  # the queues wait for the database, each saying why
        warned: set[str] = set()
        results = await asyncio.gather(*(w.prepare(warned=warned) for w in self.workers),
                                       return_exceptions=True)
        problems = [r for r in results if isinstance(r, BaseException)]
        other = [p for p in problems if not isinstance(p, WorkerError)]
        if other:
            raise other[0]
        if problems:
            raise ServiceStartFailed([p for p in problems if isinstance(p, WorkerError)])
        return not self._stop.is_set()

    async def _unprepare(self) -> None:
        """A start that goes no further: close what the queues and the pools opened."""
        await asyncio.gather(*(w.unprepare() for w in self.workers), return_exceptions=True)
        await self._close_pools()
        self.workers = []

    def stop(self) -> None:
        """Stop claiming on every queue; `serve()` then lets jobs in work finish and returns."""
        self._stop.set()
        for w in self.workers:
            w.stop()

    def hurry(self) -> None:
        """Stop every queue without waiting for its jobs in work (a second signal does this):
        they are cancelled, and their rows left as each queue's form says."""
        self._stop.set()
        for w in self.workers:
            w.hurry()

    async def shutdown(self) -> None:
        """Stop every queue (each waits up to shutdown_timeout for its jobs in work, or for
        `hurry()`), close the pools, then run the shutdown hooks."""
        self._stop.set()
        listeners, self._listeners = self._listeners + self._keepers, []
        self._keepers = []
        for task in listeners:
            await cancel_and_wait(task)
        # The queues stay in `workers` until they have stopped: a second signal hurries them.
        await asyncio.gather(*(w.shutdown() for w in self.workers), return_exceptions=True)
        workers, self.workers = self.workers, []
        self.abandoned_threads = sum(w.abandoned_threads for w in workers)
        await self._close_pools()
        if self.started:
            self.started = False
            for hook in self._shutdown:
                await _call(hook)
        self._stop = asyncio.Event()

    # -- parts ----------------------------------------------------------------------------

    def _listeners_to_start(self) -> list[Coroutine[Any, Any, None]]:
        """One LISTEN session per PostgreSQL database for all of its queues that listen, the
        one connection the service keeps outside its pools there (none, and no psycopg, for a
        service without such queues)."""
        routes: dict[str, list[tuple[str, Wakes]]] = {}
        for q, w in zip(self._queued, self.workers, strict=True):
            if not self._shares_listener(q):
                continue
            if not w.one_session:
                log.warning("%s: behind a transaction pooler LISTEN cannot work: polling "
                            "every %g s instead", w.name, w.poll_interval)
                continue
            routes.setdefault(str(q.database), []).append((q.descriptor.table, w.wakes()))
        if not routes:
            return []
        from inboxgen.runtime.listener import listen

        return [listen(database, {}, routed, name=self.name)
                for database, routed in routes.items()]

    # -- pauses ([flow] pauses) --------------------------------------------------------------

    async def pause(self, descriptor: TableDescriptor, *, group: str | None = None) -> None:
        """Pause `descriptor`'s queue (`group` None) or one of its groups, for every worker of
        every process (Worker.pauses). The service must be started and serve the table."""
        await self._serving_worker(descriptor).pauses.pause(group)

    async def resume(self, descriptor: TableDescriptor, *, group: str | None = None) -> bool:
        """Lift a pause of `descriptor`'s queue or of one group; returns whether there was one.
        This service's queues of the table claim at once (Worker.pauses)."""
        lifted = await self._serving_worker(descriptor).pauses.resume(group)
        for w in self.workers:
            if _same_table(w.descriptor, descriptor):
                w.wake()
        return lifted

    async def paused(self, descriptor: TableDescriptor) -> list[str | None]:
        """What of `descriptor`'s queue is paused: None for all of it, else each group."""
        return await self._serving_worker(descriptor).pauses.paused()

    def _serving_worker(self, descriptor: TableDescriptor) -> Worker:
        found = next((w for w in self.workers if _same_table(w.descriptor, descriptor)), None)
        if found is None:
            raise WorkerConfigError("the service serves no queue of this table (or has not "
                                    "started)", worker=self.name,
                                    table=descriptor.qualified_name)
        return found

    def _queue_of(self, descriptor: TableDescriptor, where: str) -> int | None:
        """The index of a queue serving `descriptor`'s table on `where`."""
        return next((i for i, q in enumerate(self._queued)
                     if _same_table(q.descriptor, descriptor) and str(q.database) == where),
                    None)

    def _keep_schedules(self) -> None:
        """One task per schedule, enqueueing its occurrences on its queue's connections."""
        for sch, descriptor, where in self._schedules:
            index = self._queue_of(descriptor, where)
            assert index is not None
            worker = self.workers[index]
            self._keepers.append(asyncio.create_task(
                keep(sch, worker, self._stop), name=f"{self.name}:schedule:{sch.name}"))

    def _shares_listener(self, q: _Queue) -> bool:
        """Whether the queue is woken by the service's listener rather than its own."""
        from inboxgen.runtime.backends import BACKENDS

        kind = BACKENDS.get(q.descriptor.dialect)
        return (kind is not None and kind.takes_pool and kind.can_listen
                and q.options["listen"] is not False)

    def _make_pools(self) -> None:
        """One pool (not opened yet) per PostgreSQL database of the queues."""
        from inboxgen.runtime.backends import BACKENDS

        for q in self._queued:
            kind = BACKENDS.get(q.descriptor.dialect)
            key = str(q.database)
            if kind is None or not kind.takes_pool or key in self._pools:
                continue
            from psycopg_pool import AsyncConnectionPool

            size = self.pool_size(q.database)
            # Opened whole at start, as a Worker's own pool is: the slots are busy at once,
            # and a pool growing on demand would open one connection at a time meanwhile.
            self._pools[key] = AsyncConnectionPool(key, min_size=size, max_size=size,
                                                   open=False,
                                                   name=f"inboxgen-{self.name}-{len(self._pools)}")

    async def _close_pools(self) -> None:
        pools, self._pools = self._pools, {}
        for pool in pools.values():
            await pool.close()
            unfold_pool_warnings(pool.name)

    def _labelled_pools(self) -> list[tuple[Worker, Any]]:
        seen: dict[int, tuple[Worker, Any]] = {}
        for w in self.workers:
            pool = getattr(w.backend, "pool", None)
            if pool is not None and pool in self._pools.values():
                seen.setdefault(id(pool), (w, pool))
        return list(seen.values())

    def _worker(self, q: _Queue) -> Worker:
        pool = self._pools.get(str(q.database))
        options = dict(q.options)
        if self._shares_listener(q):
            options["listen"] = False  # the service's listener wakes it
        return Worker(q.descriptor, q.handler, database=None if pool is not None else q.database,
                      pool=pool, clock=self.clock, shutdown_timeout=self.shutdown_timeout,
                      connect_timeout=self.connect_timeout, observers=self.observers,
                      **options)

    def _fold_pool_warnings(self) -> None:
        """Each pool's warnings go to the first of its queues, as a Worker's own pool's go to
        the worker: an outage is one line, and a start is told by the queues' checks."""
        for key, pool in self._pools.items():
            owner = next(w for q, w in zip(self._queued, self.workers, strict=True)
                         if str(q.database) == key)
            fold_pool_warnings(pool.name, owner.outage)


@attrs.frozen
class _Queue:
    """A queue as added: what its Worker is built from."""

    descriptor: TableDescriptor
    handler: Handler
    database: Database
    name: str
    workers: int
    options: dict[str, Any]  # the Worker's keyword arguments, as given


def _label(worker: Worker) -> str:
    return str(getattr(worker.backend, "label", worker.backend.dialect))


async def _call(hook: Hook) -> None:
    result = hook()
    if inspect.isawaitable(result):
        await result


def _same_table(a: TableDescriptor, b: TableDescriptor) -> bool:
    """Whether two descriptors are of one table (its name and dialect)."""
    return a.qualified_name == b.qualified_name and a.dialect == b.dialect
