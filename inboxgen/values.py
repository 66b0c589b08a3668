"""Value conversions the generated modules use at the driver boundary (part of the contract
committed modules import, with descriptor.py).

SQLite keeps the time roles as text in one fixed UTC format, `YYYY-MM-DD HH:MM:SS.ffffff`, so
text order is time order (and a `CURRENT_TIMESTAMP` default, which lacks the fraction, still
sorts correctly against it). Times handed to inboxgen must be timezone-aware.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import uuid as _uuid
from collections.abc import Awaitable, Mapping, Sequence, Set
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

import msgspec

from inboxgen.errors import WrongPayload

if TYPE_CHECKING:
    from psycopg.types.json import Jsonb
    from pymysql.cursors import Cursor

UTC = _dt.UTC
# The lowest id (or priority) a claim starting at `from_id` (`from_priority`) can be given:
# None there means from the head.
LOWEST_ID = -(2**63)
# The lowest uuid, for a table whose id is one (PostgreSQL's uuid sorts as its number).
LOWEST_UUID = _uuid.UUID(int=0)
# The earliest due time a claim starting at `from_retry_after` can be given (None: the head);
# MySQL/MariaDB's DATETIME starts at year 1000.
EARLIEST = _dt.datetime(1000, 1, 1, tzinfo=_dt.UTC)


# What claim() binds for its start where it is given none: from the head.
FROM_THE_HEAD: dict[str, Any] = {"from_id": LOWEST_ID, "from_priority": LOWEST_ID,
                                 "from_retry_after": EARLIEST}
# The same for a table whose id is a uuid.
FROM_THE_HEAD_UUID: dict[str, Any] = {**FROM_THE_HEAD, "from_id": LOWEST_UUID}


def lowest_or(value: int | None) -> int:
    """A claim's start at a priority; None: from the head."""
    return LOWEST_ID if value is None else value


def earliest_or(value: _dt.datetime | None) -> _dt.datetime:
    """A claim's start at a due time; None: from the head."""
    return EARLIEST if value is None else value
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


def at_most(limit: int, *caps: int | None) -> int:
    """`limit`, or the least of `caps` (None: no cap) where that is less."""
    return min([limit, *(c for c in caps if c is not None)])


class KeyTurns:
    """Where the fair claims of one queue (and group) in this process stopped walking the key's
    values: the next claim walks on from the first value after `after` (None: from the first)."""

    def __init__(self) -> None:
        self.after: Any = None
        # The last walk passed over keys without a due row and stopped before the last key:
        # a claim that took nothing may find rows further on at once.
        self.passed_over = False

    def walked(self, rows: Sequence[Sequence[Any]], limit: int) -> list[tuple[Any, ...]]:
        """The rows of a fair CLAIM without its last column, the row's rank in its key (0: a
        key walked without a due row, whose row is left out). A walk of `limit` keys stopped at
        its last; a shorter one found the last key, and the next starts from the first."""
        walked = [row[-3] for row in rows if row[-1] <= 1]
        self.after = walked[-1] if len(walked) >= limit else None
        self.passed_over = self.after is not None and any(row[-1] == 0 for row in rows)
        return [tuple(row[:-1]) for row in rows if row[-1] > 0]

    # A weighted walk (weights_table) keeps where the last claim left a key's turn unfinished:
    # the next starts again at key `resume`, of whose turn `spent` rows were taken.
    resume: Any = None
    spent = 0

    def weighted_walk(self, rows: Sequence[Sequence[Any]], limit: int) -> list[tuple[Any, ...]]:
        """The rows of a weighted fair CLAIM without its last two columns (the row's rank in
        its key, 0 for a key walked without a due row; the key's weight), the key just before
        them. They come in turns (a key of weight w has w rows in each), and the claim takes
        the first `limit`. Where the last one taken leaves its key's turn unfinished (and the
        claim took `limit`), the next claim walks from that key again, with what is left of its
        turn; where it ends a turn, from the key after it; where every key walked had its turn
        and more, as walked()."""
        walk: dict[Any, None] = {}  # the keys walked, in order (each first comes in its turn)
        last = None
        taken = 0
        for row in rows:
            walk.setdefault(row[-4])
            if row[-2] > 0 and taken < limit:
                taken += 1
                last = row
        keys = list(walk)
        after, resume, spent = (keys[-1] if len(keys) >= limit else None), None, 0
        if last is not None:
            key, rank, weight = last[-4], int(last[-2]), int(last[-1])
            done = rank + (self.spent if key == self.resume else 0)
            # A claim that took fewer rows than `limit` took every row its walk offered in
            # the key's turn: the turn is over, however many of it the key had due.
            if done < weight and taken == limit:  # more of its turn to take
                at = keys.index(key)
                after, resume, spent = keys[at - 1] if at else self.after, key, done
            elif done <= weight:  # its turn is over: the next claim walks on after it
                after = key
        self.passed_over = after is not None and any(row[-2] == 0 for row in rows)
        self.after, self.resume, self.spent = after, resume, spent
        return [tuple(row[:-2]) for row in rows if row[-2] > 0]


_KEY_TURNS: dict[tuple[str, Any], KeyTurns] = {}


def key_turns(claim: str, group: Any) -> KeyTurns:
    """The KeyTurns of the fair claim statement `claim` (of `group`) in this process."""
    return _KEY_TURNS.setdefault((claim, group), KeyTurns())


def within_limits(rows: Sequence[Sequence[Any]], concurrency: int | None,
                  key_concurrency: int | None, rate: int | None = None,
                  rate_per_key: bool = False) -> list[tuple[Any, ...]]:
    """The rows a limited claim keeps, in claim order, without the four columns CLAIM puts
    last: the queue's jobs in work, the claims of the rate's window (of the row's key, with
    `rate_per_key`), the row's key and that key's jobs in work (NULL for a limit the spec
    does not set). CLAIM read them under the claim turn, so the counts stand until its commit;
    this adds the rows kept before each one."""
    kept: list[tuple[Any, ...]] = []
    in_work_of: dict[Any, int] = {}
    claims_of: dict[Any, int] = {}
    for row in rows:
        *claimed, in_work, recent, key, key_in_work = row
        if concurrency is not None and int(in_work) + len(kept) >= concurrency:
            break
        if rate is not None and not rate_per_key and int(recent) + len(kept) >= rate:
            break
        if rate is not None and rate_per_key and claims_of.get(key, int(recent)) >= rate:
            continue
        if key_concurrency is not None and \
                in_work_of.get(key, int(key_in_work)) >= key_concurrency:
            continue
        if rate is not None and rate_per_key:
            claims_of[key] = claims_of.get(key, int(recent)) + 1
        if key_concurrency is not None:
            in_work_of[key] = in_work_of.get(key, int(key_in_work)) + 1
        kept.append(tuple(claimed))
    return kept


def _utc(value: _dt.datetime) -> _dt.datetime:
    if value.tzinfo is None:
        raise ValueError(f"inboxgen needs timezone-aware datetimes, got naive {value!r}")
    return value.astimezone(UTC)


def jsonb_or_none(value: Any) -> Jsonb | None:
    """A value for a PostgreSQL jsonb (json) column the runtime writes (a result, progress);
    None stays SQL NULL."""
    return None if value is None else _jsonb()(value, dumps=json_text)


def parsed_json(value: Any) -> Any:
    """A JSON column as the drivers return it, parsed: psycopg parses jsonb itself, PyMySQL,
    asyncmy and sqlite3 give its text."""
    if isinstance(value, str | bytes):
        return msgspec.json.decode(value)
    return value


def typed_result(value: Any, type_: Any) -> Any:
    """A result column typed as class `type_`, as state() returns it: an instance of the class,
    or, for JSON the class refuses (written before the class changed), the parsed JSON, so a
    job's state is always readable."""
    if value is None:
        return None
    try:
        if isinstance(value, str | bytes):
            return msgspec.json.decode(value, type=type_)
        return msgspec.convert(value, type=type_)
    except msgspec.ValidationError:
        return parsed_json(value)


def fitted_result(value: Any, type_: Any) -> Any:
    """A handler's result as the ack writes it where the spec types the result column: an
    instance of `type_`, or a value that converts to one as its JSON would decode (a dict of
    the fields, another class with them). Raises TypeError saying why it does not fit."""
    with contextlib.suppress(TypeError):  # a TypedDict takes no isinstance()
        if isinstance(value, type_):
            return value
    try:
        return msgspec.convert(msgspec.to_builtins(value), type=type_)
    except (msgspec.ValidationError, TypeError) as err:
        raise TypeError(f"the handler's result {value!r:.200} does not fit the result type "
                        f"{type_.__module__}.{type_.__qualname__}: {err}") from None


def clipped(text: str | None, limit: int) -> str | None:
    """A failure's text as an error column keeps it: at most `limit` characters (its head:
    the type and message come first), NUL written out (PostgreSQL's text holds none)."""
    if text is None:
        return None
    text = text.replace("\x00", "\\x00")
    return text if len(text) <= limit else text[:limit - 3] + "..."


def sqlite_time(value: _dt.datetime) -> str:
    return _utc(value).strftime(SQLITE_TIME_FORMAT)


def sqlite_second(value: _dt.datetime) -> str:
    """A claim's start at a due time, as text at or before every text of that time: its whole
    second. A time's text may end in its milliseconds (SQLite's strftime('%f')) or its
    microseconds (sqlite_time), and the second alone sorts before both, so a claim from this
    start reads again the rows of that second (the rows in work at most) rather than miss one
    written the other way."""
    return _utc(value).strftime("%Y-%m-%d %H:%M:%S")


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


# -- a NewRow's JSON payload, checked at the enqueue --------------------------------------------
# The enqueue functions encode a JSON payload through these, given the module's TABLE and, for a
# typed payload, its class: a value JSON cannot encode, or whose JSON the class refuses as the
# worker's decode_payload() would (which could only dead-letter the job), raises WrongPayload
# before anything is written. The check decodes what was encoded, as decode_payload() decodes the
# column: json.decode with the type from text and bytes, msgspec.convert of the parsed JSON where
# psycopg parses a JSON/JSONB column.


def payload_bytes(value: Any, table: str, type_: Any = None) -> bytes:
    """A JSON payload for a bytes column (UTF-8 JSON). `type_` is the class the payload is
    typed as, or None (any JSON); typed Any, as mypy takes no TypedDict for a `type`."""
    data = _payload_json(value, table)
    if type_ is not None:
        _check(table, type_, msgspec.json.decode, data)
    return data


def payload_text(value: Any, table: str, type_: Any = None) -> str:
    """A JSON payload for a text column, or a MySQL/MariaDB JSON column."""
    return payload_bytes(value, table, type_).decode()


def payload_jsonb(value: Any, table: str, type_: Any = None) -> Jsonb:
    """A JSON payload for a PostgreSQL JSON/JSONB column, bound as psycopg's Jsonb (so, like
    any jsonb, holding no NUL character: PostgreSQL would refuse the statement and abort the
    caller's transaction)."""
    data = _payload_json(value, table)
    if b"\\u0000" in data:
        where = _nul_path(msgspec.json.decode(data))
        if where is not None:
            raise WrongPayload(f"{table}: the payload cannot be stored as jsonb, which holds no "
                               f"NUL character (\\u0000) - at `{where}`")
    if type_ is not None:
        _check(table, type_, _convert_parsed, data)
    return _jsonb()(data.decode(), dumps=_as_is)


def _as_is(text: str) -> str:
    return text


_JSONB: list[type[Jsonb]] = []  # psycopg's Jsonb, imported at the first use (an import
# statement run at each call costs more than the check)


def _jsonb() -> type[Jsonb]:
    if not _JSONB:
        from psycopg.types.json import Jsonb  # a PostgreSQL module's: psycopg is there

        _JSONB.append(Jsonb)
    return _JSONB[0]


def _convert_parsed(data: bytes, type: Any) -> Any:  # noqa: A002 (msgspec's name)
    return msgspec.convert(msgspec.json.decode(data), type=type)


def _payload_json(value: Any, table: str) -> bytes:
    try:
        return msgspec.json.encode(value)
    except (TypeError, ValueError, OverflowError) as err:
        where = _unencodable_path(value, "$")
        at = "" if where is None else f" - at `{where}`"
        raise WrongPayload(f"{table}: the payload cannot be encoded as JSON: {err}{at}") from err


def _check(table: str, type_: Any, decode: Any, data: bytes) -> None:
    try:
        decode(data, type=type_)
    except msgspec.ValidationError as err:
        name = f"{type_.__module__}.{getattr(type_, '__qualname__', type_)}"
        raise WrongPayload(f"{table}: the payload is not a {name}: {err}") from err


def _encodes(value: Any) -> bool:
    try:
        msgspec.json.encode(value)
    except (TypeError, ValueError, OverflowError):
        return False
    return True


def _step(path: str, key: object) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    if isinstance(key, str) and key.isidentifier():
        return f"{path}.{key}"
    return f"{path}[{key!r}]"


def _parts(value: Any) -> list[tuple[object, Any]] | None:
    """The (key, value) pairs of a container msgspec encodes item by item; None for a leaf."""
    if isinstance(value, Mapping):
        return list(value.items())
    if isinstance(value, list | tuple | Set):
        return list(enumerate(value))
    if isinstance(value, msgspec.Struct):
        return [(f, getattr(value, f)) for f in value.__struct_fields__]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value)]
    fields = getattr(type(value), "__attrs_attrs__", None)
    if fields is not None:
        return [(f.name, getattr(value, f.name)) for f in fields]
    return None


def _unencodable_path(value: Any, path: str) -> str | None:
    """Where in `value` (which does not encode) the first part that does not encode is, as
    msgspec writes a path (`$.items[2].when`); only run once an encoding failed."""
    parts = _parts(value)
    if parts is None:
        return path
    for key, item in parts:
        if not _encodes(item):
            return _unencodable_path(item, _step(path, key))
        if isinstance(value, Mapping) and not _encodes({key: None}):
            return path  # a key JSON cannot hold
    return path


def _nul_path(value: Any, path: str = "$") -> str | None:
    """Where a NUL character is in parsed JSON (a key or a string), or None."""
    if isinstance(value, str):
        return path if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            if "\x00" in key:
                return path
            found = _nul_path(item, _step(path, key))
            if found is not None:
                return found
    if isinstance(value, list):
        for i, item in enumerate(value):
            found = _nul_path(item, _step(path, i))
            if found is not None:
                return found
    return None


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
