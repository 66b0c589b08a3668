"""The worker: its lifecycle (start, serve, shutdown), signals, and the slot loop.

One asyncio task per worker slot. The claim form (forms/) says how a slot claims and works a
round; each delivery runs through the form's Delivery (delivery.py), which follows the rules of
outcomes.py. The forms wait on and wake through the worker's slots (slots.py), which also count
the rows in work. A start checks everything before the first claim (`prepare()`), then claims
(`begin()`); a service prepares all of its queues before any begins. Shutdown stops claiming,
lets jobs in work finish within a timeout, then leaves unfinished rows as the form's rule says.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Sequence
from typing import Any

from inboxgen.descriptor import TableDescriptor
from inboxgen.errors import WorkerConfigError
from inboxgen.runtime.backends import BACKENDS, Backend
from inboxgen.runtime.backends.base import Database, Wakes
from inboxgen.runtime.batching import Calls
from inboxgen.runtime.clock import Clock
from inboxgen.runtime.clocksync import ClockSync, clock_for
from inboxgen.runtime.connecting import behind_a_pooler, connect, explain_all, retry_delay
from inboxgen.runtime.forms import Parts, form_for
from inboxgen.runtime.handlers import HandlerRunner
from inboxgen.runtime.jobs import Handler, Job, Stats
from inboxgen.runtime.observe import Observation, Observer, QueueInfo
from inboxgen.runtime.outage import Outage, fold_pool_warnings, unfold_pool_warnings
from inboxgen.runtime.outcomes import Backoff
from inboxgen.runtime.pauses import Pauses
from inboxgen.runtime.presence import Presence
from inboxgen.runtime.settings import UNSET, fit_to_pool, settings_for
from inboxgen.runtime.signals import run_with_signals, say_signalled
from inboxgen.runtime.slots import WorkerSlots
from inboxgen.runtime.tasks import cancel_and_wait

__all__ = ["Job", "Stats", "Worker"]

log = logging.getLogger("inboxgen.worker")


class Worker:
    """Serve one queue table (and one group, where the table has groups) with a handler."""

    def __init__(self, descriptor: TableDescriptor, handler: Handler, *,
                 database: Database = None, pool: Any = None, group: str | None = None,
                 name: str | None = None, workers: int | None = None, batch: int | None = None,
                 lease: int | None = None, poll_interval: float | None = None,
                 max_attempts: int | None = UNSET, backoff: Backoff | None = None,
                 transactional: bool = False, listen: bool | None = None,
                 clock: Clock | None = None, shutdown_timeout: float = 30.0,
                 connect_timeout: float = 30.0, observers: Sequence[Observer] = ()) -> None:
        d = self.descriptor = descriptor
        s = settings_for(d, group=group, name=name, workers=workers, batch=batch, lease=lease,
                         poll_interval=poll_interval, max_attempts=max_attempts,
                         backoff=backoff, transactional=transactional)
        self.name = s.name
        self._where = {"worker": s.name, "table": d.qualified_name}
        kind = BACKENDS.get(d.dialect)
        if kind is None:
            raise WorkerConfigError(f"no runtime for dialect {d.dialect}", **self._where)
        if pool is not None and not kind.takes_pool:
            raise WorkerConfigError("pool= is for PostgreSQL (psycopg_pool); a SQLite or MySQL "
                                    "worker keeps connections of its own", **self._where)
        if pool is not None:
            s = fit_to_pool(s, pool, d.qualified_name)
        self.settings = s
        # The settings, as the worker was built with them.
        self.group, self.workers, self.batch, self.lease = s.group, s.workers, s.batch, s.lease
        self.poll_interval, self.max_attempts = s.poll_interval, s.max_attempts
        self.backoff, self.transactional = s.backoff, s.transactional
        self.handler = handler
        self.shutdown_timeout = shutdown_timeout
        self.connect_timeout = connect_timeout  # how long start() waits for the database
        self.stats = Stats()
        try:
            self.backend: Backend = kind.for_worker(d, database, pool, s.workers,
                                                    transactional=transactional)
        except ValueError as err:  # NoDatabase, or a malformed address (never quoted)
            raise WorkerConfigError(str(err), **self._where) from None
        # Due times and leases by the database's clock where it has one (clocksync.py).
        self.clock: Clock = clock_for(clock, self.backend)
        self._clock_sync = ClockSync(self.clock, self.backend, s.name, s.lease)
        self.listen = kind.listens_by_default if listen is None else listen and kind.can_listen
        self.slots = WorkerSlots(self.clock, s.workers)
        self._hurry = asyncio.Event()  # a second signal: stop without waiting for jobs
        self._tasks: list[asyncio.Task[None]] = []
        self._listener: asyncio.Task[None] | None = None
        # Whether the connections keep one server session (False behind a transaction pooler,
        # where LISTEN cannot work); known once started.
        self.one_session: bool | None = None
        self.calls = Calls(d, self.backend)
        # [flow] pauses: `await worker.pauses.pause()`, resume(), paused().
        self.pauses = Pauses(d, self.calls, self.backend, self._where,
                             lambda: self.prepared or self.started, self.wake)
        self.outage = Outage(s.name, self.clock, self.backend, self.stats)
        self.runner = HandlerRunner(
            handler, workers=s.workers, name=s.name, abandon=self.backend.abandon,
            watch_tasks=bool(getattr(self.clock, "watches_handler_tasks", False)))
        # None without observers: then the worker makes no observer calls at all.
        self.observation = Observation(
            QueueInfo(s.name, d.qualified_name, s.group, d.dialect), observers) \
            if observers else None
        self.form = form_for(Parts(
            descriptor=d, settings=s, clock=self.clock, backend=self.backend, calls=self.calls,
            stats=self.stats, outage=self.outage, presence=Presence(d, self.backend),
            runner=self.runner, slots=self.slots, observation=self.observation))
        self.prepared = False  # checked and connected, not claiming yet (prepare())
        self.started = False

    # -- running --------------------------------------------------------------------------

    def run(self) -> None:
        """Serve until SIGINT or SIGTERM, then shut down gracefully; a second signal stops at
        once."""
        run_with_signals(self.serve, self._signalled)

    def _signalled(self, sig: signal.Signals) -> None:
        again = self.slots.stopping
        say_signalled(log, self.name, sig, again=again,
                      in_work=self.in_flight if self.started else 0,
                      timeout=self.shutdown_timeout, unfinished=self.form.unfinished)
        (self.hurry if again else self.stop)()

    async def serve(self) -> None:
        """Start, serve until `stop()`, then shut down."""
        await self.start()
        if not self.started:  # stopped while it waited for the database
            self.slots.reset()
            return
        try:
            await self.slots.until_stopped()
        finally:
            await self.shutdown()

    async def start(self) -> None:
        """Connect (waiting up to connect_timeout for a database that is not there yet),
        prepare every statement, start the worker slots. Returns without starting when the
        worker is stopped meanwhile."""
        if await self.prepare():
            self.begin()

    async def prepare(self, *, warned: set[str] | None = None) -> bool:
        """What a start checks before the first claim: reach the database, open the
        connections, check the server, prepare every statement. True when all passed
        (`begin()` then claims, or `unprepare()` closes); False when the worker was stopped
        meanwhile. False or raising, it leaves nothing open. `warned`: the databases whose
        wait was told already (a service's queues tell it once per database)."""
        pool = self.backend.own_pool_name
        if pool is not None:  # its warnings are folded into the worker's outage lines
            fold_pool_warnings(pool, self.outage)
        try:
            self.prepared = await self._prepare(warned)
        finally:
            if not self.prepared and pool is not None:
                unfold_pool_warnings(pool)
        return self.prepared

    async def _prepare(self, warned: set[str] | None) -> bool:
        self.form.claim_resources()
        connected = checked = False
        try:
            connected = await connect(
                self.backend, keep=self.form.connections, timeout=self.connect_timeout,
                stopping=self.slots.stopping_event, where=self._where, warned=warned)
            if connected:
                await self._check()
                checked = True
        finally:
            if not checked:
                if connected:
                    await self.backend.close()
                self.form.release_resources()
        return checked

    def begin(self) -> None:
        """Claim, once `prepare()` passed: the slots, the form's tasks, the listener, the
        clock's readings and the wake-ups on this process's commits."""
        self.form.start()
        self.runner.start()
        listening = self.backend.listener(self.wakes()) if self.listen else None
        if listening is not None:
            self._listener = asyncio.create_task(listening, name=f"{self.name}:listen")
        self._tasks = [asyncio.create_task(self._slot(i), name=f"{self.name}:{i}")
                       for i in range(self.workers)]
        self._clock_sync.start()
        if not self.backend.enqueues_notify:
            self.slots.wake_on_commits(self.descriptor.table)
        self.prepared, self.started = False, True
        self.outage.serving = True
        if self.observation is not None:
            self.observation.serving(lambda: self.slots.in_work)
        log.info("%s: serving %s (%s%s) on %s, %d worker(s), batch %d", self.name,
                 self.descriptor.qualified_name, self.descriptor.form,
                 ", FIFO" if self.descriptor.fifo else "", self.backend.driver, self.workers,
                 self.batch)

    async def unprepare(self) -> None:
        """Close what `prepare()` opened, for a start that goes no further (a service whose
        other queue cannot start)."""
        if self.prepared:
            self.prepared = False
            await self.backend.close()
            self.form.release_resources()
            if self.backend.own_pool_name is not None:
                unfold_pool_warnings(self.backend.own_pool_name)

    def wakes(self) -> Wakes:
        """What a listener (the worker's, or a service's shared one) wakes as rows arrive."""
        return self.slots.wakes(self.name, self.group, self.outage.lost_connection)

    async def _check(self) -> None:
        """What the server offers, and every statement prepared against the live tables."""
        async with self.backend.connection() as conn:
            offers = await self.backend.check_server(conn, self._where)
            self.one_session = offers.one_session
            self.form.offered(offers)
            if offers.engine is not None:
                self.listen = offers.engine.check(self.descriptor.form, self.backend.label,
                                                  self._where, self.listen, self.name,
                                                  counted=self.descriptor.count_crashes)
            await self._clock_sync.measure(conn)
            if not offers.one_session:
                if self.form.needs_one_session:
                    raise WorkerConfigError(behind_a_pooler(self.backend.label), **self._where)
                if self.listen:
                    log.warning("%s: behind a transaction pooler LISTEN cannot work: polling "
                                "every %g s instead", self.name, self.poll_interval)
                    self.listen = False
            await explain_all(self.backend, conn, self.descriptor.statements, self._where)

    def stop(self) -> None:
        """Stop claiming; `serve()` then lets jobs in work finish and returns."""
        self.slots.stop()

    def hurry(self) -> None:
        """Stop without waiting for the jobs in work: they are cancelled, and their rows left
        as the form's rule says (a second signal does this). A connection that the
        cancellation closes is no outage: its failures are DEBUG lines from now on."""
        self.slots.stop()
        self.outage.hurried = True
        self._hurry.set()

    def wake(self) -> None:
        """Claim now instead of waiting out the poll interval (every waiting slot); call it on
        the worker's event loop."""
        self.slots.wake()

    def wake_one(self) -> None:
        """One job may be ready: wake one waiting slot (or the next one to wait)."""
        self.slots.wake_one()

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
                            self.name, self.in_flight, self.shutdown_timeout,
                            self.form.unfinished)
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
        await self.form.stop()
        await self._clock_sync.stop()
        await cancel_and_wait(self._listener)
        self.form.release_resources()
        self.runner.stop()
        await self.backend.close()
        if self.backend.own_pool_name is not None:
            unfold_pool_warnings(self.backend.own_pool_name)
        self._tasks = []
        self._listener = None
        if self.observation is not None:
            self.observation.stopped()
        # Ready to start again (a worker can serve, stop, and serve once more).
        self.started = False
        self.slots.reset()
        self._hurry = asyncio.Event()
        self.outage.at_stop()
        log.info("%s: stopped: %s", self.name,
                 self.stats.summary(lease=self.descriptor.form == "lease"))

    # -- what tests and the command line read ---------------------------------------------

    @property
    def listener_pid(self) -> int | None:
        """The listening session's process id, where there is one."""
        return self.slots.listener_pid

    @property
    def abandoned_threads(self) -> int:
        """Plain handlers a shutdown stopped waiting for, still running in their threads (the
        process cannot exit normally until they end)."""
        return self.runner.abandoned

    @property
    def handler_threads(self) -> int:
        return self.runner.threads

    @property
    def handler_tasks(self) -> set[asyncio.Future[Any]]:
        return self.runner.tasks

    @property
    def in_flight(self) -> int:
        """Jobs claimed and not yet settled."""
        return self.slots.in_work

    @property
    def quiet(self) -> bool:
        """No job in work, no claim or statement under way, every slot waiting for work."""
        waiting = self.slots.waiting
        return (self.slots.in_work == 0 and self.backend.busy == 0
                and waiting.issuperset(range(len(self._tasks)))
                and waiting.issuperset(self.form.waiters))

    # -- the slot loop --------------------------------------------------------------------

    async def _slot(self, index: int) -> None:
        failures = 0  # this slot's rounds failed in a row

        def worked() -> None:
            nonlocal failures
            failures = 0
            self.form.claim_worked()

        while not self.slots.stopping:
            try:
                await self.form.serve(index, worked)
            except asyncio.CancelledError:
                raise
            except Exception as err:
                failures += 1
                self.form.claim_failed(err)
                await self.slots.wait(index, retry_delay(failures))
