"""What the worker needs of a database driver: connections, transactions and calls of the
generated functions. The worker decides; a backend only executes, and tells what the server
offers (`ServerOffers`). It knows no worker: a listener gets the callbacks it wakes (`Wakes`).

Drivers without async support (sqlite3, PyMySQL) run their calls on threads of their own, one
per connection (`ThreadedBackend`).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as _dt
import functools
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import attrs

from inboxgen.descriptor import TableDescriptor
from inboxgen.runtime.engines import Engine

# What a Worker's database= may be: a URL, conninfo or file path, or driver arguments.
Database = str | Path | Mapping[str, Any] | None

# What `together` runs: a generated function with its keyword arguments, or BEGIN, COMMIT or
# COMMIT_BEGIN: a COMMIT and the BEGIN after it, one statement where the server chains
# transactions (PostgreSQL's COMMIT AND CHAIN), both elsewhere; or GENERIC_PLANS: for the rest
# of the transaction, prepared statements run their generic plan (PostgreSQL 12 and later:
# postgres.GENERIC_PLANS_SQL; nothing elsewhere).
BEGIN, COMMIT, COMMIT_BEGIN = "BEGIN", "COMMIT", "COMMIT AND CHAIN"
GENERIC_PLANS = "GENERIC PLANS"
Step = tuple[str, dict[str, Any]] | str


class NoDatabase(ValueError):
    """A Worker was built without the database= (or pool=) its backend needs."""


@attrs.frozen
class ServerOffers:
    """What `check_server` found beyond what every worker needs."""

    # A connection's transactions all run on one server session (not so behind a transaction
    # pooler): advisory locks and LISTEN need it.
    one_session: bool = True
    # The engine the server's answers show, and the forms it cannot hold (None: SQLite).
    engine: Engine | None = None
    # The queue table is partitioned (PostgreSQL): planning a claim against every partition
    # costs more than a round trip.
    partitioned: bool = False
    # The database has constraints checked at COMMIT (PostgreSQL's INITIALLY DEFERRED, as
    # Django declares foreign keys): a transactional row lock checks them before each job's
    # writes join its batch's transaction.
    deferred_constraints: bool = False


@attrs.frozen
class Wakes:
    """What a listener wakes as rows arrive, and where it reports."""

    name: str  # the worker's, for log lines
    group: str | None  # the group whose rows wake it (None: every row)
    wake_all: Callable[[], None]  # every waiting slot (after a lost notification)
    wake_one: Callable[[], None]  # one slot per new row
    wake_waiting: Callable[[], bool]  # a waiting slot, if one waits
    lost_connection: Callable[[BaseException, str], bool]  # the worker's outage
    listening_on: Callable[[int], None]  # the listening session's process id


class StepFailed(Exception):
    """A step of `together` failed after `done` steps had run (the driver's error is the
    cause)."""

    def __init__(self, done: int, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.done = done
        self.cause = cause


class Busy:
    """`with backend.busy_call:` around each driver call: `backend.busy` counts the calls in
    flight, so a test on a fake clock can tell when all is quiet. One instance per backend,
    reused (no allocation per call)."""

    __slots__ = ("_backend",)

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    def __enter__(self) -> None:
        self._backend.busy += 1

    def __exit__(self, *exc: object) -> None:
        self._backend.busy -= 1


class Backend:
    """One database as the worker sees it."""

    dialect = ""
    driver = ""  # the driver's name, as the worker's start-up line gives it
    # Whether a round of a row-lock slot (its settlements, COMMIT, BEGIN and the next claim) can
    # go to the database as one (`together` on a `session()` in `pipeline()` mode).
    rounds_together = False
    # Whether `session()` is in autocommit, each statement a transaction of its own unless a
    # BEGIN step opens one (PostgreSQL's; MySQL's sessions open one with their first statement).
    autocommit_sessions = False
    # Whether a write transaction holds the whole database (SQLite's one writer per file).
    single_writer = False
    # Whether a worker can take a connection pool of the caller's (pool=).
    takes_pool = False
    # Whether a worker watches for new rows (`listener`) when not told (listen=None), and
    # whether it can at all.
    listens_by_default = False
    can_listen = False
    # Whether an enqueue wakes workers through the database (NOTIFY); where not, a worker asks
    # this process's enqueues to wake it once they commit (inboxgen.connections).
    enqueues_notify = False
    # Whether the server has a clock of its own to judge due times and leases by
    # (`server_now`): not SQLite's, whose clock is the process's.
    server_clock = False

    def __init__(self, descriptor: TableDescriptor) -> None:
        self.descriptor = descriptor
        self.label = "the database"  # how messages name it (never with a password)
        # The name of the pool the backend opens itself, where it logs through "psycopg.pool".
        self.own_pool_name: str | None = None
        self.busy = 0  # calls in flight, so tests on a fake clock can tell when all is quiet
        self.busy_call = Busy(self)

    @classmethod
    def for_worker(cls, descriptor: TableDescriptor, database: Database, pool: Any,
                   size: int, *, transactional: bool = False) -> Backend:
        """The backend of a Worker built with `database=` (and `pool=`) and `size` slots, whose
        handlers write on the job's connection when `transactional`. Raises NoDatabase when
        what it needs is missing, ValueError when the address is malformed or names a driver
        that cannot serve the worker (a message that never quotes the address)."""
        raise NotImplementedError

    def listener(self, wakes: Wakes) -> Coroutine[Any, Any, None] | None:
        """The task that wakes a worker's slots as rows arrive (listen=True), where the
        database can tell."""
        return None

    async def check_server(self, conn: Any, where: Mapping[str, str]) -> ServerOffers:
        """At start-up, on `conn`: what the server must offer every worker (raises
        WorkerConfigError naming `where`), and what else it offers."""
        return ServerOffers()

    async def server_now(self, conn: Any) -> _dt.datetime | None:
        """The server's clock now, timezone-aware, read in one round trip (the caller ends the
        transaction it may open); None where the database is this process's (SQLite)."""
        return None

    async def probe(self) -> None:
        """Open one connection as the worker's own are opened, and close it: raises the
        driver's error when the database cannot be reached."""
        raise NotImplementedError

    def permanent(self, err: Exception) -> bool:
        """Whether a failed `probe` is for good (credentials, an unknown database), so that no
        retry can help."""
        return False

    def rolled_back(self, err: Exception) -> bool:
        """Whether `err` rolled back the whole transaction for a reason of the moment (a
        deadlock the server broke), so that an `alone` transaction can run again as it was."""
        return False

    def race_lost(self, err: BaseException) -> bool:
        """Whether `err`, or the driver's error behind it (a step of `together` that failed),
        is one `rolled_back` says: a race lost, not an outage."""
        return any(isinstance(e, Exception) and self.rolled_back(e)
                   for e in (err, err.__cause__))

    def disconnected(self, err: Exception, conn: Any = None) -> bool:
        """Whether `err` is the connection's (lost, or the database out of reach), not the
        statement's; with `conn`, the connection it came from, which must be dead too."""
        return False

    def unreachable(self, err: Exception) -> bool:
        """Whether `err` (one `disconnected` says is the connection's) is a connection attempt
        that failed: the database is out of reach, not one connection lost."""
        return False

    async def open(self, keep: int = 1) -> None:
        """Connect; `keep` is how many connections the worker keeps busy at once."""
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    def connection(self) -> contextlib.AbstractAsyncContextManager[Any]:
        raise NotImplementedError

    async def call(self, conn: Any, op: str, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    # Whether a step's error surfaces at that step (StepFailed says how many ran): not so in
    # psycopg's pipeline mode, where it surfaces at the next fetch.
    steps_fail_in_place = True

    async def together(self, conn: Any, steps: list[Step]) -> list[Any]:
        """Run `steps` in order on `conn`; returns the results of the calls among them. Where
        the driver allows, they travel together: in psycopg's pipeline mode queued until a
        fetch (or `sync`), on a threaded driver one call on the connection's thread. May raise
        StepFailed, saying how many steps ran (where `steps_fail_in_place`)."""
        results = []
        for done, step in enumerate(steps):
            try:
                if step == BEGIN:
                    await self.begin_step(conn)
                elif step == COMMIT:
                    await self.commit_step(conn)
                elif step == COMMIT_BEGIN:
                    await self.commit_begin_step(conn)
                elif step == GENERIC_PLANS:
                    await self.generic_plans_step(conn)
                elif not isinstance(step, str):
                    op, args = step
                    results.append(await self.call(conn, op, **args))
            except Exception as err:
                if not self.steps_fail_in_place:
                    raise
                raise StepFailed(done, err) from err
        return results

    async def transaction_together(self, conn: Any, steps: list[Step], *,
                                   generic_plans: bool = False, before: Step | None = None,
                                   after: Step | None = None) -> list[Any]:
        """`steps` in a transaction of their own on `conn`, sent together (PostgreSQL: in one
        pipeline), with `before` and `after` (calls) outside it (MySQL's claim turn);
        returns the results of the calls among `steps`. With `generic_plans` the
        transaction's statements run their generic plans. A step that fails raises the
        driver's own error, after `after` is sent alone (the turn given up, whatever became
        of the transaction)."""
        body = [BEGIN, GENERIC_PLANS, *steps, COMMIT] if generic_plans else [BEGIN, *steps, COMMIT]
        first = [before] if before is not None else []
        last = [after] if after is not None else []
        async with self.pipeline(conn):
            try:
                results = await self.together(conn, [*first, *body, *last])
                return results[len(first):len(results) - len(last)]
            except StepFailed as err:
                if after is not None:
                    with contextlib.suppress(Exception):
                        await self.together(conn, [after])
                raise err.cause from None

    async def begin_step(self, conn: Any) -> None:
        """BEGIN as a step of `together`."""
        await self.begin(conn)

    async def commit_step(self, conn: Any) -> None:
        """COMMIT as a step of `together`."""
        await self.commit(conn)

    async def commit_begin_step(self, conn: Any) -> None:
        """COMMIT_BEGIN as a step of `together`."""
        await self.commit_step(conn)
        await self.begin_step(conn)

    async def generic_plans_step(self, conn: Any) -> None:
        """GENERIC_PLANS as a step of `together`: nothing but on PostgreSQL."""

    def session(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """A connection held across transactions, with explicit BEGIN/COMMIT (`rounds_together`)."""
        raise NotImplementedError

    def pipeline(self, conn: Any) -> contextlib.AbstractAsyncContextManager[Any]:
        """Pipeline mode on `conn` (`rounds_together`): statements are sent without waiting for
        results; fetching a statement's rows sends what is queued and waits for it."""
        raise NotImplementedError

    async def sync(self, pipeline: Any) -> None:
        """Send what `pipeline` holds and wait until the server has run all of it."""
        raise NotImplementedError

    async def alone(self, steps: list[Step]) -> list[Any]:
        """Run and commit calls each of which stands alone (a lease's claim, a flush of lease
        settlements: a token that misses its row changes nothing), with their results: on
        PostgreSQL each an autocommit statement, on a threaded driver one transaction sent in
        one call."""
        raise NotImplementedError

    async def alone_planned_once(self, step: Step) -> Any:
        """A call standing alone (`alone`) that runs its generic plan where the server plans
        prepared statements once (PostgreSQL 12 and later); returns its result."""
        (result,) = await self.alone([step])
        return result

    async def planned_once(self, conn: Any, step: Step) -> Any:
        """A call standing alone on `conn`'s session (an autocommit statement on PostgreSQL, a
        transaction of its own elsewhere) that runs its generic plan where the server plans
        prepared statements once; returns its result."""
        (result,) = await self.transaction_together(conn, [step])
        return result

    async def begin(self, conn: Any, *, immediate: bool = True) -> None:
        raise NotImplementedError

    async def commit(self, conn: Any) -> None:
        raise NotImplementedError

    async def autocommit(self, conn: Any, on: bool) -> None:
        """Whether each statement on `conn` commits on its own (MySQL's autocommit; BEGIN then
        opens a transaction). Only a session whose statements need no transaction sets it, and
        sets it back before the connection returns to the pool."""
        raise NotImplementedError

    async def rollback(self, conn: Any) -> None:
        raise NotImplementedError

    async def execute(self, conn: Any, sql: str) -> None:
        raise NotImplementedError

    async def release_checked(self, conn: Any, savepoint: str) -> None:
        """Release `savepoint` once the constraints the open transaction defers to its COMMIT
        hold for what it wrote (PostgreSQL: checked now, and left deferred): where one does
        not, raises its error with the savepoint still there. Where no constraint is deferred
        (MySQL/MariaDB), releases it."""
        await self.execute(conn, f"RELEASE SAVEPOINT {savepoint}")

    async def query(self, conn: Any, sql: str, params: Mapping[str, Any] | None = None) -> Any:
        """The first row of `sql` (None when it has none), with `params` bound."""
        raise NotImplementedError

    async def explain(self, conn: Any, name: str) -> None:
        """Prepare a statement without running it; raises the driver's error when it fails."""
        raise NotImplementedError

    def _explain_args(self, name: str) -> tuple[str, dict[str, Any]]:
        # EXPLAIN plans the statement (so a missing table or column fails) without running it;
        # every placeholder is bound to NULL.
        params = self.descriptor.statement_params.get(name, ())
        bound: dict[str, Any] = dict.fromkeys(params)
        if "limit" in bound:
            bound["limit"] = 1  # MySQL takes no NULL in LIMIT
        return "EXPLAIN " + self.descriptor.statements[name], bound

    # Advisory locks: session locks on the server, through the generated LOCK and UNLOCK.

    def claim_advisory_file(self, owner: object) -> bool:
        """Whether `owner` may serve advisory rows of this database from this process."""
        return True

    def release_advisory(self, owner: object) -> None:
        """Forget what `owner` held of advisory locks kept outside the database."""

    async def lock_key(self, conn: Any, key: str, owner: object) -> bool:
        """Take the advisory lock on `key` for `conn`'s session, without waiting."""
        ok = bool(await self.call(conn, "lock", key=key))
        await self.commit(conn)
        return ok

    async def unlock_key(self, conn: Any, key: str, owner: object) -> None:
        with contextlib.suppress(Exception):  # a broken session has released it already
            await self.rollback(conn)
            await self.call(conn, "unlock", key=key)
            await self.commit(conn)

    # How many of a queue's seats a slot tries in one call of lock_keys: one round trip each
    # here, so one at a time (a seat taken beyond the first would cost another to give up).
    keys_together = 1

    async def lock_keys(self, conn: Any, keys: list[str]) -> list[bool]:
        """LOCK of each of `keys` on `conn`'s session, without waiting and without a COMMIT of
        its own (session locks outlive the transaction they are taken in): which it took."""
        return [bool(await self.call(conn, "lock", key=key)) for key in keys]

    async def unlock_keys(self, conn: Any, keys: list[str]) -> None:
        """UNLOCK of each of `keys` on `conn`'s session."""
        for key in keys:
            await self.call(conn, "unlock", key=key)

    async def end_session(self, conn: Any) -> None:
        """Close `conn` so that its server session ends, and the session locks held there
        with it (the pool opens another in its place)."""
        raise NotImplementedError

    def abandon(self, conn: Any, user: asyncio.Future[Any]) -> None:
        """A handler's thread still uses `conn` after its job was cancelled: leave the
        connection to it, and close it once that thread is done."""


class KeptConnections(Backend):
    """Connections the worker keeps itself, without a pool library: opened as tasks need them,
    each used by one task at a time, the idle ones kept until shutdown."""

    def __init__(self, descriptor: TableDescriptor) -> None:
        super().__init__(descriptor)
        self._idle: list[Any] = []

    async def _new(self) -> Any:
        """Open one connection."""
        raise NotImplementedError

    async def _give_back(self, conn: Any) -> None:
        """End what `conn` left open and keep it idle, or close it when it broke."""
        raise NotImplementedError

    async def open(self, keep: int = 1) -> None:
        self._idle.append(await self._new())  # the others open as slots need them

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[Any]:
        conn = self._idle.pop() if self._idle else await self._new()
        try:
            yield conn
        finally:
            # Shielded: what was not committed must not leak into the next borrower.
            try:
                await asyncio.shield(self._give_back(conn))
            except asyncio.CancelledError:
                pass

    # No pipeline mode: `together` runs a round's statements in turn (on a threaded driver in
    # one call on the connection's thread) and has run them all by the time it returns.

    def session(self) -> contextlib.AbstractAsyncContextManager[Any]:
        return self.connection()

    def pipeline(self, conn: Any) -> contextlib.AbstractAsyncContextManager[Any]:
        return contextlib.nullcontext()

    async def sync(self, pipeline: Any) -> None:
        pass

    async def alone(self, steps: list[Step]) -> list[Any]:
        # One transaction (one write turn on SQLite, one commit on MySQL).
        async with self.connection() as conn:
            return await self.transaction_together(conn, steps)


class ThreadedBackend(KeptConnections):
    """A driver without async support (sqlite3, PyMySQL): connections kept by the worker, each
    used by one task at a time and each with a thread of its own that runs every call on it.

    A thread per connection, not asyncio's shared executor: tasks waiting on a lock in their
    calls can never take the thread another connection needs to commit. A call that is
    cancelled is interrupted where the driver can, and its connection is handed back or closed
    only once the call has really ended.
    """

    def __init__(self, descriptor: TableDescriptor) -> None:
        super().__init__(descriptor)
        self._threads: dict[int, ThreadPoolExecutor] = {}  # id(connection) -> its thread
        self._conns: dict[int, Any] = {}
        self._abandoned: set[int] = set()  # left to a handler thread still using them

    def _connect(self) -> Any:
        raise NotImplementedError

    def _release(self, conn: Any) -> None:
        """Called on the connection's thread when a borrowed connection comes back: end its
        transaction."""
        conn.rollback()

    def _usable(self, conn: Any) -> bool:
        return True

    def _in_transaction(self, conn: Any) -> bool:
        """Whether `conn` may have a transaction open, read without a call on its thread: a
        connection that has none comes back without one."""
        return True

    def _interrupt(self, conn: Any) -> None:
        """Stop the statement running on `conn` (from another thread), where the driver can."""

    async def _on_thread(self, thread: ThreadPoolExecutor, conn: Any, fn: Any, *args: Any,
                         **kwargs: Any) -> Any:
        with self.busy_call:
            loop = asyncio.get_running_loop()
            future = loop.run_in_executor(thread, functools.partial(fn, *args, **kwargs))
            try:
                return await asyncio.shield(future)
            except asyncio.CancelledError:
                if conn is not None:
                    self._interrupt(conn)
                while not future.done():  # the thread goes on: wait until the call has ended
                    with contextlib.suppress(asyncio.CancelledError):
                        await asyncio.wait([future])
                if not future.cancelled():
                    future.exception()  # retrieved: the cancellation is what the caller sees
                raise

    async def _run(self, conn: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
        if id(conn) in self._abandoned:
            return None  # a handler's thread still uses it: the statement is not run
        return await self._on_thread(self._threads[id(conn)], conn, fn, *args, **kwargs)

    def abandon(self, conn: Any, user: asyncio.Future[Any]) -> None:
        if id(conn) not in self._conns:
            return
        self._abandoned.add(id(conn))
        thread = self._threads.pop(id(conn))
        del self._conns[id(conn)]

        def close(_: asyncio.Future[Any]) -> None:
            # On the connection's own thread, once the handler's thread let go of it; what
            # the handler left uncommitted is rolled back by the close.
            thread.submit(conn.close)
            thread.shutdown(wait=False)
            self._abandoned.discard(id(conn))

        user.add_done_callback(close)

    async def _new(self) -> Any:
        thread = ThreadPoolExecutor(max_workers=1,
                                    thread_name_prefix=f"inboxgen-{self.descriptor.table}")
        try:
            conn = await self._on_thread(thread, None, self._connect)
        except BaseException:
            thread.shutdown(wait=False)
            raise
        self._threads[id(conn)] = thread
        self._conns[id(conn)] = conn
        return conn

    async def _discard(self, conn: Any) -> None:
        thread = self._threads.pop(id(conn), None)
        self._conns.pop(id(conn), None)
        if thread is None:
            return
        with contextlib.suppress(Exception):
            await self._on_thread(thread, conn, conn.close)
        thread.shutdown(wait=False)

    async def probe(self) -> None:
        await self._discard(await self._new())

    async def close(self) -> None:
        self._idle.clear()
        for conn in list(self._conns.values()):
            await self._discard(conn)

    async def _give_back(self, conn: Any) -> None:
        if id(conn) not in self._conns:
            self._returned(conn)
            return  # closed by shutdown meanwhile, or left to a handler's thread
        if self._in_transaction(conn):
            with contextlib.suppress(Exception):
                await self._run(conn, self._release, conn)
        self._returned(conn)
        if self._usable(conn):
            self._idle.append(conn)
        else:
            await self._discard(conn)

    def _returned(self, conn: Any) -> None:
        """A connection came back (its transaction ended)."""

    async def call(self, conn: Any, op: str, *args: Any, **kwargs: Any) -> Any:
        fn = getattr(self.descriptor.ops, op)
        return await self._run(conn, fn, conn, *args, **kwargs)

    async def together(self, conn: Any, steps: list[Step]) -> list[Any]:
        # One call on the connection's thread for all of them, not one each.
        results: list[Any] = await self._run(conn, self._steps, conn, steps)
        return results

    def _steps(self, conn: Any, steps: list[Step]) -> list[Any]:
        """`together`, on the connection's thread."""
        results = []
        for done, step in enumerate(steps):
            try:
                if step == BEGIN:
                    self._begin_now(conn)
                elif step == COMMIT:
                    self._commit_now(conn)
                elif step == COMMIT_BEGIN:
                    self._commit_now(conn)
                    self._begin_now(conn)
                elif step == GENERIC_PLANS:
                    pass  # PostgreSQL's alone
                elif not isinstance(step, str):
                    op, args = step
                    results.append(getattr(self.descriptor.ops, op)(conn, **args))
            except Exception as err:
                raise StepFailed(done, err) from err
        return results

    def _begin_now(self, conn: Any) -> None:
        """BEGIN, on the connection's thread."""
        raise NotImplementedError

    def _commit_now(self, conn: Any) -> None:
        """COMMIT, on the connection's thread."""
        conn.commit()

