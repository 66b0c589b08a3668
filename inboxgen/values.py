"""Value conversions the generated modules use at the driver boundary (part of the contract
committed modules import, with descriptor.py).

SQLite keeps the time roles as text in one fixed UTC format, `YYYY-MM-DD HH:MM:SS.ffffff`, so
text order is time order (and a `CURRENT_TIMESTAMP` default, which lacks the fraction, still
sorts correctly against it). Times handed to inboxgen must be timezone-aware.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

import msgspec

if TYPE_CHECKING:
    from pymysql.cursors import Cursor

UTC = _dt.UTC
# The lowest id a claim starting at `from_id` can be given: None there means from the head.
LOWEST_ID = -(2**63)
SQLITE_TIME_FORMAT = "%Y-%m-%d %H:%M:%S.%f"

# What the async twins of MySQL functions take: an asyncmy connection. Named here, not
# imported, so that a module also loads where only PyMySQL is installed.
AsyncMySQLConnection: TypeAlias = Any


class AsyncMySQLCursor(Protocol):
    """What the async twins read of an asyncmy cursor."""

    rowcount: int
    lastrowid: int

    async def execute(self, query: str, args: Any = None) -> int: ...

    def fetchone(self) -> Awaitable[tuple[Any, ...] | None]: ...

    def fetchall(self) -> Awaitable[Sequence[tuple[Any, ...]]]: ...


JSONValue = dict[str, "JSONValue"] | list["JSONValue"] | str | int | float | bool | None


def _utc(value: _dt.datetime) -> _dt.datetime:
    if value.tzinfo is None:
        raise ValueError(f"inboxgen needs timezone-aware datetimes, got naive {value!r}")
    return value.astimezone(UTC)


def sqlite_time(value: _dt.datetime) -> str:
    return _utc(value).strftime(SQLITE_TIME_FORMAT)


def sqlite_time_or_none(value: _dt.datetime | None) -> str | None:
    return None if value is None else sqlite_time(value)


def parse_sqlite_time(value: str) -> _dt.datetime:
    parsed = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def parse_sqlite_time_or_none(value: str | None) -> _dt.datetime | None:
    return None if value is None else parse_sqlite_time(value)


def naive_utc(value: _dt.datetime) -> _dt.datetime:
    """For `timestamp without time zone` / DATETIME columns, which hold UTC."""
    return _utc(value).replace(tzinfo=None)


def naive_utc_or_none(value: _dt.datetime | None) -> _dt.datetime | None:
    return None if value is None else naive_utc(value)


def aware(value: _dt.datetime) -> _dt.datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def aware_or_none(value: _dt.datetime | None) -> _dt.datetime | None:
    return None if value is None else aware(value)


def json_bytes(value: Any) -> bytes:
    return msgspec.json.encode(value)


def json_text(value: Any) -> str:
    return msgspec.json.encode(value).decode()


def json_text_or_none(value: Any) -> str | None:
    return None if value is None else json_text(value)


# MySQL/MariaDB errors that mean "the row is locked" for FOR UPDATE NOWAIT.
_MYSQL_LOCKED = (1205, 3572)


def _mysql_code(err: BaseException) -> int | None:
    """The server's error number of a PyMySQL or asyncmy error (None for any other error)."""
    if not type(err).__module__.startswith(("pymysql.", "asyncmy.")) or not err.args:
        return None
    code = err.args[0]
    return code if isinstance(code, int) else None


def mysql_lock_unavailable(err: BaseException) -> bool:
    return _mysql_code(err) in _MYSQL_LOCKED


def mysql_duplicate_key(err: BaseException) -> bool:
    return _mysql_code(err) == 1062


def mysql_execute(conn: Any, sql: str, params: Any) -> Cursor:
    """Run one statement on a PyMySQL connection; returns its (buffered) cursor."""
    cur: Cursor = conn.cursor()
    cur.execute(sql, params)
    return cur


def mysql_executemany(conn: Any, sql: str, rows: Any) -> None:
    """PyMySQL turns an INSERT ... VALUES run with many rows into one multi-row INSERT."""
    with conn.cursor() as cur:
        cur.executemany(sql, rows)



async def mysql_execute_async(conn: AsyncMySQLConnection, sql: str,
                              params: Any) -> AsyncMySQLCursor:
    """mysql_execute on an asyncmy connection; returns its (buffered) cursor, whose fetches
    are awaited."""
    cur: AsyncMySQLCursor = conn.cursor()
    await cur.execute(sql, params)
    return cur


async def mysql_executemany_async(conn: AsyncMySQLConnection, sql: str, rows: Any) -> None:
    """mysql_executemany on an asyncmy connection (which also writes one multi-row INSERT)."""
    cur: Any = conn.cursor()
    await cur.executemany(sql, rows)
