"""The drivers under the worker: connections, transactions and calls of the generated functions.

The worker decides; a backend only executes. SQLite's sqlite3 is synchronous, so its calls run
in threads; PostgreSQL uses psycopg's async connections and the generated `_async` functions.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import sqlite3
import threading
from collections.abc import AsyncIterator, Mapping
from concurrent.futures import ThreadPoolExecutor
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

    def abandon(self, conn: Any, user: asyncio.Future[Any]) -> None:
        """A handler's thread still uses `conn` after its job was cancelled: leave the
        connection to it, and close it once that thread is done."""


class ThreadedBackend(Backend):
    """A driver without async support (sqlite3, PyMySQL): connections kept by the worker, each
    used by one task at a time and each with a thread of its own that runs every call on it.

    A thread per connection, not asyncio's shared executor: tasks waiting on a lock in their
    calls can never take the thread another connection needs to commit. A call that is
    cancelled is interrupted where the driver can, and its connection is handed back or closed
    only once the call has really ended.
    """

    def __init__(self, descriptor: TableDescriptor) -> None:
        super().__init__(descriptor)
        self._idle: list[Any] = []
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

    def _interrupt(self, conn: Any) -> None:
        """Stop the statement running on `conn` (from another thread), where the driver can."""

    async def _on_thread(self, thread: ThreadPoolExecutor, conn: Any, fn: Any, *args: Any,
                         **kwargs: Any) -> Any:
        self.busy += 1
        try:
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
        finally:
            self.busy -= 1

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

    async def open(self) -> None:
        self._idle.append(await self._new())

    async def close(self) -> None:
        self._idle.clear()
        for conn in list(self._conns.values()):
            await self._discard(conn)

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

    async def _give_back(self, conn: Any) -> None:
        if id(conn) not in self._conns:
            self._returned(conn)
            return  # closed by shutdown meanwhile, or left to a handler's thread
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


class SqliteBackend(ThreadedBackend):
    """sqlite3 connections in autocommit mode (explicit BEGIN), WAL, a busy timeout.

    SQLite has one writer per file. Inside the process the connections take turns on an asyncio
    lock before they write (a transaction holds it from BEGIN to its end; a statement outside
    one, for that statement), so only writers of other processes are waited for in SQLite's
    busy handler, and in-process waits cost no thread.
    """

    dialect = "sqlite"

    def __init__(self, descriptor: TableDescriptor, path: str | Path, *,
                 busy_timeout: float = 30.0) -> None:
        super().__init__(descriptor)
        self.path = str(path)
        self.busy_timeout = busy_timeout
        self._writer = asyncio.Lock()
        self._writing: Any = None  # the connection holding the process's write turn

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None,
                               check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout * 1000)}")
        return conn

    def _release(self, conn: Any) -> None:
        if conn.in_transaction:
            conn.rollback()

    def _interrupt(self, conn: Any) -> None:
        conn.interrupt()

    def _returned(self, conn: Any) -> None:
        self._end_turn(conn)

    def abandon(self, conn: Any, user: asyncio.Future[Any]) -> None:
        super().abandon(conn, user)
        self._end_turn(conn)  # its writes end with the close; the others need not wait here

    async def _take_turn(self, conn: Any) -> bool:
        """Wait for the process's write turn; False when `conn` holds it already."""
        if self._writing is conn:
            return False
        await self._writer.acquire()
        self._writing = conn
        return True

    def _end_turn(self, conn: Any) -> None:
        if self._writing is conn:
            self._writing = None
            self._writer.release()

    async def _in_turn(self, conn: Any, fn: Any, *args: Any) -> Any:
        """Run one statement outside a transaction in a write turn of its own."""
        took = await self._take_turn(conn)
        try:
            return await self._run(conn, fn, *args)
        finally:
            if took:
                self._end_turn(conn)

    async def call(self, conn: Any, op: str, *args: Any, **kwargs: Any) -> Any:
        fn = getattr(self.descriptor.ops, op)
        return await self._in_turn(conn, functools.partial(fn, conn, *args, **kwargs))

    async def begin(self, conn: Any, *, immediate: bool = True) -> None:
        # IMMEDIATE takes the write lock up front: no deadlock upgrading a read later.
        took = await self._take_turn(conn)
        try:
            await self._run(conn, conn.execute, "BEGIN IMMEDIATE" if immediate else "BEGIN")
        except BaseException:
            if took:
                self._end_turn(conn)
            raise

    async def commit(self, conn: Any) -> None:
        try:
            if conn.in_transaction:
                await self._run(conn, conn.execute, "COMMIT")
        finally:
            if not conn.in_transaction:
                self._end_turn(conn)

    async def rollback(self, conn: Any) -> None:
        try:
            if conn.in_transaction:
                await self._run(conn, conn.execute, "ROLLBACK")
        finally:
            if not conn.in_transaction:
                self._end_turn(conn)

    async def execute(self, conn: Any, sql: str) -> None:
        await self._in_turn(conn, _run_to_end, conn, sql)

    async def explain(self, conn: Any, name: str) -> None:
        await self._in_turn(conn, _run_to_end, conn, *self._explain_args(name))


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
        await self._run(conn, conn.begin)

    async def commit(self, conn: Any) -> None:
        await self._run(conn, conn.commit)

    async def rollback(self, conn: Any) -> None:
        await self._run(conn, conn.rollback)

    async def execute(self, conn: Any, sql: str) -> None:
        def run() -> None:
            with conn.cursor() as cur:
                cur.execute(sql)

        await self._run(conn, run)

    async def query(self, conn: Any, sql: str) -> Any:
        def run() -> Any:
            with conn.cursor() as cur:
                cur.execute(sql)
                return cur.fetchone()

        return await self._run(conn, run)

    async def explain(self, conn: Any, name: str) -> None:
        sql, params = self._explain_args(name)
        # A list parameter (`IN %(ids)s`) is bound as a one-element list.
        bound = {k: ([None] if k == "ids" else v) for k, v in params.items()}

        def run() -> None:
            with conn.cursor() as cur:
                cur.execute(sql, bound)

        await self._run(conn, run)


class AdvisoryRegistry:
    """SQLite's advisory locks: a registry in the process, so one process per database file
    serves advisory tables. That is enforced: the process holds an OS file lock beside the
    database (`<file>.inboxgen-advisory`) while any of its workers serve advisory rows there."""

    _held: dict[tuple[str, str], object] = {}
    _guard = threading.Lock()
    _files: dict[str, tuple[Any, set[int]]] = {}  # database -> (locked file, owners' ids)

    @classmethod
    def claim_file(cls, database: str, owner: object) -> bool:
        """Take the database's advisory file lock for `owner`; False when another process
        holds it."""
        import fcntl

        with cls._guard:
            if database in cls._files:
                cls._files[database][1].add(id(owner))
                return True
            # Kept open while owners remain: closing it releases the lock.
            handle = open(f"{database}.inboxgen-advisory", "a+b")
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                return False
            cls._files[database] = (handle, {id(owner)})
            return True

    @classmethod
    def release_file(cls, owner: object) -> None:
        with cls._guard:
            for database, (handle, owners) in list(cls._files.items()):
                owners.discard(id(owner))
                if not owners:
                    handle.close()  # closing the file releases the lock
                    del cls._files[database]

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
