"""What the generated functions a service calls in its own transaction (the enqueue functions
insert, insert_unique and insert_many; notify, state, cancel; and their async twins) take as
`conn`: the driver connection, or what a service holds over it, turned here into the driver
connection so that the statement joins the caller's transaction.

    sync   a SQLAlchemy 2 Connection or Session, a Django connection (django.db.connection or
           django.db.connections[alias])
    async  a SQLAlchemy AsyncConnection or AsyncSession

SQLAlchemy and Django are recognised by what they have, never imported: both stay optional. A
driver connection is checked first, by its exact type once it has been seen, so the runtime
(which passes driver connections) pays a set lookup.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, cast

from inboxgen.errors import WrongConnection

if TYPE_CHECKING:
    import sqlite3

    import psycopg
    import pymysql


class ConnectionHolder(Protocol):
    """A SQLAlchemy Connection (its `connection` property) or Session (its `connection()`
    method), or a Django connection (its `connection` attribute)."""

    @property
    def connection(self) -> object: ...


class AsyncConnectionHolder(Protocol):
    """A SQLAlchemy AsyncConnection."""

    async def get_raw_connection(self) -> Any: ...


class AsyncSessionHolder(Protocol):
    """A SQLAlchemy AsyncSession."""

    async def connection(self) -> Any: ...


AsyncHolder: TypeAlias = AsyncConnectionHolder | AsyncSessionHolder


class _Driver:
    """One driver's connection class, named (module, class), not imported."""

    def __init__(self, module: str, name: str, needs: str) -> None:
        self.module = module
        self.name = name
        self.needs = needs
        self._types: set[type] = set()  # exact types seen to be this driver's connections

    def owns(self, conn: object) -> bool:
        if type(conn) in self._types:
            return True
        # A connection of the driver means the driver is imported: nothing to import here.
        cls = getattr(sys.modules.get(self.module), self.name, None)
        if isinstance(cls, type) and isinstance(conn, cls):
            self._types.add(type(conn))
            return True
        return False

    def wrong(self, where: str, given: object, driver: object = None) -> WrongConnection:
        over = "" if driver is None else f" over {_name(driver)}"
        return WrongConnection(f"{where}() needs {self.needs}; got {_name(given)}{over}")


def _name(value: object) -> str:
    t = type(value)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


_NOTHING = object()


def _held(conn: object) -> object:
    """The driver connection under a SQLAlchemy Connection or Session or a Django connection,
    with a transaction begun where SQLAlchemy would otherwise not know of one; _NOTHING when
    conn is none of them."""
    if hasattr(conn, "get_raw_connection"):  # an async SQLAlchemy connection
        return _NOTHING
    if hasattr(conn, "ensure_connection") and hasattr(conn, "vendor"):
        # Django: in atomic() the driver connection is in Django's transaction; outside it,
        # Django runs in autocommit and the insert commits as any Django write does.
        conn.ensure_connection()
        return getattr(conn, "connection", None)
    holder = getattr(conn, "connection", None)
    if hasattr(conn, "get_bind") and callable(holder) and not inspect.iscoroutinefunction(holder):
        conn = holder()  # a Session: connection() begins the session's transaction
        holder = getattr(conn, "connection", None)
    elif hasattr(holder, "driver_connection") and hasattr(conn, "in_transaction"):
        if not conn.in_transaction():
            # A Connection that has run nothing yet: begin its transaction, so that its
            # commit() or rollback() (or the end of engine.begin()) settles the job too.
            conn.begin()  # type: ignore[attr-defined]
    else:
        return _NOTHING
    return getattr(holder, "driver_connection", _NOTHING)


async def _held_async(conn: object) -> object:
    """The driver connection under a SQLAlchemy AsyncConnection or AsyncSession, inside a begun
    transaction; _NOTHING when conn is neither."""
    connection = getattr(conn, "connection", None) if not hasattr(
        conn, "get_raw_connection") else None
    if inspect.iscoroutinefunction(connection):
        conn = await connection()  # AsyncSession.connection() begins the session's transaction
    get_raw = getattr(conn, "get_raw_connection", None)
    if get_raw is None:
        return _NOTHING
    if not conn.in_transaction():  # type: ignore[attr-defined]
        await conn.begin()  # type: ignore[attr-defined]
    return getattr(await get_raw(), "driver_connection", _NOTHING)


def _unwrap(driver: _Driver, conn: object, where: str) -> Any:
    if driver.owns(conn):
        return conn
    raw = _held(conn)
    if raw is _NOTHING:
        raise driver.wrong(where, conn)
    if not driver.owns(raw):
        raise driver.wrong(where, conn, raw)
    _wake_after_commit(conn, where)
    return raw


async def _unwrap_async(driver: _Driver, conn: object, where: str) -> Any:
    if driver.owns(conn):
        return conn
    raw = await _held_async(conn)
    if raw is _NOTHING:
        raise driver.wrong(where + "_async", conn)
    if not driver.owns(raw):
        raise driver.wrong(where + "_async", conn, raw)
    _wake_after_commit(conn, where)
    return raw


# -- waking this process's workers when an enqueue commits ----------------------------------
# SQLite and MySQL/MariaDB have no NOTIFY. A worker of this process registers its table here
# (the runtime does, at start); an enqueue through a SQLAlchemy Session or Connection (or their
# async twins) or a Django connection then asks to be told when its transaction commits, and
# wakes them. A driver connection tells nothing of its commit: its jobs wait for the poll.
_WAKES: dict[str, list[Callable[[bool], None]]] = {}


def wake_on_commit(table: str, wake: Callable[[bool], None]) -> Callable[[], None]:
    """Call `wake` (from whichever thread commits) after each commit of an enqueue into
    `table` made in this process through a SQLAlchemy or Django connection, with whether the
    COMMIT may still be on its way to the server (`in_flight`: a SQLAlchemy Connection tells
    only as it commits); returns the function that stops it."""
    _WAKES.setdefault(table, []).append(wake)

    def forget() -> None:
        waiting = _WAKES.get(table, [])
        if wake in waiting:
            waiting.remove(wake)
        if not waiting:
            _WAKES.pop(table, None)
    return forget


def _wake(table: str, in_flight: bool = False) -> None:
    for wake in list(_WAKES.get(table, ())):
        wake(in_flight)


# The functions whose commit brings new rows (notify, state and cancel bring none).
_ENQUEUES = frozenset({"insert", "insert_unique", "insert_many"})


def _wake_after_commit(holder: object, where: str) -> None:
    """Wake the table's workers of this process once `holder`'s transaction commits, when
    `where` ("table.function") is an enqueue function."""
    table, _, function = where.rpartition(".")
    if table not in _WAKES or function not in _ENQUEUES:
        return
    on_commit = getattr(holder, "on_commit", None)
    if callable(on_commit) and hasattr(holder, "vendor"):
        on_commit(lambda: _wake(table))  # Django: after the outermost atomic() commits
        return
    from sqlalchemy import event  # a SQLAlchemy holder: SQLAlchemy is installed

    # The sync object under an async one: its events are the async one's.
    sync = getattr(holder, "sync_session", None) or getattr(holder, "sync_connection", None) \
        or holder
    if hasattr(sync, "get_bind"):  # a Session: once its transaction has committed
        event.listen(sync, "after_commit", lambda session: _wake(table), once=True)
    else:
        # A Connection has no event after its commit, only as it commits: a claim woken at
        # once may run before the COMMIT lands, so the worker wakes again shortly after.
        event.listen(sync, "commit", lambda connection: _wake(table, True), once=True)


_PSYCOPG = _Driver("psycopg", "Connection",
                   "a psycopg connection, a SQLAlchemy Connection or Session over psycopg, or a "
                   "Django connection to PostgreSQL")
_PSYCOPG_ASYNC = _Driver("psycopg", "AsyncConnection",
                         "a psycopg AsyncConnection, or a SQLAlchemy AsyncConnection or "
                         "AsyncSession over psycopg (postgresql+psycopg_async)")
_PYMYSQL = _Driver("pymysql.connections", "Connection",
                   "a PyMySQL connection, a SQLAlchemy Connection or Session over PyMySQL "
                   "(mysql+pymysql), or a Django connection to MySQL on PyMySQL "
                   "(pymysql.install_as_MySQLdb())")
_ASYNCMY = _Driver("asyncmy.connection", "Connection",
                   "an asyncmy connection, or a SQLAlchemy AsyncConnection or AsyncSession over "
                   "asyncmy (mysql+asyncmy)")
_SQLITE3 = _Driver("sqlite3", "Connection",
                   "a sqlite3 connection, a SQLAlchemy Connection or Session over sqlite3 "
                   "(sqlite+pysqlite), or a Django connection to SQLite")


def postgres_connection(conn: psycopg.Connection[Any] | ConnectionHolder,
                        where: str) -> psycopg.Connection[Any]:
    """The psycopg connection in conn; `where` names the function for the error."""
    return cast("psycopg.Connection[Any]", _unwrap(_PSYCOPG, conn, where))


async def postgres_connection_async(conn: psycopg.AsyncConnection[Any] | AsyncHolder,
                                    where: str) -> psycopg.AsyncConnection[Any]:
    """The psycopg AsyncConnection in conn; `where` names the plain function (the error names
    its async twin)."""
    return cast("psycopg.AsyncConnection[Any]", await _unwrap_async(_PSYCOPG_ASYNC, conn, where))


def mysql_connection(conn: pymysql.connections.Connection[Any] | ConnectionHolder,
                     where: str) -> pymysql.connections.Connection[Any]:
    """The PyMySQL connection in conn."""
    return cast("pymysql.connections.Connection[Any]", _unwrap(_PYMYSQL, conn, where))


async def mysql_connection_async(conn: Any, where: str) -> Any:
    """The asyncmy connection in conn (typed Any, as the twins type asyncmy's connections)."""
    return await _unwrap_async(_ASYNCMY, conn, where)


def sqlite_connection(conn: sqlite3.Connection | ConnectionHolder,
                      where: str) -> sqlite3.Connection:
    """The sqlite3 connection in conn."""
    return cast("sqlite3.Connection", _unwrap(_SQLITE3, conn, where))
