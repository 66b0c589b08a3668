"""SQLite (sqlite3): one thread per connection, the process's writers serialised, advisory locks
kept in the process."""

from __future__ import annotations

import asyncio
import functools
import random
import sqlite3
import threading
import time
from collections.abc import Coroutine, Mapping
from pathlib import Path
from typing import Any

from inboxgen.descriptor import TableDescriptor
from inboxgen.runtime.backends.base import (
    Backend,
    Database,
    NoDatabase,
    Step,
    ThreadedBackend,
    Wakes,
)


class SqliteBackend(ThreadedBackend):
    """sqlite3 connections in autocommit mode (explicit BEGIN), WAL, a busy timeout.

    SQLite has one writer per file. Inside the process the connections take turns on an asyncio
    lock before they write (a transaction holds it from BEGIN to its end; a statement outside
    one, for that statement), so only writers of other processes are waited for in SQLite's
    busy handler, and in-process waits cost no thread.
    """

    dialect = "sqlite"
    driver = "sqlite3"
    single_writer = True
    # The file is watched for commits unless listen=False: see docs/runtime.md, SQLite commits.
    listens_by_default = can_listen = True

    def __init__(self, descriptor: TableDescriptor, path: str | Path, *,
                 busy_timeout: float = 30.0) -> None:
        super().__init__(descriptor)
        self.path = str(path)
        self.label = f"SQLite file {self.path}"
        self.busy_timeout = busy_timeout
        self._writer = asyncio.Lock()
        self._writing: Any = None  # the connection holding the process's write turn

    @classmethod
    def for_worker(cls, descriptor: TableDescriptor, database: Database, pool: Any,
                   size: int, *, transactional: bool = False) -> Backend:
        if database is None:
            raise NoDatabase("a SQLite worker needs database=<path of the file>")
        return cls(descriptor, str(database))

    def listener(self, wakes: Wakes) -> Coroutine[Any, Any, None]:
        from inboxgen.runtime.watcher import watch

        return watch(self.path, wakes)

    # Advisory locks: SQLite has none, so they are kept in the process (AdvisoryRegistry), and
    # one process per database file serves advisory rows.

    @property
    def _database(self) -> str:
        return str(Path(self.path).resolve())

    def claim_advisory_file(self, owner: object) -> bool:
        return AdvisoryRegistry.claim_file(self._database, owner)

    def release_advisory(self, owner: object) -> None:
        AdvisoryRegistry.release_all(owner)
        AdvisoryRegistry.release_file(owner)

    async def lock_key(self, conn: Any, key: str, owner: object) -> bool:
        return AdvisoryRegistry.try_lock(self._database, key, owner)

    async def unlock_key(self, conn: Any, key: str, owner: object) -> None:
        AdvisoryRegistry.unlock(self._database, key, owner)

    def permanent(self, err: Exception) -> bool:
        return True  # a missing or unreadable file does not appear by itself

    async def probe(self) -> None:
        if not Path(self.path).is_file():
            # sqlite3 would create an empty database, and the worker would then find no table.
            raise FileNotFoundError("no such file (a worker opens a database file and never "
                                    "creates one: create it with your migrations first)")
        await super().probe()

    def _connect(self) -> sqlite3.Connection:
        # mode=rw: never creates the file (a typo in its name would give an empty database).
        uri = Path(self.path).resolve().as_uri() + "?mode=rw"
        conn = sqlite3.connect(uri, uri=True, timeout=self.busy_timeout, isolation_level=None,
                               check_same_thread=False)
        try:
            wal_mode(conn, self.busy_timeout)
            conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout * 1000)}")
            # SQLite checks foreign keys only where a connection asks, as Django's and most
            # applications' do: a transactional handler's writes are checked as theirs are.
            conn.execute("PRAGMA foreign_keys=ON")
        except BaseException:
            conn.close()
            raise
        return conn

    def _release(self, conn: Any) -> None:
        if conn.in_transaction:
            conn.rollback()

    def _in_transaction(self, conn: Any) -> bool:
        return bool(conn.in_transaction)

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

    async def together(self, conn: Any, steps: list[Step]) -> list[Any]:
        took = await self._take_turn(conn)  # unless its transaction holds the turn already
        try:
            return await super().together(conn, steps)
        finally:
            if took and not conn.in_transaction:
                self._end_turn(conn)

    def _begin_now(self, conn: Any) -> None:
        conn.execute("BEGIN IMMEDIATE")

    def _commit_now(self, conn: Any) -> None:
        conn.execute("COMMIT")

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
        await self._end(conn, "COMMIT")

    async def rollback(self, conn: Any) -> None:
        await self._end(conn, "ROLLBACK")

    async def _end(self, conn: Any, how: str) -> None:
        """End the transaction open on `conn` (COMMIT or ROLLBACK); once none is open, the
        process's write turn passes on."""
        try:
            if conn.in_transaction:
                await self._run(conn, conn.execute, how)
        finally:
            if not conn.in_transaction:
                self._end_turn(conn)

    async def execute(self, conn: Any, sql: str) -> None:
        await self._in_turn(conn, _run_to_end, conn, sql)

    async def explain(self, conn: Any, name: str) -> None:
        await self._in_turn(conn, _run_to_end, conn, *self._explain_args(name))

    async def query(self, conn: Any, sql: str, params: Mapping[str, Any] | None = None) -> Any:
        def first() -> Any:  # a read needs no write turn
            cur = conn.execute(sql, params or {})
            try:
                return cur.fetchone()
            finally:
                cur.close()  # an open cursor would keep its read going

        return await self._run(conn, first)


def wal_mode(conn: sqlite3.Connection, busy_timeout: float) -> None:
    """Put the database file in WAL mode, unless it is already (the mode is kept in the file, so
    only the first connection to a new file changes it). Leaves `conn`'s busy timeout at what
    was left of `busy_timeout`: the caller sets it again.

    Changing the journal mode needs the file to itself, and SQLite answers "database is locked"
    at once when another connection holds a lock there, without calling its busy handler (it
    would deadlock where this connection holds a read lock meanwhile). A lock another process
    holds is waited for all the same, as the busy timeout says: the change is tried again until
    `busy_timeout` seconds have passed in all, then the error is raised."""
    deadline = time.monotonic() + busy_timeout
    delay = 0.001
    while True:
        # What SQLite's busy handler waits (to read the mode) counts against the same timeout.
        left = deadline - time.monotonic()
        conn.execute(f"PRAGMA busy_timeout={max(0, int(left * 1000))}")
        try:
            (mode,) = conn.execute("PRAGMA journal_mode").fetchone()
            if str(mode).lower() != "wal":
                conn.execute("PRAGMA journal_mode=WAL").fetchall()
            return
        except sqlite3.OperationalError as err:
            left = deadline - time.monotonic()
            if not _locked(err) or left <= 0:
                raise
        # 1 ms, doubling up to 50 ms, jittered: processes started together spread out.
        time.sleep(min(left, random.uniform(0.5, 1.0) * delay))
        delay = min(delay * 2, 0.05)


def _locked(err: sqlite3.OperationalError) -> bool:
    """SQLITE_BUSY: another connection holds a lock the statement needs."""
    code = getattr(err, "sqlite_errorcode", None)
    if code is not None:
        return bool(code & 0xFF == sqlite3.SQLITE_BUSY)
    return "database is locked" in str(err)


def _run_to_end(conn: sqlite3.Connection, sql: str, params: Any = ()) -> None:
    """Run a statement and finish it: a cursor left open (EXPLAIN returns rows) keeps its
    statement in progress, and SQLite then refuses to COMMIT on that connection."""
    cur = conn.execute(sql, params)
    try:
        cur.fetchall()
    finally:
        cur.close()


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
