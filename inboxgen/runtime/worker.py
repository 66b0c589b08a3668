"""The worker: its lifecycle (start, serve, shutdown), signals, and the slot loop.

One asyncio task per worker slot. The claim form (forms/) says how a slot claims and works a
round; each delivery runs through the form's Delivery (delivery.py), which follows the rules of
outcomes.py. The forms wait on and wake through the worker's slots (slots.py), which also count
the rows in work. Shutdown stops claiming, lets jobs in work finish within a timeout, then leaves
unfinished rows as the form's rule says.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
from collections.abc import Callable, Sequence
from typing import Any

from inboxgen import connections
from inboxgen.descriptor import TableDescriptor
from inboxgen.errors import SchemaError, WorkerConfigError
from inboxgen.runtime.backends import BACKENDS, Backend
from inboxgen.runtime.backends.base import Database, Wakes
from inboxgen.runtime.batching import Calls
from inboxgen.runtime.clock import Clock, DatabaseClock, SystemClock
from inboxgen.runtime.clocksync import ClockSync
from inboxgen.runtime.connecting import open_connections, reach, retry_delay
from inboxgen.runtime.forms import Parts, form_for
from inboxgen.runtime.handlers import HandlerRunner
from inboxgen.runtime.jobs import Handler, Job, Stats
from inboxgen.runtime.observe import Observation, Observer, QueueInfo
from inboxgen.runtime.outage import Outage, fold_pool_warnings, unfold_pool_warnings
from inboxgen.runtime.outcomes import Backoff
from inboxgen.runtime.presence import Presence
from inboxgen.runtime.settings import UNSET, fit_to_pool, settings_for
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
        # Due times and leases by the database's clock where it has one (clocksync.py); a
        # clock the caller gives (a test's) is taken as it is.
        self.clock: Clock = clock or (DatabaseClock() if self.backend.server_clock
                                      else SystemClock())
        self._clock_sync = ClockSync(self.clock, self.backend, s.name, s.lease) \
            if isinstance(self.clock, DatabaseClock) else None
        self.listen = kind.listens_by_default if listen is None else listen and kind.can_listen
        self.slots = WorkerSlots(self.clock, s.workers)
        self._hurry = asyncio.Event()  # a second signal: stop without waiting for jobs
        self._tasks: list[asyncio.Task[None]] = []
        self._listener: asyncio.Task[None] | None = None
        self.listener_pid: int | None = None  # the listening session, where there is one
        # Whether the connections keep one server session (False behind a transaction pooler,
        # where LISTEN cannot work); known once started.
        self.one_session: bool | None = None
        self.calls = Calls(d, self.backend)
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
        self._forget_wake: Callable[[], None] | None = None
        self.started = False

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
        if not self.slots.stopping:
            if self.started and self.in_flight:
                log.warning("%s: %s: stopping; waiting up to %g s for %d job(s) in work "
                            "(again to stop at once)", self.name, sig.name,
                            self.shutdown_timeout, self.in_flight)
            else:
                log.info("%s: %s: stopping", self.name, sig.name)
            self.stop()
            return
        log.warning("%s: %s again: stopping at once (%s)", self.name, sig.name,
                    self.form.unfinished)
        self.hurry()

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
        form, backend, stopping = self.form, self.backend, self.slots.stopping_event
        form.claim_resources()
        try:
            if not await reach(backend, timeout=self.connect_timeout, stopping=stopping,
                               where=self._where):
                form.release_resources()
                return
            if not await open_connections(backend, keep=form.connections, stopping=stopping,
                                          where=self._where):
                await backend.close()
                form.release_resources()
                return
        except BaseException:
            form.release_resources()
            raise
        try:
            await self._prepare()
        except BaseException:
            await backend.close()
            form.release_resources()
            raise
        form.start()
        self.runner.start()
        listening = backend.listener(self.wakes()) if self.listen else None
        if listening is not None:
            self._listener = asyncio.create_task(listening, name=f"{self.name}:listen")
        self._tasks = [asyncio.create_task(self._slot(i), name=f"{self.name}:{i}")
                       for i in range(self.workers)]
        if self._clock_sync is not None:
            self._clock_sync.start()
        if not self.backend.enqueues_notify:
            # Enqueues of this process through SQLAlchemy or Django wake a slot once they
            # commit (inboxgen.connections): the wake-up crosses from the committing thread.
            loop = asyncio.get_running_loop()
            self._forget_wake = connections.wake_on_commit(
                self.descriptor.table, functools.partial(_wake_from, loop, self.slots.wake_one))
        self.started = True
        if self.observation is not None:
            self.observation.serving(lambda: self.slots.in_work)
        log.info("%s: serving %s (%s%s) on %s, %d worker(s), batch %d", self.name,
                 self.descriptor.qualified_name, self.descriptor.form,
                 ", FIFO" if self.descriptor.fifo else "", backend.driver, self.workers,
                 self.batch)

    def wakes(self) -> Wakes:
        """What a listener wakes as this worker's rows arrive (a service's shared listener
        takes it too)."""
        return Wakes(self.name, self.group, self.slots.wake, self.slots.wake_one,
                     self.slots.wake_waiting_slot, self.outage.lost_connection,
                     self._listening_on)

    def _listening_on(self, pid: int) -> None:
        self.listener_pid = pid

    async def _prepare(self) -> None:
        """What the server offers, and every statement prepared against the live tables."""
        d = self.descriptor
        async with self.backend.connection() as conn:
            offers = await self.backend.check_server(conn, self._where)
            self.one_session = offers.one_session
            if self._clock_sync is not None:
                await self._clock_sync.measure(conn)
            if not offers.one_session:
                if self.form.needs_one_session:
                    raise WorkerConfigError(
                        "the connection is behind a transaction pooler (each transaction ran "
                        "on another server session), where advisory locks do not hold: "
                        "connect directly or use session pooling", **self._where)
                if self.listen:
                    log.warning("%s: behind a transaction pooler LISTEN cannot work: polling "
                                "every %g s instead", self.name, self.poll_interval)
                    self.listen = False
            for name in d.statements:
                try:
                    await self.backend.explain(conn, name)
                except Exception as err:  # the driver's error names what is missing
                    detail = str(err).splitlines()[0] if str(err) else type(err).__name__
                    raise SchemaError(f"statement does not prepare against the database: "
                                      f"{detail}", statement=name, **self._where) from err

    def stop(self) -> None:
        """Stop claiming; `serve()` then lets jobs in work finish and returns."""
        self.slots.stop()

    def hurry(self) -> None:
        """Stop without waiting for the jobs in work: they are cancelled, and their rows left
        as the form's rule says (a second signal does this)."""
        self.slots.stop()
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
        if self._clock_sync is not None:
            await self._clock_sync.stop()
        await cancel_and_wait(self._listener)
        self.form.release_resources()
        self.runner.stop()
        await self.backend.close()
        if self.backend.own_pool_name is not None:
            unfold_pool_warnings(self.backend.own_pool_name)
        self._tasks = []
        self._listener = None
        if self._forget_wake is not None:
            self._forget_wake()
            self._forget_wake = None
        if self.observation is not None:
            self.observation.stopped()
        # Ready to start again (a worker can serve, stop, and serve once more).
        self.started = False
        self.slots.reset()
        self._hurry = asyncio.Event()
        self.outage.at_stop()
        st = self.stats
        extra = f", {st.renewed} lease renewal(s)" if self.descriptor.form == "lease" else ""
        if st.lease_lost:
            extra += f", {st.lease_lost} lease(s) lost"
        if st.deleted:
            extra += f", {st.deleted} row(s) deleted while in work"
        log.info("%s: stopped: %d delivered, %d acked, %d dropped, %d retried, %d dead-lettered"
                 "%s", self.name, st.delivered, st.acked, st.dropped, st.retried,
                 st.dead_lettered, extra)

    # -- what tests and the command line read ---------------------------------------------

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


def _wake_from(loop: asyncio.AbstractEventLoop, wake: Callable[[], None]) -> None:
    """Run `wake` on `loop` from any thread; nothing once the loop has closed."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(wake)
