"""Queue tables on real databases: specs and DDL, recording connections, raw views of rows.

Everything here runs on real databases: a fresh PostgreSQL database, a fresh MariaDB database (a
``mysql://`` URL on the session's ``mariadb_server``) or a SQLite file; the ``queue`` fixture of
conftest.py makes them. Time is explicit: tests pass ``now`` (``T0`` plus some seconds) instead
of waiting for the clock, and every lease expiry is a whole second (MySQL's lease column is a
DATETIME without fractions).

- ``Layout`` describes a test table ``jobs`` (claim form, group, FIFO, dead letters, unique key,
  headers, the column each role is bound to) and renders its spec and DDL for a dialect;
- a shape is a Layout or an example's name: ``open_queue`` generates its module (or loads one of
  ``generated_examples/``, or builds the example's twin on another dialect) and creates its tables;
- ``Db`` is a database of any dialect as another process sees it: SQL text, rows as tuples;
- ``Queue`` wraps a generated module and its database: connections that record every SQL text
  they execute, form-independent ``claim`` / ``settle`` helpers that find each role's attribute
  through the module's ``DESCRIPTOR.role_attrs``, and a raw ``rows`` view read on a fresh
  connection (what another process would see).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import importlib
import importlib.util
import inspect
import itertools
import json
import re
import sqlite3
import sys
import textwrap
import threading
import time
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs
import psycopg
import pymysql
import pymysql.cursors
import pytest
from genutil import build_module, ddl_of, example_parts, import_path, make_project
from psycopg.rows import dict_row
from pymysql.constants import CLIENT

from inboxgen import values
from inboxgen.runtime.backends import mysql_connect_args

REPO = Path(__file__).resolve().parents[1]
UTC = dt.UTC
T0 = dt.datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC)
# What claim() binds where CLAIM takes a start and the claim starts at the head: for tests that
# run a claim statement themselves.
FROM_THE_HEAD = values.FROM_THE_HEAD
LEASE = 30  # seconds
TIME_ROLES = ("retry_after", "processed_at", "locked_until", "enqueued_at")
# What the runtime's MySQL sessions run (claims at READ COMMITTED, times as naive UTC), and a lock
# wait that fails within seconds instead of hanging the suite. Connections are opened with
# CLIENT.FOUND_ROWS, as the worker's: an UPDATE reports the rows it matched.
MYSQL_SESSION = ("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
                 "SET SESSION time_zone = '+00:00'",
                 "SET SESSION innodb_lock_wait_timeout = 5")


def at(seconds: float) -> dt.datetime:
    """T0 moved by `seconds`."""
    return T0 + dt.timedelta(seconds=seconds)


# -- connections that remember what they ran ---------------------------------------------------


class RecordingCursor(psycopg.Cursor[Any]):
    """Appends the SQL of every statement it runs to its connection's `executed` list."""

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        executed(self.connection).append(str(query))
        return super().execute(query, params, **kwargs)

    def executemany(self, query: Any, params_seq: Iterable[Any], **kwargs: Any) -> None:
        params_seq = list(params_seq)
        executed(self.connection).extend(str(query) for _ in params_seq)
        super().executemany(query, params_seq, **kwargs)


class RecordingAsyncCursor(psycopg.AsyncCursor[Any]):
    async def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        executed(self.connection).append(str(query))
        return await super().execute(query, params, **kwargs)

    async def executemany(self, query: Any, params_seq: Iterable[Any], **kwargs: Any) -> None:
        params_seq = list(params_seq)
        executed(self.connection).extend(str(query) for _ in params_seq)
        await super().executemany(query, params_seq, **kwargs)


class RecordingSqlite(sqlite3.Connection):
    """A sqlite3 connection that records the SQL of every statement it runs in `executed`."""

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        executed(self).append(sql)
        return super().execute(sql, parameters)

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> sqlite3.Cursor:
        parameters = list(parameters)
        executed(self).extend(sql for _ in parameters)
        return super().executemany(sql, parameters)


class RecordingMySQLCursor(pymysql.cursors.Cursor):
    """Appends the SQL (as passed, before PyMySQL binds it) of every statement it runs to its
    connection's `executed` list; an executemany is one entry. What actually went to the server
    is in `sent` (see RecordingMySQL)."""

    _many = False

    def execute(self, query: Any, args: Any = None) -> int:
        if not self._many:
            executed(self.connection).append(str(query))
        return super().execute(query, args)

    def executemany(self, query: Any, args: Any) -> int | None:
        executed(self.connection).append(str(query))
        self._many = True
        try:
            return super().executemany(query, args)
        finally:
            self._many = False


class RecordingMySQL(pymysql.connections.Connection):
    """A PyMySQL connection that records every query text it sends to the server in `sent`
    (bound, one entry per statement on the wire; COMMIT and ROLLBACK are not queries)."""

    def query(self, sql: Any, unbuffered: bool = False) -> int:
        sent(self).append(bytes(sql).decode() if isinstance(sql, bytes | bytearray) else sql)
        result: int = super().query(sql, unbuffered)
        return result


def executed(conn: Any) -> list[str]:
    """The SQL texts a recording connection has executed so far, oldest first."""
    log: list[str] = conn.__dict__.setdefault("executed", [])
    return log


def sent(conn: Any) -> list[str]:
    """The bound query texts a RecordingMySQL connection sent to the server, oldest first."""
    log: list[str] = conn.__dict__.setdefault("sent", [])
    return log


def mysql_connect(target: str, *, factory: Any = pymysql.connections.Connection,
                  **kwargs: Any) -> Any:
    """A PyMySQL connection to a mysql:// URL, its session set up as the runtime's."""
    conn = factory(**mysql_connect_args(target), client_flag=CLIENT.FOUND_ROWS, **kwargs)
    with pymysql.cursors.Cursor(conn) as cur:  # not a recording cursor: setup is not the test's
        for sql in MYSQL_SESSION:
            cur.execute(sql)
    return conn


def mysql_statements(ddl: str) -> list[str]:
    """DDL split into statements (MariaDB has no transactional DDL: one statement at a time);
    pieces holding nothing but comments are dropped."""
    def code(piece: str) -> bool:
        return any(line.strip() and not line.strip().startswith("--")
                   for line in piece.splitlines())
    return [piece.strip() for piece in ddl.split(";") if code(piece)]


# -- test tables ---------------------------------------------------------------------------------


# The column each role is bound to, unless a Layout names another.
DEFAULT_NAMES = {"id": "id", "group": "grp", "priority": "priority", "retry_after": "retry_after",
                 "attempt": "attempt", "processed_at": "processed_at",
                 "locked_until": "locked_until", "headers": "headers", "payload": "payload",
                 "error": "last_error", "result": "result",
                 "progress": "progress", "enqueued_at": "enqueued_at", "parents": "parents"}
_PLAIN_NAME = re.compile(r"[a-z_][a-z0-9_]*")
_RESERVED = {"group", "order", "key", "limit", "select", "from", "where", "index", "values"}
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def ident(name: str, dialect: str) -> str:
    """A column or table name as DDL writes it: plain where it can be, else quoted."""
    if _PLAIN_NAME.fullmatch(name) and name not in _RESERVED:
        return name
    q = "`" if dialect == "mysql" else '"'
    return f"{q}{name.replace(q, q + q)}{q}"


def toml_key(name: str) -> str:
    return name if _BARE_KEY.fullmatch(name) else json.dumps(name)


def spec_toml(table: str, columns: Mapping[str, str], *, dialect: str = "postgres",
              runtime: Mapping[str, Any] | None = None,
              dead_letter: Mapping[str, str] | None = None,
              flow: Mapping[str, Any] | None = None, **options: Any) -> str:
    """A spec's text: the table and dialect, the top-level `options` (claim, advisory_key, fifo,
    count_crashes, unique...), each column's role, and the [runtime] and [dead_letter] tables.

    `columns` maps a column to its role as "role", "role generated" (a value the database
    fills), "role <codec>" (the payload's codec: json, text or bytes) or "role type=M:C" (the
    payload's or the result's class).
    """
    lines = [f"table = {json.dumps(table)}", f"dialect = {json.dumps(dialect)}",
             *(f"{k} = {json.dumps(v)}" for k, v in options.items()), "", "[columns]"]
    for name, how in columns.items():
        role, *extra = how.split()
        fields = [f'role = "{role}"', *("generated = true" if e == "generated" else
                                         f'type = "{e.removeprefix("type=")}"'
                                         if e.startswith("type=") else
                                         f'codec = "{e}"' for e in extra)]
        lines.append(f"{toml_key(name)} = " + (f"{{ {', '.join(fields)} }}" if extra
                                                else f'"{role}"'))
    for section, settings in (("runtime", runtime), ("dead_letter", dead_letter),
                              ("flow", flow)):
        if settings:
            lines += ["", f"[{section}]", *(f"{k} = {json.dumps(v)}" for k, v in settings.items())]
    return "\n".join(lines) + "\n"


# Column types by dialect, for a table written once for every dialect (`typed`). MySQL: indexed
# text is VARCHAR(191) (utf8mb4), and a lease expiry a DATETIME without fractions (the token, a
# whole second, must hold in it).
TYPES = {"id": {"postgres": "BIGSERIAL PRIMARY KEY", "sqlite": "INTEGER PRIMARY KEY",
                "mysql": "BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY"},
         "text": {"postgres": "TEXT", "sqlite": "TEXT", "mysql": "VARCHAR(191)"},
         "time": {"postgres": "TIMESTAMPTZ", "sqlite": "TEXT", "mysql": "DATETIME(6)"},
         "lease": {"postgres": "TIMESTAMPTZ", "sqlite": "TEXT", "mysql": "DATETIME"},
         "bytes": {"postgres": "BYTEA", "sqlite": "BLOB", "mysql": "BLOB"},
         "json": {"postgres": "JSONB", "sqlite": "TEXT", "mysql": "JSON"}}

# A default that fills a time column with the database's time of the insert, as the time roles
# hold it (MySQL: naive UTC; SQLite: UTC text).
NOW_DEFAULT = {"postgres": "now()", "mysql": "(UTC_TIMESTAMP(6))",
               "sqlite": "(strftime('%Y-%m-%d %H:%M:%f', 'now'))"}


def typed(ddl: str, dialect: str) -> str:
    """DDL whose {id}, {text}, {time}, {lease}, {bytes} and {json} are the dialect's types."""
    base = dialect.split("+")[0]
    return textwrap.dedent(ddl).format(**{k: v[base] for k, v in TYPES.items()})


def on_dialect(spec: str, dialect: str) -> str:
    """A spec written for one dialect, for another (its `dialect = ...` line)."""
    base = dialect.split("+")[0]
    lines = [f'dialect = "{base}"' if line.strip().startswith("dialect =") else line
             for line in textwrap.dedent(spec).splitlines()]
    assert any(line.startswith("dialect =") for line in lines), spec
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Layout:
    """A queue table `jobs` with id, priority, retry_after, attempt, account (data), payload (text).

    `dead` is "group" (dead letters move to group "dead") or "table" (to `jobs_dead`); either
    comes with max_attempts = 3. With `unique`, the unique key is `account` (and, with
    `unique_group`, the group column, when there is one). `headers` adds a nullable JSON
    headers column.

    `names` binds roles to other columns than DEFAULT_NAMES: role -> column name, as the
    database spells it (names that are not plain lower-case identifiers, or are SQL keywords,
    are quoted in the DDL).
    """

    form: str = "lease"  # row_lock, lease or advisory
    group: bool = False
    fifo: bool = False
    processed: bool = True  # a processed_at column: finish marks the row instead of deleting it
    dead: str | None = None
    unique: bool = False
    unique_group: bool = True  # the unique key includes the group column, where there is one
    key: str = "account-{account}"  # the advisory key template
    count_crashes: bool = False  # row lock: the claim counts the attempt in its own transaction
    headers: bool = False
    pauses: bool = False  # [flow] pauses = "jobs_pauses"
    # [flow] limits: at most this many jobs in work, and of one `account`.
    concurrency: int | None = None
    key_concurrency: int | None = None
    # [flow] rate: at most rate[0] claims in any rate[1] seconds, recorded in jobs_claims.
    rate: tuple[int, float] | None = None
    rate_per_key: bool = False  # the rate per account (jobs_claims gains claim_key)
    fair: bool = False  # [flow] fair: claims take turns across accounts
    weights: bool = False  # with fair: weights_table = "jobs_weights" (an account's turns)
    error: str | None = None  # the type of a nullable column bound to role error ("TEXT")
    result: str | None = None  # the type of a nullable column bound to role result ("JSON")
    result_type: str | None = None  # the result's class ("module:Class"), where it has one
    progress: str | None = None  # the type of a nullable column bound to role progress
    enqueued_at: bool = False  # a column the database fills with the insert's time
    # `after = "jobs_after"`: jobs that wait for others (a parents column; needs `dead`).
    after: bool = False
    # PostgreSQL: the table partitioned by a hash of its id in this many partitions (each
    # with the storage settings, which the partitioned table refuses); 0: one table.
    partitions: int = 0
    names: Mapping[str, str] = field(default_factory=dict, hash=False)

    def name(self, role: str) -> str:
        """The column bound to `role`."""
        return self.names.get(role, DEFAULT_NAMES[role])

    def role_columns(self, dialect: str) -> list[tuple[str | None, str, str]]:
        """(role or None for a data column, column name, column type) of each column.

        MySQL: group and account are VARCHAR(191) (they are indexed, in utf8mb4), times are
        DATETIME(6), except locked_until, a DATETIME without fractions: the lease token (a whole
        second) must hold in it."""
        types = {k: v[dialect] for k, v in TYPES.items()}
        time, text = types["time"], types["text"]
        cols: list[tuple[str | None, str]] = [("id", types["id"])]
        if self.group:
            cols.append(("group", f"{text} NOT NULL"))
        cols += [("priority", "INTEGER NOT NULL"), ("retry_after", f"{time} NOT NULL"),
                 ("attempt", "INTEGER NOT NULL DEFAULT 1")]
        if self.processed:
            cols.append(("processed_at", time))
        if self.form == "lease":
            cols.append(("locked_until", types["lease"]))
        if self.headers:
            cols.append(("headers", types["json"]))
        if self.error is not None:
            cols.append(("error", self.error))
        if self.result is not None:
            cols.append(("result", self.result))
        if self.progress is not None:
            cols.append(("progress", self.progress))
        if self.enqueued_at:
            cols.append(("enqueued_at", f"{time} NOT NULL DEFAULT {NOW_DEFAULT[dialect]}"))
        if self.after:
            cols.append(("parents", "INTEGER NOT NULL DEFAULT 0"))
        cols += [(None, f"{text} NOT NULL"), ("payload", "TEXT NOT NULL")]
        return [(role, self.name(role) if role else "account", sql) for role, sql in cols]

    def ddl(self, dialect: str) -> str:
        cols = self.role_columns(dialect)
        # The table settings the build asks for on PostgreSQL (see checks.QUEUE_SETTINGS).
        options = {"mysql": " DEFAULT CHARSET=utf8mb4",
                   "postgres": " WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0, "
                               "autovacuum_vacuum_threshold = 5000, "
                               "autovacuum_vacuum_insert_scale_factor = 0)"}.get(dialect, "")

        def names(*roles: str) -> str:
            return ", ".join(ident(self.name(r) if r != "account" else r, dialect)
                             for r in roles)

        body = ",\n".join(f"    {ident(name, dialect)} {sql}" for _, name, sql in cols)
        # The claim index the build asks for: over unfinished rows only where finished rows are
        # kept (partial; on MySQL keyed by processed_at after the group, but for a FIFO lease).
        key = [*(["group"] if self.group else []), "priority", "retry_after", "id"]
        where = ""
        if self.processed and dialect == "mysql":
            if not (self.fifo and self.form == "lease"):
                key.insert(1 if self.group else 0, "processed_at")
        elif self.processed:
            where = f" WHERE {names('processed_at')} IS NULL"
        if self.partitions:
            assert dialect == "postgres", "partitions: PostgreSQL's tables"
            out = [f"CREATE TABLE jobs (\n{body}\n) PARTITION BY HASH ({names('id')});"]
            out += [f"CREATE TABLE jobs_p{n} PARTITION OF jobs FOR VALUES WITH (MODULUS "
                    f"{self.partitions}, REMAINDER {n}){options};"
                    for n in range(self.partitions)]
        else:
            out = [f"CREATE TABLE jobs (\n{body}\n){options};"]
        out.append(f"CREATE INDEX jobs_claim ON jobs ({names(*key)}){where};")
        if self.unique:
            grouped = ["group"] if self.group and self.unique_group else []
            out.append(f"CREATE UNIQUE INDEX jobs_once ON jobs ({names('account', *grouped)});")
        if self.dead == "table":
            dead_cols = [(name, "BIGINT PRIMARY KEY" if role == "id" else
                          "INTEGER NOT NULL" if role == "attempt" else sql)
                         for role, name, sql in cols]
            body = ",\n".join(f"    {ident(name, dialect)} {sql}" for name, sql in dead_cols)
            out.append(f"CREATE TABLE jobs_dead (\n{body}\n){options};")
        if self.pauses:
            text = TYPES["text"][dialect]
            out.append(f"CREATE TABLE jobs_pauses (queue {text} NOT NULL, paused_group {text});")
        if self.after:
            out.append(f"CREATE TABLE jobs_after (job_id BIGINT NOT NULL, after_id BIGINT NOT "
                       f"NULL, on_failure {TYPES['text'][dialect]} NOT NULL, "
                       f"PRIMARY KEY (job_id, after_id));")
        # The indexes a limited claim counts the jobs in work through.
        leased = self.form == "lease"  # elsewhere the limits are seats: no index counts them
        if leased and (self.concurrency is not None or self.key_concurrency is not None):
            out.append(f"CREATE INDEX jobs_in_work ON jobs ({names('locked_until')});")
        if leased and self.key_concurrency is not None:
            out.append(f"CREATE INDEX jobs_account_in_work ON jobs "
                       f"({names('account', 'locked_until')});")
        if self.fair or (leased and self.key_concurrency is not None):
            # The walk over the accounts (a fair claim's, and a key-limited claim's behind a
            # key at its limit): the group, the account and the claim order.
            walk = [*(["group"] if self.group else []), "account", "priority", "retry_after", "id"]
            out.append(f"CREATE INDEX jobs_account ON jobs ({names(*walk)});")
        if self.weights:
            text = TYPES["text"][dialect]
            out.append(f"CREATE TABLE jobs_weights (queue {text} NOT NULL, fair_key {text} "
                       f"NOT NULL, weight INTEGER NOT NULL, PRIMARY KEY (queue, fair_key));")
        if self.rate is not None:
            text, time = TYPES["text"][dialect], TYPES["time"][dialect]
            key = f", claim_key {text} NOT NULL" if self.rate_per_key else ""
            out += [f"CREATE TABLE jobs_claims (queue {text} NOT NULL, "
                    f"claimed_at {time} NOT NULL{key});",
                    "CREATE INDEX jobs_claims_window ON jobs_claims (queue, "
                    f"{'claim_key, ' if self.rate_per_key else ''}claimed_at);"]
        return "\n".join(out) + "\n"

    def spec(self, dialect: str) -> str:
        options: dict[str, Any] = {}
        if self.form == "advisory":
            options.update(claim="advisory", advisory_key=self.key)
        if self.fifo:
            options["fifo"] = True
        if self.count_crashes:
            options["count_crashes"] = True
        if self.after:
            options["after"] = "jobs_after"
        if self.unique:
            options["unique"] = ["account"] + ([self.name("group")] if self.group
                                               and self.unique_group else [])
        roles = ["id generated", *(["group"] if self.group else []), "priority", "retry_after",
                 "attempt generated", *(["processed_at"] if self.processed else []),
                 *(["locked_until"] if self.form == "lease" else []),
                 *(["headers"] if self.headers else []),
                 *(["error"] if self.error is not None else []),
                 *([f"result type={self.result_type}" if self.result_type else "result"]
                   if self.result is not None else []),
                 *(["progress"] if self.progress is not None else []),
                 *(["enqueued_at"] if self.enqueued_at else []),
                 *(["parents"] if self.after else []), "payload text"]
        return spec_toml("jobs", {self.name(r.split()[0]): r for r in roles}, dialect=dialect,
                         runtime={"lease": LEASE, **({"max_attempts": 3} if self.dead else {})},
                         dead_letter=None if not self.dead else
                         {"group": "dead"} if self.dead == "group" else {"table": "jobs_dead"},
                         flow=self.flow() or None, **options)

    def flow(self) -> dict[str, Any]:
        flow: dict[str, Any] = {"pauses": "jobs_pauses"} if self.pauses else {}
        if self.concurrency is not None:
            flow["concurrency"] = self.concurrency
        if self.key_concurrency is not None:
            flow.update(key="account", key_concurrency=self.key_concurrency)
        if self.rate is not None:
            flow.update(rate=self.rate[0], rate_seconds=self.rate[1], rate_table="jobs_claims")
        if self.rate_per_key:
            flow.update(key="account", rate_per_key=True)
        if self.fair:
            flow.update(key="account", fair=True)
        if self.weights:
            flow["weights_table"] = "jobs_weights"
        return flow


# -- a database of any dialect, as another process sees it -------------------------------------


SQLITE_TIME = "%Y-%m-%d %H:%M:%S.%f"  # the fixed text format of time roles on SQLite


def sqlite_db(path: Path, ddl: str) -> sqlite3.Connection:
    """Create the tables of `ddl` in a SQLite file; returns an autocommit connection to it."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    conn.executescript(ddl)
    return conn


def pg_exec(dsn: str, sql: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql)


def pg_rows(dsn: str, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    """Rows as another process sees them (a fresh connection)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


def pg_advisory_locks(dsn: str) -> int:
    """How many advisory locks the sessions of the database hold (every table's)."""
    ((n,),) = pg_rows(dsn, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                           "AND database = (SELECT oid FROM pg_database "
                           "WHERE datname = current_database())")
    return int(n)


def mariadb_pages(cur: Any, statement: str, bound: dict[str, Any], table: str = "jobs") -> int:
    """The pages of `table` one run of `statement` accessed (MariaDB's ANALYZE runs it: roll a
    locking one back after)."""
    return sum(int(t["r_engine_stats"].get("pages_accessed", 0))
               for t in mariadb_accesses(cur, statement, bound, table))


def mariadb_accesses(cur: Any, statement: str, bound: dict[str, Any],
                     table: str = "jobs") -> list[dict[str, Any]]:
    """How one run of `statement` read `table` (MariaDB's ANALYZE runs it): each access's
    entry of the plan (access_type, key, used_key_parts, r_engine_stats...)."""
    cur.execute("ANALYZE FORMAT=JSON " + statement, bound)
    (explained,) = cur.fetchone()
    tables = [t for t in _mariadb_tables(json.loads(explained)) if t["table_name"] == table]
    assert tables, explained
    return tables


def _mariadb_tables(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, list):
        return [t for item in node for t in _mariadb_tables(item)]
    if not isinstance(node, dict):
        return []
    # A table's own entry holds the tables of a derived table it materializes.
    here = [node["table"]] if isinstance(node.get("table"), dict) else []
    return here + [t for value in node.values() for t in _mariadb_tables(value)]


def pg_index_blocks_read(dsn: str, table: str) -> int:
    """The index blocks of `table` (its SQL name) read so far, as the server counts them once
    every session has reported its counts (a session reports as it ends, or once a second at
    most)."""
    seen = -1
    for _ in range(50):
        time.sleep(0.3)
        ((n,),) = pg_rows(dsn, "SELECT COALESCE(SUM(idx_blks_hit + idx_blks_read), 0) FROM "
                               f"pg_statio_user_indexes WHERE relid = '{table}'::regclass")
        if int(n) == seen:
            break
        seen = int(n)
    return seen


async def keys_left_once_dry(worker: Any, rows: Callable[[], list[dict[str, Any]]],
                             done: Callable[[list[dict[str, Any]]], bool],
                             keys: Callable[[], int], timeout: float = 30) -> int:
    """Start `worker`, serve until `done(rows())`, then until `keys()` (the keys some session
    holds) is 0, as it is once the worker has run dry; stop it and return `keys()` then."""
    await worker.start()
    try:
        deadline = asyncio.get_running_loop().time() + timeout

        def waiting() -> bool:
            return asyncio.get_running_loop().time() < deadline

        while waiting() and not done(await asyncio.to_thread(rows)):
            await asyncio.sleep(0.05)
        while waiting() and await asyncio.to_thread(keys):
            await asyncio.sleep(0.05)
        return await asyncio.to_thread(keys)
    finally:
        await worker.shutdown()


def sqlite_rows(path: Path, sql: str, params: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
    """Rows as another process sees them (a fresh connection)."""
    conn = sqlite3.connect(path, timeout=30)
    try:
        return conn.execute(sql, tuple(params)).fetchall()
    finally:
        conn.close()


def sqlite_time(value: dt.datetime) -> str:
    return value.astimezone(UTC).strftime(SQLITE_TIME)


def parse_sqlite_time(value: str) -> dt.datetime:
    return dt.datetime.strptime(value, SQLITE_TIME).replace(tzinfo=UTC)


@dataclass
class Db:
    """A fresh database: a SQLite file, or a database on the session's PostgreSQL or MariaDB."""

    dialect: str  # "sqlite", "postgres" or "mysql"
    database: str  # what Worker(database=...) takes: a path, a conninfo or a mysql:// URL
    mysql_args: dict[str, Any] = field(default_factory=dict)  # pymysql.connect() arguments

    @property
    def mysql(self) -> bool:
        return self.dialect == "mysql"

    @property
    def sqlite(self) -> bool:
        return self.dialect == "sqlite"

    @property
    def p(self) -> str:
        """The driver's positional placeholder."""
        return "?" if self.sqlite else "%s"

    def connect(self, *, autocommit: bool = False) -> Any:
        """A synchronous connection (sqlite3, psycopg or PyMySQL); MySQL sessions as the worker's
        own: READ COMMITTED, in UTC (so CURRENT_TIMESTAMP defaults are UTC too)."""
        if self.sqlite:
            return sqlite3.connect(self.database, timeout=30,
                                   isolation_level=None if autocommit else "")
        if not self.mysql:
            return psycopg.connect(self.database, autocommit=autocommit)
        conn = pymysql.connect(**self.mysql_args, autocommit=autocommit)
        with conn.cursor() as cur:
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            cur.execute("SET SESSION time_zone = '+00:00'")
        return conn

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]:
        """A connection whose work commits at the end of the block (rolled back on an error)."""
        conn = self.connect()
        try:
            yield conn
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
        finally:
            conn.close()

    def exec(self, sql: str) -> None:
        """Run SQL in autocommit; on MySQL statement by statement (DDL is not transactional, and
        PyMySQL runs one statement per call), split on ';'."""
        sql = textwrap.dedent(sql)
        if self.sqlite:
            sqlite_db(Path(self.database), sql).close()
            return
        if not self.mysql:
            pg_exec(self.database, sql)
            return
        conn = self.connect(autocommit=True)
        try:
            with conn.cursor() as cur:
                for statement in sql.split(";"):
                    if statement.strip():
                        cur.execute(statement)
        finally:
            conn.close()

    def rows(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        """Rows as another process sees them (a fresh connection). MySQL's DATETIME values come
        back naive (they hold UTC): they are returned aware, as PostgreSQL's timestamptz."""
        if self.sqlite:
            return sqlite_rows(Path(self.database), sql, params or ())
        if not self.mysql:
            return pg_rows(self.database, sql, params)
        conn = self.connect(autocommit=True)
        try:
            with conn.cursor() as cur:
                cur.execute(sql, params)
                found = cur.fetchall()
        finally:
            conn.close()
        return [tuple(v.replace(tzinfo=UTC) if isinstance(v, dt.datetime) and v.tzinfo is None
                      else v for v in row) for row in found]

    def execute(self, conn: Any, sql: str, params: Any = None) -> None:
        """One statement on a synchronous connection of the dialect's driver."""
        if self.mysql:
            with conn.cursor() as cur:
                cur.execute(sql, params)
        else:
            conn.execute(sql, params or ())

    # Time columns: SQLite keeps text in one UTC format, MySQL naive UTC DATETIMEs, PostgreSQL
    # timestamptz.

    def time_param(self, value: dt.datetime) -> Any:
        """An aware time as a statement's parameter for a time column."""
        if self.sqlite:
            return sqlite_time(value)
        return value.astimezone(UTC).replace(tzinfo=None) if self.mysql else value

    def stored_time(self, value: dt.datetime) -> Any:
        """An aware time as `rows()` returns it from a time column."""
        return sqlite_time(value) if self.sqlite else value.astimezone(UTC)

    def parse_time(self, value: Any) -> dt.datetime:
        """A time column's value from `rows()`, as an aware time."""
        return parse_sqlite_time(value) if self.sqlite else value  # type: ignore[no-any-return]


def json_value(value: Any) -> Any:
    """A JSON column's value: PostgreSQL's jsonb arrives decoded, MariaDB's JSON as text."""
    return json.loads(value) if isinstance(value, (str, bytes)) else value


# -- example queues on other dialects -------------------------------------------------------------


# Queue shapes on MySQL/MariaDB that the examples only ship for PostgreSQL or SQLite (mailer has
# its own, generated_examples/mailer_mariadb.py): the same columns and roles, in MySQL types.
MYSQL_CHAT_SPEC = spec_toml(
    "OutgoingMessages", {"MessageId": "id generated", "conversation": "group",
                         "retry_after": "retry_after", "attempt": "attempt generated",
                         "locked_until": "locked_until", "body": "payload text"},
    dialect="mysql", fifo=True, runtime={"lease": 30})
MYSQL_CHAT_DDL = """
    CREATE TABLE OutgoingMessages (
        MessageId BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
        conversation VARCHAR(191) NOT NULL,
        retry_after DATETIME(6) NOT NULL,
        attempt INT NOT NULL DEFAULT 1,
        locked_until DATETIME NULL,
        body TEXT NOT NULL,
        KEY outgoing_claim (conversation, retry_after, MessageId)
    );
"""
MYSQL_REPORTS_SPEC = spec_toml(
    "report_jobs", {"id": "id generated", "attempt": "attempt generated",
                    "locked_until": "locked_until", "payload": "payload bytes"},
    dialect="mysql", runtime={"lease": 60})
MYSQL_REPORTS_DDL = """
    CREATE TABLE report_jobs (
        id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
        attempt INT NOT NULL DEFAULT 1,
        locked_until DATETIME NULL,
        payload LONGBLOB NOT NULL
    );
"""
MYSQL_EMAILS_SPEC = spec_toml(
    "email_jobs", {"id": "id generated", "priority": "priority", "retry_after": "retry_after",
                   "attempt": "attempt generated", "processed_at": "processed_at",
                   "locked_until": "locked_until", "payload": "payload json"},
    dialect="mysql", unique=["order_id", "kind"], runtime={"max_attempts": 5},
    dead_letter={"table": "email_jobs_dead"})
MYSQL_EMAILS_DDL = """
    CREATE TABLE orders (
        id BIGINT NOT NULL PRIMARY KEY,
        email VARCHAR(191) NOT NULL
    );
    CREATE TABLE email_jobs (
        id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
        priority INT NOT NULL,
        retry_after DATETIME(6) NOT NULL,
        attempt INT NOT NULL DEFAULT 1,
        processed_at DATETIME(6) NULL,
        locked_until DATETIME NULL,
        order_id BIGINT NOT NULL,
        kind VARCHAR(191) NOT NULL,
        payload BLOB NOT NULL,
        UNIQUE KEY email_jobs_once (order_id, kind),
        KEY email_jobs_claim (priority, retry_after, id),
        CONSTRAINT email_jobs_order FOREIGN KEY (order_id) REFERENCES orders (id)
    );
    CREATE TABLE email_jobs_dead (
        id BIGINT NOT NULL PRIMARY KEY,
        priority INT NOT NULL,
        retry_after DATETIME(6) NOT NULL,
        attempt INT NOT NULL,
        processed_at DATETIME(6) NULL,
        locked_until DATETIME NULL,
        order_id BIGINT NOT NULL,
        kind VARCHAR(191) NOT NULL,
        payload BLOB NOT NULL
    );
"""


# -- a generated module on its database ----------------------------------------------------------


class Queue:
    """A generated module with the database its table lives in.

    `target` is the database (a conninfo, a mysql:// URL or a SQLite file), `database` what a
    Worker is given for it (the target, or a mysql+pymysql:// URL naming a driver), `db` the same
    database through plain connections (SQL text, rows as tuples)."""

    def __init__(self, mod: ModuleType, dialect: str, target: str, *, database: str | None = None,
                 mysql_args: dict[str, Any] | None = None) -> None:
        self.mod = mod
        self.dialect = dialect
        self.target = target
        self.database = database or target
        self.db = Db(dialect, self.database, mysql_args or {})
        self.pg, self.mysql = dialect == "postgres", dialect == "mysql"
        d = mod.DESCRIPTOR
        self.form: str = d.form
        self.count_crashes: bool = getattr(d, "count_crashes", False)
        self.roles: dict[str, str] = dict(d.roles)  # role -> column name
        self.role_attrs: dict[str, str] = dict(d.role_attrs)  # role -> ClaimedRow attribute
        self.id_attr = self.role_attrs["id"]
        self.group_attr = self.role_attrs.get("group")
        self.connections: list[Any] = []
        self._serial = itertools.count(1)
        self._reader: Any = None  # MySQL: the autocommit session rows() reads on

    @property
    def table(self) -> str:
        """The queue table as SQL spells it (schema-qualified, quoted)."""
        return self.table_sql()

    @property
    def id_column(self) -> str:
        """The id column, quoted."""
        return self.quote(self.roles["id"])

    @property
    def locks(self) -> bool:
        """Whether the module takes advisory keys by LOCK / UNLOCK statements (PostgreSQL and
        MySQL; the SQLite runtime keeps its keys in the process)."""
        return hasattr(self.mod, "lock")

    # connections

    def connect(self, *, autocommit: bool = False, time_zone: str | None = None) -> Any:
        """A new recording connection (psycopg, PyMySQL or sqlite3); closed at the end of the
        test.

        `time_zone` sets a PostgreSQL session's TimeZone (the test server's default is UTC); a
        MySQL session runs in '+00:00', as the runtime's.
        """
        conn: Any
        if self.mysql:
            # READ COMMITTED and UTC, as the runtime's sessions; lock waits end after 5 s.
            assert time_zone is None
            conn = mysql_connect(self.target, factory=RecordingMySQL, autocommit=autocommit,
                                 cursorclass=RecordingMySQLCursor)
        elif self.pg:
            # A statement that waits on a lock fails within seconds instead of hanging the suite.
            options = "-c lock_timeout=5s -c statement_timeout=20s"
            if time_zone:
                options += f" -c TimeZone={time_zone}"
            conn = psycopg.connect(self.target, autocommit=autocommit,
                                   cursor_factory=RecordingCursor, options=options)
        else:
            # As the runtime does: writes begin IMMEDIATE (the write lock up front, so two
            # writers never deadlock upgrading a read lock), on a WAL database (apply_ddl).
            # check_same_thread=False: concurrency tests hand each connection to one thread.
            conn = sqlite3.connect(self.target, timeout=5, factory=RecordingSqlite,
                                   isolation_level=None if autocommit else "IMMEDIATE",
                                   check_same_thread=False)
        self.connections.append(conn)
        return conn

    async def connect_async(self) -> psycopg.AsyncConnection[Any]:
        conn = await psycopg.AsyncConnection.connect(
            self.target, cursor_factory=RecordingAsyncCursor,
            options="-c lock_timeout=5s -c statement_timeout=20s")
        return conn

    def close(self) -> None:
        for conn in self.connections:
            if getattr(conn, "open", True):  # PyMySQL's close() refuses a closed connection
                conn.close()
        if self._reader is not None:
            self._reader.close()

    # the table as another session sees it

    def quote(self, name: str) -> str:
        q = "`" if self.mysql else '"'
        return f"{q}{name.replace(q, q + q)}{q}"

    def table_sql(self, table: str | None = None) -> str:
        d = self.mod.DESCRIPTOR
        name = table or d.table
        schema = d.schema if table is None else None
        return f"{self.quote(schema)}.{self.quote(name)}" if schema else self.quote(name)

    def rows(self, table: str | None = None) -> list[dict[str, Any]]:
        """Every row of the queue table (or `table`) in id order, read on a fresh connection (on
        MySQL on an autocommit session of the Queue's own, which sees the same).

        SQLite's time roles (text) and MySQL's (naive UTC) come back as aware datetimes, like
        PostgreSQL's timestamptz.
        """
        sql = f"SELECT * FROM {self.table_sql(table)} ORDER BY {self.quote(self.roles['id'])}"
        if self.pg:
            with psycopg.connect(self.target, row_factory=dict_row) as conn:
                return list(conn.execute(sql).fetchall())
        times = {self.roles[r] for r in TIME_ROLES if r in self.roles}
        if self.mysql:
            # One session of its own, in autocommit at READ COMMITTED: each read sees what is
            # committed, as a fresh connection would (a new connection per read is slow).
            if self._reader is None:
                self._reader = mysql_connect(self.target, autocommit=True,
                                             cursorclass=pymysql.cursors.DictCursor)
            with self._reader.cursor() as cur:
                cur.execute(sql)
                out = list(cur.fetchall())
            for row in out:
                for k in times & row.keys():
                    row[k] = values.aware_or_none(row[k])
            return out
        with sqlite3.connect(self.target) as conn:
            conn.row_factory = sqlite3.Row
            out = [dict(r) for r in conn.execute(sql).fetchall()]
        for row in out:
            for k in times & row.keys():
                if row[k] is not None:
                    row[k] = values.parse_sqlite_time(row[k])
        return out

    def row(self, id: int, table: str | None = None) -> dict[str, Any] | None:
        return next((r for r in self.rows(table) if r[self.roles["id"]] == id), None)

    def ids(self, table: str | None = None) -> list[int]:
        return [r[self.roles["id"]] for r in self.rows(table)]

    def snapshot(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        dead = self.mod.DESCRIPTOR.dead_letter_table
        return self.rows(), self.rows(dead) if dead else []

    # writing rows

    def new(self, **fields: Any) -> Any:
        """A NewRow: `fields` as given, the group "g", times T0 - 60 s, other values unique."""
        n = next(self._serial)
        out: dict[str, Any] = {}
        for f in attrs.fields(self.mod.NewRow):
            if f.name in fields:
                out[f.name] = fields[f.name]
            elif f.name == self.group_attr:
                out[f.name] = "g"
            elif f.name == self.role_attrs.get("priority"):
                out[f.name] = 0
            else:
                out[f.name] = _sample(str(f.type), n)
        return self.mod.NewRow(**out)

    def add(self, conn: Any, **fields: Any) -> int:
        """Insert one row (committed) and return its id."""
        self.mod.insert(conn, self.new(**fields))
        conn.commit()
        return max(self.ids())

    def id_of(self, row: Any) -> int:
        value: int = getattr(row, self.id_attr)
        return value

    def value(self, row: Any, role: str) -> Any:
        """The value of `role` in a ClaimedRow (or NewRow), whatever its column is called."""
        return getattr(row, self.role_attrs[role])

    # claiming and settling, whatever the form

    def claim(self, conn: Any, *, now: dt.datetime = T0, until: dt.datetime | None = None,
              limit: int = 1, group: str = "g", by_priority: bool = False) -> list[Any]:
        """Claim up to `limit` rows the form's way; nothing is committed.

        Lease: CLAIM with the expiry `until` (default now + LEASE). Row lock: CLAIM in the open
        transaction; with count_crashes, as the runtime does: CLAIM counts the rows and is
        committed, their keys staying locked for the session (RELEASE unlocks them). Advisory:
        CANDIDATES, then (PostgreSQL and MySQL) LOCK of each candidate's key and TAKE; keys
        whose TAKE finds nothing are unlocked again. `by_priority`: the claim statement's
        twin that reads the due rows priority by priority, where the module has one.
        """
        args: dict[str, Any] = {"now": now, "limit": limit, "group": group,
                                "locked_until": until or now + dt.timedelta(seconds=LEASE),
                                "by_priority": by_priority}
        m = self.mod
        if self.count_crashes:
            counted = list(call(m.claim, conn, **args))
            conn.commit()
            return counted
        if self.form != "advisory":
            return list(call(m.claim, conn, **args))
        taken = []
        for cand in call(m.candidates, conn, **args):
            key = m.advisory_key(cand)
            if self.locks and not m.lock(conn, key=key):
                continue
            row = call(m.take, conn, id=self.id_of(cand), **args)
            if row is not None:
                taken.append(row)
            elif self.locks:
                m.unlock(conn, key=key)
        return taken

    def claim_one(self, conn: Any, **kwargs: Any) -> Any:
        rows = self.claim(conn, **kwargs)
        assert len(rows) == 1, rows
        return rows[0]

    def fifo_claim(self, conn: Any, *, group: str = "g", now: dt.datetime = T0,
                   until: dt.datetime | None = None) -> Any:
        return call(self.mod.fifo_claim, conn, group=group, now=now,
                    locked_until=until or now + dt.timedelta(seconds=LEASE))

    def token(self, row: Any) -> dict[str, Any]:
        """What a settlement needs to name the claimed row: its id and, under a lease, the
        held expiry and the attempt as the claim returned it."""
        out = {"id": self.id_of(row)}
        for role in ("locked_until", "attempt"):
            if role in self.role_attrs:
                out[role] = self.value(row, role)
        return out

    def settle(self, name: str, conn: Any, row: Any, **extra: Any) -> bool:
        """Run settlement `name` (finish, retry, retry_after, dead_letter, renew) on a claimed
        row with its token; `extra` overrides token values or adds `now`, `retry_after`,
        `new_locked_until` (each passed only where the function takes it)."""
        args = {"now": T0, **self.token(row), **extra}
        result: bool = call(getattr(self.mod, name), conn, **args)
        return result

    def release(self, conn: Any, row: Any) -> None:
        """Advisory on PostgreSQL and MySQL: unlock the row's key; a counted row lock: unlock
        the counted row's key (RELEASE; MySQL's unlocks every key of the session). Other forms
        hold nothing to release; SQLite keeps no keys in the database."""
        if self.form == "advisory" and self.locks:
            assert self.mod.unlock(conn, key=self.mod.advisory_key(row))
        elif self.count_crashes:
            call(self.mod.release, conn, id=[self.id_of(row)])


def call(fn: Callable[..., Any], conn: Any, **available: Any) -> Any:
    """Call a generated function with those of `available` that it takes as keywords."""
    names = inspect.signature(fn).parameters
    return fn(conn, **{k: v for k, v in available.items() if k in names})


def _sample(type_: str, n: int) -> Any:
    """A value of a NewRow field's (string) annotation, distinct for each n."""
    if type_.startswith("int"):
        return n
    if type_.startswith("str"):
        return f"s{n}"
    if type_.startswith("bytes"):
        return f"b{n}".encode()
    if type_.startswith("datetime.datetime"):
        return at(-60)
    if type_.startswith("_v.JSONValue"):
        return {"n": n}
    if type_.startswith("Mapping"):
        return {"h": str(n)}
    if type_.endswith("| None"):
        return None
    raise AssertionError(f"no sample value for a field of type {type_}")


# -- building and loading --------------------------------------------------------------------------


def apply_ddl(dialect: str, target: str, ddl: str) -> None:
    if dialect == "postgres":
        with psycopg.connect(target) as conn:
            conn.execute(ddl)
    elif dialect == "mysql":
        server = mysql_connect(target, autocommit=True)
        try:
            with server.cursor() as cur:
                for statement in mysql_statements(ddl):
                    cur.execute(statement)
        finally:
            server.close()
    else:
        with sqlite3.connect(target) as conn:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(ddl)


# Example queues by shape and dialect: the shipped example where it ships for that dialect (or its
# twin in generated_examples/), else a twin built here (the same columns and roles, in the
# dialect's types).
EXAMPLES = {("mailer", "mysql"): "mailer_mariadb", ("emails", "sqlite"): "shop_emails"}
TWINS = {("chat", "mysql"): (MYSQL_CHAT_SPEC, MYSQL_CHAT_DDL),
         ("ledger", "mysql"): example_parts("ledger_mariadb"),
         ("reports", "mysql"): (MYSQL_REPORTS_SPEC, MYSQL_REPORTS_DDL),
         ("emails", "mysql"): (MYSQL_EMAILS_SPEC, MYSQL_EMAILS_DDL)}
Shape = Layout | str  # a Layout, or an example's name (mailer, chat, ledger, reports, emails...)
MakeQueue = Callable[..., "Queue"]

_built: dict[tuple[str, str, str], tuple[ModuleType, str]] = {}


def queue_parts(root: Path, dialect: str, shape: Shape, spec: str | None = None,
                ddl: str | None = None, name: str = "jobs") -> tuple[ModuleType, str]:
    """The module of a queue shape on `dialect` (or of `spec` and `ddl`, written out in a test)
    and the DDL that creates its tables.

    A spec and DDL are generated under `root` once per session (the modules hold no state):
    later queues of the same shape reuse the module, on tables of their own.
    """
    if spec is None:
        if isinstance(shape, Layout):
            spec, ddl = shape.spec(dialect), shape.ddl(dialect)
        elif (shape, dialect) in TWINS:
            (spec, ddl), name = TWINS[shape, dialect], shape
        else:
            example = EXAMPLES.get((shape, dialect), shape)
            mod = example_module(example)
            assert mod.DESCRIPTOR.dialect == dialect, f"{example} ships for another dialect"
            return mod, example_ddl(example)
    assert ddl is not None, "a spec comes with its DDL"
    if (spec, ddl, name) not in _built:
        _built[spec, ddl, name] = build_module(root, spec, ddl, name), ddl_of(root, name)
    return _built[spec, ddl, name]


def open_queue(root: Path, dialect: str, shape: Shape, target: str, *, spec: str | None = None,
               ddl: str | None = None, name: str = "jobs", database: str | None = None,
               mysql_args: dict[str, Any] | None = None) -> Queue:
    """A queue of `shape` (or of `spec` and `ddl`) with its tables created on `target`, an empty
    database of `dialect`; `database` is what a Worker is given for it (the target by default:
    a mysql+pymysql:// URL names a driver)."""
    mod, tables = queue_parts(root, dialect, shape, spec, ddl, name)
    schema = mod.DESCRIPTOR.schema
    if schema and dialect == "postgres":
        tables = f'CREATE SCHEMA IF NOT EXISTS "{schema}";\n{tables}'
    apply_ddl(dialect, target, tables)
    return Queue(mod, dialect, target, database=database, mysql_args=mysql_args)


def example_module(name: str) -> ModuleType:
    """generated_examples/<name>.py, imported once (as the package module the services import)."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    return importlib.import_module(f"generated_examples.{name}")


def example_ddl(name: str) -> str:
    """The migrations of specs/<name>.toml in replay order, without their down sections."""
    spec_path = REPO / "specs" / f"{name}.toml"
    spec = tomllib.loads(spec_path.read_text(encoding="utf-8"))
    items: Sequence[str] = [spec["ddl"]] if isinstance(spec["ddl"], str) else spec["ddl"]
    files: list[Path] = []
    for item in items:
        p = spec_path.parent / item
        files += sorted(p.glob("*.sql")) if p.is_dir() else [p]
    return "\n".join(f.read_text(encoding="utf-8").split("-- +goose Down")[0] for f in files)


# -- what the statement tests share -------------------------------------------------------------


CLAIM_FORMS = [
    pytest.param("postgres", "row_lock", id="postgres-row_lock"),
    pytest.param("postgres", "lease", id="postgres-lease"),
    pytest.param("sqlite", "lease", id="sqlite-lease"),
    pytest.param("postgres", "advisory", id="postgres-advisory"),
    pytest.param("sqlite", "advisory", id="sqlite-advisory"),
    pytest.param("mysql", "row_lock", id="mysql-row_lock"),
    pytest.param("mysql", "lease", id="mysql-lease"),
    pytest.param("mysql", "advisory", id="mysql-advisory"),
]
DIALECTS = ["postgres", "sqlite", "mysql"]
SERVERS = ["postgres", "mysql"]  # row locks and session locks (SQLite has neither)
FIFO_FORMS = [
    pytest.param("postgres", "lease", id="postgres-lease"),
    pytest.param("sqlite", "lease", id="sqlite-lease"),
    pytest.param("postgres", "row_lock", id="postgres-row_lock"),
    pytest.param("mysql", "lease", id="mysql-lease"),
    pytest.param("mysql", "row_lock", id="mysql-row_lock"),
]
LEDGERS = ["postgres", "mysql"]  # the ledger example on PostgreSQL, its twin on MySQL


def commit_claim(q: Queue, conn: Any) -> None:
    """Lease and advisory claims are committed at once; a row lock claim stays open."""
    if q.form != "row_lock":
        conn.commit()


def finish(q: Queue, conn: Any, row: Any) -> None:
    """Ack a claimed row and commit (releasing an advisory key afterwards)."""
    assert q.settle("finish", conn, row)
    conn.commit()
    q.release(conn, row)


def leased_row(q: Queue, conn: Any) -> Any:
    """One committed row claimed at T0 under a lease ending at T0 + 30 s."""
    q.add(conn)
    row = q.claim_one(conn, now=T0, until=at(30))
    conn.commit()
    assert (row.attempt, row.locked_until) == (1, at(30))
    return row


def run_workers(conns: list[Any], work: Callable[[Any], None]) -> None:
    """Run work(conn) on one thread per connection, all starting together; re-raise failures."""
    barrier = threading.Barrier(len(conns))

    def start(conn: Any) -> None:
        barrier.wait()
        work(conn)

    with ThreadPoolExecutor(len(conns)) as pool:
        for future in [pool.submit(start, c) for c in conns]:
            future.result()


# -- every statement once ------------------------------------------------------------------------


def tour(q: Queue) -> list[str]:
    """Drive each generated function of q's module once, on one connection, checking that every
    settlement finds its row; returns the SQL texts that connection executed."""
    m = q.mod
    conn = q.connect()
    rows = [q.new() for _ in range(6)]
    m.insert(conn, rows[0])
    m.insert_many(conn, rows[1:5])
    if hasattr(m, "insert_unique"):
        assert m.insert_unique(conn, rows[5])
    else:
        m.insert(conn, rows[5])
    conn.commit()
    if hasattr(m, "notify"):
        m.notify(conn, "g")
        conn.commit()
    names = [n for n in ("renew", "retry", "retry_after", "dead_letter", "finish")
             if hasattr(m, n)]
    for i, name in enumerate(names):
        if i == 0 and hasattr(m, "fifo_claim"):
            row = q.fifo_claim(conn)
            assert row is not None
        else:  # every other claim by the claim statement's twin, where there is one
            row = q.claim_one(conn, by_priority=i % 2 == 1)
        if q.form != "row_lock":
            conn.commit()
        assert q.settle(name, conn, row, retry_after=at(-30), new_locked_until=at(90)), name
        conn.commit()
        q.release(conn, row)
    if hasattr(m, "scheduled"):  # what the runtime reads to choose the claim by priority
        assert call(m.scheduled, conn, group="g", now=T0, limit=10) == 0
    if hasattr(m, "finish_many"):  # the batch statements, with a batch of one
        row = q.claim_one(conn)
        if q.form != "row_lock":
            conn.commit()
        token = {k: [v] for k, v in q.token(row).items()}
        if hasattr(m, "renew_many"):
            assert call(m.renew_many, conn, **token, new_locked_until=at(90)) == [q.id_of(row)]
            conn.commit()
            token["locked_until"] = [at(90)]
        settled = call(m.finish_many, conn, **token, now=T0)
        assert settled == ([q.id_of(row)] if q.form == "lease" else 1), settled
        conn.commit()
        q.release(conn, row)
    if "INSERT_NOTIFY" in m.STATEMENTS:
        assert m.insert(conn, q.new(), notify=True) > 0
        conn.commit()
    # What inboxgen status, requeue and prune run.
    assert m.status(conn, now=T0)
    for name in ("dead_count", "oldest_transaction", "advisory_locks", "table_health"):
        if hasattr(m, name):
            getattr(m, name)(conn)
    if hasattr(m, "dead_letters"):
        assert [d.state for d in m.dead_letters(conn, limit=5)] == ["dead"]  # the one above
    if hasattr(m, "requeue"):
        assert call(m.requeue, conn, to_group="g", now=T0) == 1  # the dead letter above
        call(m.requeue, conn, to_group="g", now=T0, ids=[q.id_of(row)])
    if hasattr(m, "cancel"):
        queued = m.insert(conn, q.new())
        conn.commit()
        assert m.state(conn, id=queued, now=T0).state in ("ready", "scheduled")
        assert call(m.cancel, conn, id=queued, now=T0)
        conn.commit()
    else:
        assert m.state(conn, id=m.insert(conn, q.new()), now=T0) is not None
        conn.commit()
    if hasattr(m, "insert_replace"):
        _replacements(q, conn)
    if hasattr(m, "prune"):
        assert m.prunable(conn, before=T0 + dt.timedelta(days=1)) >= 1
        assert m.prune(conn, before=T0 + dt.timedelta(days=1), limit=1) == 1
    conn.commit()
    return executed(conn)


def _replacements(q: Queue, conn: Any) -> None:
    """insert_replace() and insert_debounced() for part of the tour: a new key, the same key
    again (queued, free), and the key while another connection holds every due row."""
    m = q.mod
    new = q.new()
    assert m.insert_replace(conn, new).outcome == "queued"
    assert m.insert_replace(conn, new).outcome == "replaced"
    if hasattr(m, "insert_debounced"):
        wait = dt.timedelta(seconds=1)
        assert m.insert_debounced(conn, new, wait=wait, max_wait=wait).outcome == "replaced"
        assert m.insert_debounced(conn, q.new(), wait=wait, max_wait=wait).outcome == "queued"
    conn.commit()
    holder = q.connect()
    try:
        assert q.claim(holder, limit=100)
        if q.form == "lease" or q.count_crashes:
            holder.commit()  # (a counted row's key stays locked on the session)
        assert m.insert_replace(conn, new).outcome == "kept"
        conn.commit()
    finally:
        holder.rollback()
        holder.close()


def cli_project(root: Path, dialect: str, layout: Layout, target: str) -> ModuleType:
    """An inboxgen project under `root` (pyproject.toml, specs/jobs.toml and its DDL) built by
    `inboxgen build` as a user builds it, with its table created on `target`; the module it
    wrote, imported."""
    import subprocess

    make_project(root, layout.spec(dialect), layout.ddl(dialect))
    (root / "pyproject.toml").write_text('[tool.inboxgen]\nspecs = "specs"\nout = "generated"\n')
    built = subprocess.run([sys.executable, "-m", "inboxgen", "build"], cwd=root,
                           capture_output=True, text=True, check=False, timeout=120)
    assert built.returncode == 0, built.stderr
    apply_ddl(dialect, target, layout.ddl(dialect))
    return import_path(root / "generated" / "jobs.py", f"_cli_{abs(hash(str(root)))}_{dialect}")
