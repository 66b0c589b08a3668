"""The drivers under the worker: connections, transactions and calls of the generated functions.

The worker decides; a backend only executes. SQLite's sqlite3 is synchronous, so its calls run
in threads; PostgreSQL uses psycopg's async connections and the generated `_async` functions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import threading
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

from inboxgen.descriptor import Operations, TableDescriptor

log = logging.getLogger("inboxgen.worker")


class Backend:
    """One database as the worker sees it."""

    dialect = ""

    def __init__(self, descriptor: TableDescriptor) -> None:
        self.descriptor = descriptor
        self.busy = 0  # calls in flight, so tests on a fake clock can tell when all is quiet

    async def open(self) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    def connection(self) -> contextlib.AbstractAsyncContextManager[Any]:
        raise NotImplementedError

    async def call(self, conn: Any, op: str, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def begin(self, conn: Any, *, immediate: bool = True) -> None:
        raise NotImplementedError

    async def commit(self, conn: Any) -> None:
        raise NotImplementedError

    async def rollback(self, conn: Any) -> None:
        raise NotImplementedError

    async def execute(self, conn: Any, sql: str) -> None:
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

    def insert_params(self, fields: Mapping[str, Any]) -> dict[str, Any]:
        return dict(fields)


class ThreadedBackend(Backend):
    """A driver without async support (sqlite3, PyMySQL): connections kept by the worker, each
    used by one task at a time, every call run in a thread."""

    def __init__(self, descriptor: TableDescriptor) -> None:
        super().__init__(descriptor)
        self._idle: list[Any] = []
        self._all: list[Any] = []
        self._lock = threading.Lock()

    def _connect(self) -> Any:
        raise NotImplementedError

    def _release(self, conn: Any) -> None:
        """Called in a thread when a borrowed connection comes back: end its transaction."""
        conn.rollback()

    def _usable(self, conn: Any) -> bool:
        return True

    async def _run(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        self.busy += 1
        try:
            return await asyncio.to_thread(fn, *args, **kwargs)
        finally:
            self.busy -= 1

    async def open(self) -> None:
        conn = await self._run(self._connect)
        with self._lock:
            self._all.append(conn)
            self._idle.append(conn)

    async def close(self) -> None:
        for conn in self._all:
            with contextlib.suppress(Exception):
                await self._run(conn.close)
        with self._lock:
            self._all.clear()
            self._idle.clear()

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[Any]:
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = await self._run(self._connect)
            with self._lock:
                self._all.append(conn)
        try:
            yield conn
        finally:
            with contextlib.suppress(Exception):
                await self._run(self._release, conn)  # what was not committed does not leak
            with self._lock:
                if self._usable(conn):
                    self._idle.append(conn)
                else:
                    self._all.remove(conn)

    async def call(self, conn: Any, op: str, *args: Any, **kwargs: Any) -> Any:
        fn = getattr(self.descriptor.ops, op)
        return await self._run(fn, conn, *args, **kwargs)


class SqliteBackend(ThreadedBackend):
    """sqlite3 connections in autocommit mode (explicit BEGIN), WAL, a busy timeout."""

    dialect = "sqlite"

    def __init__(self, descriptor: TableDescriptor, path: str | Path, *,
                 busy_timeout: float = 30.0) -> None:
        super().__init__(descriptor)
        self.path = str(path)
        self.busy_timeout = busy_timeout

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None,
                               check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout * 1000)}")
        return conn

    def _release(self, conn: Any) -> None:
        if conn.in_transaction:
            conn.rollback()

    async def begin(self, conn: Any, *, immediate: bool = True) -> None:
        # IMMEDIATE takes the write lock up front: no deadlock upgrading a read later.
        await self._run(conn.execute, "BEGIN IMMEDIATE" if immediate else "BEGIN")

    async def commit(self, conn: Any) -> None:
        if conn.in_transaction:
            await self._run(conn.execute, "COMMIT")

    async def rollback(self, conn: Any) -> None:
        if conn.in_transaction:
            await self._run(conn.execute, "ROLLBACK")

    async def execute(self, conn: Any, sql: str) -> None:
        await self._run(_run_to_end, conn, sql)

    async def explain(self, conn: Any, name: str) -> None:
        await self._run(_run_to_end, conn, *self._explain_args(name))


def _run_to_end(conn: sqlite3.Connection, sql: str, params: Any = ()) -> None:
    """Run a statement and finish it: a cursor left open (EXPLAIN returns rows) keeps its
    statement in progress, and SQLite then refuses to COMMIT on that connection."""
    cur = conn.execute(sql, params)
    try:
        cur.fetchall()
    finally:
        cur.close()


class PostgresBackend(Backend):
    """psycopg async connections from a pool that always keeps one connection spare."""

    dialect = "postgres"

    def __init__(self, descriptor: TableDescriptor, conninfo: str | None, *,
                 pool: Any = None, size: int = 1) -> None:
        super().__init__(descriptor)
        from psycopg_pool import AsyncConnectionPool

        self.own_pool = pool is None
        self.conninfo = conninfo if conninfo is not None else str(getattr(pool, "conninfo", ""))
        # The listening connection is opened like the pool's own (a password may live here).
        self.connect_kwargs: dict[str, Any] = {
            k: v for k, v in dict(getattr(pool, "kwargs", None) or {}).items()
            if k != "autocommit"}
        self.pool: AsyncConnectionPool[Any] = pool or AsyncConnectionPool(
            self.conninfo, min_size=1, max_size=size + 1, open=False,
            name=f"inboxgen-{descriptor.table}")
        assert descriptor.async_ops is not None
        self.ops: Operations = descriptor.async_ops

    async def open(self) -> None:
        if self.own_pool:
            await self.pool.open(wait=True)

    async def close(self) -> None:
        if self.own_pool:
            await self.pool.close()

    def connection(self) -> contextlib.AbstractAsyncContextManager[Any]:
        return self._connection()

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[Any]:
        self.busy += 1
        try:
            async with self.pool.connection() as conn:
                self.busy -= 1
                try:
                    yield conn
                finally:
                    self.busy += 1
                    await conn.rollback()  # what was not committed does not leak
        finally:
            self.busy -= 1

    async def call(self, conn: Any, op: str, *args: Any, **kwargs: Any) -> Any:
        self.busy += 1
        try:
            return await getattr(self.ops, op)(conn, *args, **kwargs)
        finally:
            self.busy -= 1

    async def begin(self, conn: Any, *, immediate: bool = True) -> None:
        pass  # psycopg opens the transaction with the first statement

    async def commit(self, conn: Any) -> None:
        self.busy += 1
        try:
            await conn.commit()
        finally:
            self.busy -= 1

    async def rollback(self, conn: Any) -> None:
        self.busy += 1
        try:
            await conn.rollback()
        finally:
            self.busy -= 1

    async def execute(self, conn: Any, sql: Any) -> None:
        self.busy += 1
        try:
            await conn.execute(sql)
        finally:
            self.busy -= 1

    async def explain(self, conn: Any, name: str) -> None:
        try:
            await conn.execute(*self._explain_args(name))
        finally:
            await conn.rollback()


def mysql_connect_args(database: str | Mapping[str, Any]) -> dict[str, Any]:
    """PyMySQL connect() arguments from a URL (mysql://user:password@host:port/db) or a mapping
    of them."""
    if not isinstance(database, str):
        return dict(database)
    from urllib.parse import parse_qs, unquote, urlsplit

    url = urlsplit(database)
    if url.scheme not in ("mysql", "mariadb", "mysql+pymysql"):
        raise ValueError("a MySQL/MariaDB database is a URL like mysql://user@host:3306/name")
    args: dict[str, Any] = {"host": url.hostname or "localhost", "port": url.port or 3306,
                            "database": unquote(url.path.lstrip("/")) or None}
    if url.username:
        args["user"] = unquote(url.username)
    if url.password:
        args["password"] = unquote(url.password)
    for key, values in parse_qs(url.query).items():
        if key in ("unix_socket", "charset", "ssl_ca"):
            args[key] = values[-1]
    return args


class MySQLBackend(ThreadedBackend):
    """PyMySQL connections (a small pool of the worker's own), at READ COMMITTED and in UTC."""

    dialect = "mysql"

    def __init__(self, descriptor: TableDescriptor, database: str | Mapping[str, Any]) -> None:
        super().__init__(descriptor)
        self.connect_args = mysql_connect_args(database)

    def _connect(self) -> Any:
        import pymysql
        from pymysql.constants import CLIENT

        # FOUND_ROWS: an UPDATE reports the rows it matched, not only those it changed, so a
        # renewal that writes the expiry already held still counts as held.
        args = dict(self.connect_args)
        flags = int(args.pop("client_flag", 0)) | CLIENT.FOUND_ROWS
        conn = pymysql.connect(**args, client_flag=flags, autocommit=False)
        with conn.cursor() as cur:
            # Claims run at READ COMMITTED; times travel as naive UTC.
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            cur.execute("SET SESSION time_zone = '+00:00'")
        return conn

    def _usable(self, conn: Any) -> bool:
        return bool(conn.open)

    async def begin(self, conn: Any, *, immediate: bool = True) -> None:
        await self._run(conn.begin)

    async def commit(self, conn: Any) -> None:
        await self._run(conn.commit)

    async def rollback(self, conn: Any) -> None:
        await self._run(conn.rollback)

    async def execute(self, conn: Any, sql: str) -> None:
        def run() -> None:
            with conn.cursor() as cur:
                cur.execute(sql)

        await self._run(run)

    async def query(self, conn: Any, sql: str) -> Any:
        def run() -> Any:
            with conn.cursor() as cur:
                cur.execute(sql)
                return cur.fetchone()

        return await self._run(run)

    async def explain(self, conn: Any, name: str) -> None:
        sql, params = self._explain_args(name)
        # A list parameter (`IN %(ids)s`) is bound as a one-element list.
        bound = {k: ([None] if k == "ids" else v) for k, v in params.items()}

        def run() -> None:
            with conn.cursor() as cur:
                cur.execute(sql, bound)

        await self._run(run)


class AdvisoryRegistry:
    """SQLite's advisory locks: a registry in the process (one process per database file)."""

    _held: dict[tuple[str, str], object] = {}
    _guard = threading.Lock()

    @classmethod
    def try_lock(cls, database: str, key: str, owner: object) -> bool:
        with cls._guard:
            if (database, key) in cls._held:
                return False
            cls._held[(database, key)] = owner
            return True

    @classmethod
    def unlock(cls, database: str, key: str, owner: object) -> None:
        with cls._guard:
            if cls._held.get((database, key)) is owner:
                del cls._held[(database, key)]

    @classmethod
    def release_all(cls, owner: object) -> None:
        with cls._guard:
            for k in [k for k, v in cls._held.items() if v is owner]:
                del cls._held[k]
