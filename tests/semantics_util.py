"""Helpers for the runtime semantics tests: example modules with their tables, inline queue specs,
a fake clock started near the real time, and ways to drive a worker on that clock.

Everything runs on real databases: SQLite files and the session's private PostgreSQL.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import importlib
import importlib.util
import logging
import sqlite3
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg
from genutil import build_module

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
