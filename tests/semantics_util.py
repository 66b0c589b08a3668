"""Helpers for the runtime semantics tests: example modules with their tables, inline queue specs,
a fake clock started near the real time, and ways to drive a worker on that clock.

Everything runs on real databases: SQLite files and the session's private PostgreSQL and MariaDB.
`Db` hides what differs between the databases for the tests that run on several (a connection,
running DDL, reading rows back); `queue_on` builds a queue shape (mailer, chat, ledger) on either
server: the shipped example on PostgreSQL, its MySQL twin on MariaDB.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import importlib
import importlib.util
import json
import logging
import sqlite3
import sys
import textwrap
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg
import pymysql
import pytest
from genutil import build_module, example_parts

from inboxgen import Worker
from inboxgen.testing import FakeClock, run_until_idle

REPO = Path(__file__).resolve().parents[1]
MIGRATIONS = REPO / "specs" / "migrations"
UTC = dt.UTC
SQLITE_TIME = "%Y-%m-%d %H:%M:%S.%f"  # the fixed text format of time roles on SQLite


# -- examples ------------------------------------------------------------------------------------


def example(name: str) -> ModuleType:
    """One of generated_examples/ (reports, shop_emails, mailer, ledger, chat, ...)."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    return importlib.import_module(f"generated_examples.{name}")


def load_shop() -> ModuleType:
    """scripts/shop.py, the shop example service, imported as a module."""
    if "_inboxgen_shop_example" in sys.modules:
        return sys.modules["_inboxgen_shop_example"]
    spec = importlib.util.spec_from_file_location("_inboxgen_shop_example",
                                                  REPO / "scripts" / "shop.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["_inboxgen_shop_example"] = module
    spec.loader.exec_module(module)
    return module


def migration_sql(folder: str) -> str:
    """The up-migrations of specs/migrations/<folder>, in name order (goose Down sections cut)."""
    parts = []
    for path in sorted((MIGRATIONS / folder).glob("*.sql")):
        parts.append(path.read_text(encoding="utf-8").split("-- +goose Down")[0])
    return "\n".join(parts)


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


def sqlite_rows(path: Path, sql: str, params: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
    """Rows as another process sees them (a fresh connection)."""
    conn = sqlite3.connect(path, timeout=30)
    try:
        return conn.execute(sql, tuple(params)).fetchall()
    finally:
        conn.close()


def module_for(root: Path, spec: str, ddl: str, name: str = "jobs") -> ModuleType:
    return build_module(root, spec, ddl, name)


# -- time ----------------------------------------------------------------------------------------


def fake_clock() -> FakeClock:
    """A fake clock a minute ahead of the real time, in whole seconds.

    Near the real time, because some tables take their `retry_after` default from the database's
    own clock (ledger) and some code writes the real time (the shop's checkout handler).
    """
    start = dt.datetime.now(UTC).replace(microsecond=0) + dt.timedelta(minutes=1)
    return FakeClock(start)


def sqlite_time(value: dt.datetime) -> str:
    return value.astimezone(UTC).strftime(SQLITE_TIME)


def parse_sqlite_time(value: str) -> dt.datetime:
    return dt.datetime.strptime(value, SQLITE_TIME).replace(tzinfo=UTC)


# -- driving workers -----------------------------------------------------------------------------


async def idle(worker: Worker) -> None:
    """run_until_idle for a worker the caller started (it stays started)."""
    assert worker.started
    await run_until_idle(worker, timeout=20)


async def drive(worker: Worker, clock: FakeClock, until: Callable[[], bool], *,
                max_seconds: float = 3600, step: float | None = None) -> None:
    """Serve (the worker must be started) and move the fake clock, a poll interval (or `step`) at
    a time, until `until()` holds or `max_seconds` of fake time have passed."""
    end = clock.now() + dt.timedelta(seconds=max_seconds)
    while True:
        await idle(worker)
        if until() or clock.now() >= end:
            return
        clock.advance(step if step is not None else worker.poll_interval)


class Tracker:
    """Counts handlers in work at once (the highest count is `peak`)."""

    def __init__(self) -> None:
        self.now = 0
        self.peak = 0

    def __enter__(self) -> Tracker:
        self.now += 1
        self.peak = max(self.peak, self.now)
        return self

    def __exit__(self, *exc: object) -> None:
        self.now -= 1


def messages(records: Iterable[logging.LogRecord], level: int = logging.WARNING) -> list[str]:
    return [r.getMessage() for r in records
            if r.levelno >= level and r.name.startswith("inboxgen")]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# -- one test, several databases -----------------------------------------------------------------


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


def make_db(request: pytest.FixtureRequest, dialect: str) -> Db:
    """A fresh database of `dialect` (sqlite, postgres, mysql or mysql+pymysql) from the
    session fixtures (sqlite_path, pg_dsn, mysql_url)."""
    if dialect == "sqlite":
        return Db("sqlite", str(request.getfixturevalue("sqlite_path")))
    if dialect == "postgres":
        return Db("postgres", request.getfixturevalue("pg_dsn"))
    url: str = request.getfixturevalue("mysql_url")
    server = request.getfixturevalue("mariadb_server")
    # "mysql+pymysql": the same database with the worker's driver named in the URL (a plain
    # mysql:// worker runs on asyncmy unless its handlers are transactional).
    scheme = dialect if dialect.startswith("mysql+") else "mysql"
    return Db("mysql", scheme + url.removeprefix("mysql"),
              server.connect_args(url.rsplit("/", 1)[1]))


def on_dialect(spec: str, dialect: str) -> str:
    """An inline spec written for one dialect, for another (the `dialect = ...` line)."""
    lines = [f'dialect = "{dialect}"' if line.strip().startswith("dialect =") else line
             for line in textwrap.dedent(spec).splitlines()]
    assert any(line.startswith("dialect =") for line in lines), spec
    return "\n".join(lines) + "\n"


# Queue shapes on MySQL/MariaDB that the examples only ship for PostgreSQL or SQLite (mailer has
# its own, generated_examples/mailer_mariadb.py): the same columns and roles, in MySQL types.
MYSQL_CHAT_SPEC = """
    table = "OutgoingMessages"
    dialect = "mysql"
    fifo = true

    [columns]
    MessageId = { role = "id", generated = true }
    conversation = "group"
    retry_after = "retry_after"
    attempt = { role = "attempt", generated = true }
    locked_until = "locked_until"
    body = { role = "payload", codec = "text" }

    [runtime]
    lease = 30
"""
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
# The ledger example on MariaDB / MySQL (specs/ledger_mariadb.toml and its migration).
MYSQL_LEDGER_SPEC, MYSQL_LEDGER_DDL = example_parts("ledger_mariadb")


MYSQL_REPORTS_SPEC = """
    table = "report_jobs"
    dialect = "mysql"

    [columns]
    id = { role = "id", generated = true }
    attempt = { role = "attempt", generated = true }
    locked_until = "locked_until"
    payload = { role = "payload", codec = "bytes" }

    [runtime]
    lease = 60
"""
MYSQL_REPORTS_DDL = """
    CREATE TABLE report_jobs (
        id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
        attempt INT NOT NULL DEFAULT 1,
        locked_until DATETIME NULL,
        payload LONGBLOB NOT NULL
    );
"""
MYSQL_EMAILS_SPEC = """
    table = "email_jobs"
    dialect = "mysql"
    unique = ["order_id", "kind"]

    [columns]
    id = { role = "id", generated = true }
    priority = "priority"
    retry_after = "retry_after"
    attempt = { role = "attempt", generated = true }
    processed_at = "processed_at"
    locked_until = "locked_until"
    payload = { role = "payload", codec = "json" }

    [runtime]
    max_attempts = 5

    [dead_letter]
    table = "email_jobs_dead"
"""
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


@dataclass
class DbQueue:
    """A queue module with its tables created in a Db; `table` is the queue table as SQL spells
    it there, `id` its quoted id column."""

    db: Db
    module: ModuleType
    table: str
    id: str


def queue_on(db: Db, shape: str, root: Path) -> DbQueue:
    """A queue of the examples on `db`, its tables created: the shipped example on its own
    dialect, its MySQL twin on MariaDB. mailer (row lock, dead-letter group), chat (FIFO under
    a lease) and ledger (advisory, dead-letter table) ship for PostgreSQL; reports (lease) and
    emails (the shop's emails: lease, priorities, dead-letter table, with the orders table) for
    SQLite."""
    if shape in ("reports", "emails") and not db.mysql:
        assert db.sqlite, f"{shape} ships for SQLite"
        db.exec(migration_sql("reports" if shape == "reports" else "shop"))
        name = "reports" if shape == "reports" else "shop_emails"
        return DbQueue(db, example(name), "report_jobs" if shape == "reports"
                           else "email_jobs", "id")
    if shape == "reports":
        db.exec(MYSQL_REPORTS_DDL)
        module = module_for(root, MYSQL_REPORTS_SPEC, MYSQL_REPORTS_DDL, name="reports")
        return DbQueue(db, module, "report_jobs", "id")
    if shape == "emails":
        db.exec(MYSQL_EMAILS_DDL)
        module = module_for(root, MYSQL_EMAILS_SPEC, MYSQL_EMAILS_DDL, name="emails")
        return DbQueue(db, module, "email_jobs", "id")
    if shape == "mailer":
        if db.mysql:
            db.exec(migration_sql("mailer_mariadb"))
            return DbQueue(db, example("mailer_mariadb"), "email_jobs", "job_id")
        db.exec(migration_sql("mailer"))
        return DbQueue(db, example("mailer"), "email_jobs", "job_id")
    if shape == "chat":
        if db.mysql:
            db.exec(MYSQL_CHAT_DDL)
            module = module_for(root, MYSQL_CHAT_SPEC, MYSQL_CHAT_DDL, name="chat")
            return DbQueue(db, module, "`OutgoingMessages`", "`MessageId`")
        db.exec('CREATE SCHEMA "Chat"')
        db.exec(migration_sql("chat"))
        return DbQueue(db, example("chat"), '"Chat"."OutgoingMessages"', '"MessageId"')
    if shape == "ledger":
        if db.mysql:
            db.exec(MYSQL_LEDGER_DDL)
            module = module_for(root, MYSQL_LEDGER_SPEC, MYSQL_LEDGER_DDL, name="ledger")
            return DbQueue(db, module, "ledger_jobs", "id")
        db.exec(migration_sql("ledger"))
        return DbQueue(db, example("ledger"), "ledger_jobs", "id")
    raise ValueError(f"no queue shape {shape!r}")
