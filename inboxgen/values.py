"""Value conversions the generated modules use at the driver boundary (part of the contract
committed modules import, with descriptor.py).

SQLite keeps the time roles as text in one fixed UTC format, `YYYY-MM-DD HH:MM:SS.ffffff`, so
text order is time order (and a `CURRENT_TIMESTAMP` default, which lacks the fraction, still
sorts correctly against it). Times handed to inboxgen must be timezone-aware.
"""

from __future__ import annotations

import datetime as _dt
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from pymysql.cursors import Cursor

UTC = _dt.UTC
SQLITE_TIME_FORMAT = "%Y-%m-%d %H:%M:%S.%f"

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


def mysql_lock_unavailable(err: BaseException) -> bool:
    return bool(err.args) and err.args[0] in _MYSQL_LOCKED


def mysql_duplicate_key(err: BaseException) -> bool:
    return bool(err.args) and err.args[0] == 1062


def mysql_execute(conn: Any, sql: str, params: Any) -> Cursor:
    """Run one statement on a PyMySQL connection; returns its (buffered) cursor."""
    cur: Cursor = conn.cursor()
    cur.execute(sql, params)
    return cur


def mysql_executemany(conn: Any, sql: str, rows: Any) -> None:
    """PyMySQL turns an INSERT ... VALUES run with many rows into one multi-row INSERT."""
    with conn.cursor() as cur:
        cur.executemany(sql, rows)

