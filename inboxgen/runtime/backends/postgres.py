"""PostgreSQL (psycopg 3): async connections from a pool and the generated `_async` functions."""

from __future__ import annotations

import contextlib
import datetime as _dt
import itertools
import json
import logging
from collections.abc import AsyncIterator, Coroutine, Mapping
from typing import Any

import msgspec

from inboxgen.descriptor import Operations, TableDescriptor
from inboxgen.runtime.backends.base import (
    Backend,
    Database,
    NoDatabase,
    ServerOffers,
    Step,
    Wakes,
)
from inboxgen.runtime.backends.pgconninfo import label_of, pg_params
from inboxgen.runtime.backends.pgconninfo import pg_label as pg_label  # the operations' import
from inboxgen.runtime.engines import (
    POSTGRES_STATE,
    POSTGRES_VERSION,
    Engine,
    asks_state,
    postgres_engine,
)

log = logging.getLogger("inboxgen.worker")


# GENERIC_PLANS, for the rest of the transaction. A generic plan's costs assume a LIMIT of a
# tenth of the rows: on a large table they pass jit_above_cost, and JIT compilation at every
# call then costs a claim of a few rows 36 ms (5,000,000 rows). The claim is an index walk that
# JIT cannot speed up, so JIT is off with it.
GENERIC_PLANS_SQL = ("SELECT set_config('plan_cache_mode', 'force_generic_plan', true), "
                     "set_config('jit', 'off', true)")


class _PlannedOnce:
    """A connection whose execute() sends GENERIC_PLANS_SQL and the statement in one pipeline,
    and returns once the pipeline's Sync has come back: the two share the implicit transaction
    the Sync ends (and with it the setting), and the statement's rows wait in its cursor. One
    round trip, as an autocommit statement alone; a transaction of its own (BEGIN, the
    setting, the statement, COMMIT) took two, its rows fetched before the COMMIT was sent."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self._sent = False

    async def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        # One statement: a second would run in a transaction of its own.
        assert not self._sent, "planned_once takes a call of one statement"
        self._sent = True
        conn = self._conn
        async with conn.pipeline():
            await conn.execute(GENERIC_PLANS_SQL)
            return await conn.execute(query, params, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class PostgresBackend(Backend):
    """psycopg async connections from a pool that always keeps one connection spare."""

    dialect = "postgres"
    driver = "psycopg"
    rounds_together = True
    autocommit_sessions = True  # session(): autocommit, with explicit BEGIN/COMMIT steps
    takes_pool = True
    listens_by_default = can_listen = enqueues_notify = True  # LISTEN/NOTIFY
    server_clock = True

    def __init__(self, descriptor: TableDescriptor, conninfo: str | None, *,
                 pool: Any = None, size: int = 1) -> None:
        super().__init__(descriptor)
        import psycopg_pool  # noqa: F401  (a missing pool fails when the worker is built)

        self.own_pool = pool is None
        if self.own_pool:  # unique in the process: the worker tells its pool's records by it
            self.own_pool_name = f"inboxgen-{descriptor.table}-{next(_POOLS)}"
        self.conninfo = conninfo if conninfo is not None else str(getattr(pool, "conninfo", ""))
        # The listening connection is opened like the pool's own (a password may live here).
        self.connect_kwargs: dict[str, Any] = {
            k: v for k, v in dict(getattr(pool, "kwargs", None) or {}).items()
            if k != "autocommit"}
        # Raises when malformed, or when a parameter has a value the driver refuses.
        params = pg_params(self.conninfo, self.connect_kwargs)
        self.label = label_of(params)
        # The probe waits as the pool's connections will, 10 s where the conninfo says nothing.
        self.probe_kwargs = dict(self.connect_kwargs)
        if "connect_timeout" not in params:
            self.probe_kwargs["connect_timeout"] = 10
        self.size = size
        self.pool: Any = pool or self._own_pool(1)
        assert descriptor.async_ops is not None
        self.ops: Operations = descriptor.async_ops

    @classmethod
    def for_worker(cls, descriptor: TableDescriptor, database: Database, pool: Any,
                   size: int, *, transactional: bool = False) -> Backend:
        if database is None and pool is None:
            raise NoDatabase("a PostgreSQL worker needs database=<conninfo or URL> or "
                             "pool=<psycopg_pool.AsyncConnectionPool>")
        return cls(descriptor, str(database) if database else None, pool=pool, size=size)

    def listener(self, wakes: Wakes) -> Coroutine[Any, Any, None]:
        from inboxgen.runtime.listener import listen

        return listen(self.conninfo, self.connect_kwargs, [(self.descriptor.table, wakes)])

    async def check_server(self, conn: Any, where: Mapping[str, str]) -> ServerOffers:
        """Advisory locks and LISTEN live on a server session. Behind a transaction pooler
        (PgBouncer's pool_mode=transaction) two transactions of one client connection may run
        on different server sessions: the worker then refuses the advisory form and polls
        instead of listening."""
        pids = set()
        for _ in range(3):
            cur = await conn.execute("SELECT pg_backend_pid()")
            pids.add((await cur.fetchone())[0])
            await conn.commit()
        return ServerOffers(one_session=len(pids) == 1, engine=await self._engine(conn),
                            partitioned=await self._partitioned(conn),
                            deferred_constraints=await self._defers_constraints(conn))

    async def _defers_constraints(self, conn: Any) -> bool:
        """Whether any constraint of the database is checked at COMMIT by default."""
        row = await self.query(conn, "SELECT EXISTS (SELECT FROM pg_constraint "
                                     "WHERE condeferred)")
        await conn.commit()
        return bool(row and row[0])

    async def _partitioned(self, conn: Any) -> bool:
        """Whether the queue table (as the search path finds it) is partitioned."""
        from psycopg import sql

        d = self.descriptor
        name = sql.Identifier(*filter(None, (d.schema, d.table))).as_string(conn)
        row = await self.query(conn, "SELECT relkind = 'p' FROM pg_class "
                                     "WHERE oid = to_regclass(%(name)s)", {"name": name})
        await conn.commit()
        return bool(row and row[0])

    async def _engine(self, conn: Any) -> Engine:
        """The engine behind the protocol: PostgreSQL (a primary or not), or one that answers
        as it (engines.py)."""
        (version,) = await self.query(conn, POSTGRES_VERSION)
        state = await self.query(conn, POSTGRES_STATE) if asks_state(version) else None
        await conn.commit()
        return postgres_engine(str(version), state)

    async def server_now(self, conn: Any) -> _dt.datetime | None:
        (now,) = await self.query(conn, "SELECT clock_timestamp()")
        return now  # type: ignore[no-any-return]

    async def probe(self) -> None:
        import psycopg

        conn = await psycopg.AsyncConnection.connect(self.conninfo, **self.probe_kwargs)
        await conn.close()

    def permanent(self, err: Exception) -> bool:
        # The server's refusals (authentication, an unknown role or database), what the client
        # asked for and the server cannot give (SSL, an authentication method), an address no
        # resolver knows: no retry changes them. Refused or timed-out connections may.
        import psycopg

        if not isinstance(err, (psycopg.OperationalError, OSError)):
            return True  # psycopg refused the arguments themselves
        if getattr(err, "sqlstate", None) in _REFUSED:
            return True
        text = str(err).lower()
        return any(p in text for p in _REFUSED_TEXT)

    def disconnected(self, err: Exception, conn: Any = None) -> bool:
        import psycopg
        from psycopg_pool import PoolTimeout

        if isinstance(err, PoolTimeout):
            return True  # no connection came: the pool cannot reach the server
        if not isinstance(err, psycopg.OperationalError):
            return False
        # Client-side (no SQLSTATE: the connection lost or refused), the connection class
        # (08), the server shutting down or starting (57P01-57P03), too many connections.
        state = err.sqlstate
        if not (state is None or state.startswith("08") or state in _GONE):
            return False  # a statement's trouble: a lock or statement timeout, a full disk
        return conn is None or bool(conn.closed or getattr(conn, "broken", False))

    def unreachable(self, err: Exception) -> bool:
        from psycopg_pool import PoolTimeout

        if isinstance(err, PoolTimeout) or getattr(err, "sqlstate", None) == "57P03":
            return True  # no connection came, or the server refuses them (starting, stopping)
        return str(err).startswith(("connection failed", "connection is bad",
                                    "connection timeout expired"))

    def _own_pool(self, keep: int) -> Any:
        from psycopg_pool import AsyncConnectionPool

        return AsyncConnectionPool(self.conninfo, min_size=min(keep, self.size + 1),
                                   max_size=self.size + 1, open=False,
                                   name=self.own_pool_name, configure=_read_json_quickly)

    async def open(self, keep: int = 1) -> None:
        if self.own_pool:
            # The connections the worker keeps busy are opened now, together: a pool that
            # grows on demand opens one at a time while the first slots already work.
            self.pool = self._own_pool(keep)
            await self.pool.open(wait=True)

    async def close(self) -> None:
        if self.own_pool:
            await self.pool.close()

    def connection(self) -> contextlib.AbstractAsyncContextManager[Any]:
        return self._connection()

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[Any]:
        with self.busy_call:
            async with self.pool.connection() as conn:
                self.busy -= 1
                try:
                    yield conn
                except BaseException:
                    self.busy += 1
                    # What was not committed does not leak. Where the connection broke with
                    # the error (psycopg closes one whose pipeline failed), its rollback fails
                    # too: the error on its way is what happened, not "the connection is
                    # closed" (the pool discards the connection).
                    with contextlib.suppress(Exception):
                        await conn.rollback()
                    raise
                self.busy += 1
                await conn.rollback()  # what was not committed does not leak

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[Any]:
        # Autocommit with explicit BEGIN/COMMIT, as pipeline mode wants: psycopg then never
        # sends a BEGIN of its own. Given back as it came (a user's pool expects that).
        async with self.connection() as conn:
            await conn.set_autocommit(True)
            try:
                yield conn
            finally:
                if not conn.closed:
                    with contextlib.suppress(Exception):
                        await conn.rollback()  # autocommit can change only outside one
                        await conn.set_autocommit(False)

    def pipeline(self, conn: Any) -> contextlib.AbstractAsyncContextManager[Any]:
        return conn.pipeline()  # type: ignore[no-any-return]

    async def end_session(self, conn: Any) -> None:
        await conn.close()

    keys_together = 8  # lock_keys sends them in one round trip

    async def lock_keys(self, conn: Any, keys: list[str]) -> list[bool]:
        # Pipeline mode: the statements go together, and their results come in one round trip.
        sql = self.descriptor.statements["LOCK"]
        with self.busy_call:
            async with conn.pipeline():
                cursors = [await conn.execute(sql, {"key": key}) for key in keys]
                rows = [await cur.fetchone() for cur in cursors]
        return [row is not None and bool(row[0]) for row in rows]

    async def unlock_keys(self, conn: Any, keys: list[str]) -> None:
        sql = self.descriptor.statements["UNLOCK"]
        with self.busy_call:
            async with conn.pipeline():
                cursors = [await conn.execute(sql, {"key": key}) for key in keys]
                for cur in cursors:
                    await cur.fetchone()

    # In pipeline mode (an autocommit session) BEGIN and COMMIT are statements queued with the
    # calls, and a fetch sends them all: an error surfaces at the fetch, not where it arose.
    steps_fail_in_place = False

    async def begin_step(self, conn: Any) -> None:
        await self.execute(conn, "BEGIN")

    async def commit_step(self, conn: Any) -> None:
        await self.execute(conn, "COMMIT")

    async def commit_begin_step(self, conn: Any) -> None:
        if conn.info.server_version < 120000:  # PostgreSQL 11 has no AND CHAIN
            await super().commit_begin_step(conn)
        else:
            await self.execute(conn, "COMMIT AND CHAIN")  # one statement of the round, not two

    async def generic_plans_step(self, conn: Any) -> None:
        # A claim that walks (a key's values, fair or by key; or the priorities) is planned
        # anew at every call: its LIMITs are parameters, which make a generic plan look dearer
        # to the planner than it runs. Planning then costs more than the walk (0.66 against
        # 0.45 ms, fair claim of one row). Its generic plan keeps the walk's shape, and the
        # claim takes the same rows.
        if conn.info.server_version >= 120000:  # plan_cache_mode is PostgreSQL 12's
            await self.execute(conn, GENERIC_PLANS_SQL)

    async def alone_planned_once(self, step: Step) -> Any:
        async with self.session() as conn:
            return await self.planned_once(conn, step)

    async def planned_once(self, conn: Any, step: Step) -> Any:
        assert not isinstance(step, str)
        op, args = step
        if conn.info.server_version < 120000:  # plan_cache_mode is PostgreSQL 12's
            return await self.call(conn, op, **args)
        return await self.call(_PlannedOnce(conn), op, **args)

    async def alone(self, steps: list[Step]) -> list[Any]:
        # Autocommit: each statement is its own transaction, one round trip.
        async with self.session() as conn:
            return await self.together(conn, steps)

    async def sync(self, pipeline: Any) -> None:
        with self.busy_call:
            await pipeline.sync()

    async def call(self, conn: Any, op: str, *args: Any, **kwargs: Any) -> Any:
        with self.busy_call:
            return await getattr(self.ops, op)(conn, *args, **kwargs)

    async def begin(self, conn: Any, *, immediate: bool = True) -> None:
        pass  # psycopg opens the transaction with the first statement

    async def commit(self, conn: Any) -> None:
        with self.busy_call:
            await conn.commit()

    async def rollback(self, conn: Any) -> None:
        with self.busy_call:
            await conn.rollback()

    async def execute(self, conn: Any, sql: Any) -> None:
        with self.busy_call:
            await conn.execute(sql)

    async def release_checked(self, conn: Any, savepoint: str) -> None:
        # DEFERRABLE constraints (Django declares its foreign keys so) are checked as SET
        # CONSTRAINTS makes them immediate; rolling back the savepoint around it makes them
        # deferred again. One round trip, as the release alone: without parameters psycopg
        # sends the statements as one query, which stops at the first error.
        with self.busy_call:
            await conn.execute("SAVEPOINT inboxgen_check; SET CONSTRAINTS ALL IMMEDIATE; "
                               f"ROLLBACK TO SAVEPOINT inboxgen_check; RELEASE SAVEPOINT "
                               f"{savepoint}")

    async def query(self, conn: Any, sql: Any, params: Mapping[str, Any] | None = None) -> Any:
        with self.busy_call:
            cur = await conn.execute(sql, params)
            return await cur.fetchone()

    async def explain(self, conn: Any, name: str) -> None:
        try:
            await conn.execute(*self._explain_args(name))
        finally:
            await conn.rollback()


# invalid_authorization_specification, invalid_password, invalid_catalog_name,
# feature_not_supported (e.g. an authentication method), protocol_violation
_REFUSED = frozenset({"28000", "28P01", "3D000", "0A000", "08P01"})
_POOLS = itertools.count(1)
# admin_shutdown, crash_shutdown, cannot_connect_now, too_many_connections
_GONE = frozenset({"57P01", "57P02", "57P03", "53300"})
# libpq reports these before any SQLSTATE exists.
_REFUSED_TEXT = ("password authentication failed", "no password supplied",
                 "authentication failed", "does not exist", "could not translate host name",
                 "name or service not known", "invalid connection option",
                 "invalid sslmode value", "invalid integer value", "does not support ssl",
                 "ssl was required", "ssl connection is required", "channel binding required",
                 "gssapi encryption required", "authentication method", "not supported",
                 "certificate", "invalid port number", "could not parse network address")


_JSON = msgspec.json.Decoder()


def json_loads(data: str | bytes) -> Any:
    """json.loads's answer, a tenth of its cost for the JSON a server sends; what msgspec
    refuses (a number past a float's range, which jsonb keeps as a numeric) goes to json."""
    try:
        return _JSON.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return json.loads(data)


async def _read_json_quickly(conn: Any) -> None:
    """The worker's own pool decodes json and jsonb columns with json_loads; a pool the
    caller passes keeps the loader its owner chose."""
    from psycopg.types.json import set_json_loads

    set_json_loads(json_loads, conn)
