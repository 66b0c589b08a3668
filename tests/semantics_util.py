"""Helpers for the runtime tests: example modules and services, a fake clock started near the
real time, and ways to drive a worker on that clock.

Everything runs on real databases: SQLite files and the session's private PostgreSQL and MariaDB.
The ``queue`` fixture (conftest.py) builds a queue shape on a fresh database; ``make_db`` gives a
fresh database alone, as a ``dbcases.Db``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from dbcases import Db, spec_toml
from genutil import import_path

from inboxgen import Worker
from inboxgen.testing import FakeClock, run_until_idle

REPO = Path(__file__).resolve().parents[1]
MIGRATIONS = REPO / "specs" / "migrations"
UTC = dt.UTC
SECOND = dt.timedelta(seconds=1)


# -- examples ------------------------------------------------------------------------------------


def load_shop() -> ModuleType:
    """scripts/shop.py, the shop example service, imported as a module."""
    if "_inboxgen_shop_example" in sys.modules:
        return sys.modules["_inboxgen_shop_example"]
    return import_path(REPO / "scripts" / "shop.py", "_inboxgen_shop_example")


def migration_sql(folder: str) -> str:
    """The up-migrations of specs/migrations/<folder>, in name order (goose Down sections cut)."""
    parts = []
    for path in sorted((MIGRATIONS / folder).glob("*.sql")):
        parts.append(path.read_text(encoding="utf-8").split("-- +goose Down")[0])
    return "\n".join(parts)


# -- time ----------------------------------------------------------------------------------------


def fake_clock() -> FakeClock:
    """A fake clock a minute ahead of the real time, in whole seconds.

    Near the real time, because some tables take their `retry_after` default from the database's
    own clock (ledger) and some code writes the real time (the shop's checkout handler).
    """
    start = dt.datetime.now(UTC).replace(microsecond=0) + dt.timedelta(minutes=1)
    return FakeClock(start)


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


def serve_until(worker: Worker, clock: FakeClock, until: Callable[[], bool], *,
                max_seconds: float = 3600, step: float | None = None) -> None:
    """Start `worker`, `drive` it until `until()` holds (or `max_seconds` of fake time have
    passed), and shut it down."""
    async def main() -> None:
        await worker.start()
        try:
            await drive(worker, clock, until, max_seconds=max_seconds, step=step)
        finally:
            await worker.shutdown()

    asyncio.run(main())


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


async def handler_write(db: Db, conn: Any, sql: str, params: Any) -> None:
    """An async handler's write on the job's connection: psycopg's is async, PyMySQL's blocks
    (so it runs in a thread), sqlite3's is quick and runs in place."""
    if db.mysql:
        await asyncio.to_thread(db.execute, conn, sql, params)
    elif db.sqlite:
        conn.execute(sql, params)
    else:
        await conn.execute(sql, params)


async def write_effect(db: Db, conn: Any, note: str) -> None:
    await handler_write(db, conn, f"INSERT INTO effects (note) VALUES ({db.p})", (note,))


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# -- one test, several databases -----------------------------------------------------------------


def add_confirmation(db: Db, emails: ModuleType, due: dt.datetime) -> None:
    """On the shop's emails queue: order 1 (ada@example.com) and its confirmation email, due
    at `due`, committed."""
    with db.transaction() as conn:
        db.execute(conn, "INSERT INTO orders (id, email) VALUES (1, 'ada@example.com')")
        emails.insert(conn, emails.NewRow(priority=0, retry_after=due, order_id=1,
                                          kind="confirmation", payload={"to": "ada@example.com"}))


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




# -- starting a worker ---------------------------------------------------------------------------

SECRET = "s3cret-Pa55"  # a password that must never show in a message
# Plain queues (a row lock on the servers, a lease on SQLite): the tests of connecting and
# starting need no more. dialect -> (spec, DDL)
PLAIN = {
    "postgres": (spec_toml("jobs", {"id": "id generated", "payload": "payload"}),
                 "CREATE TABLE jobs (id BIGSERIAL PRIMARY KEY, payload JSONB NOT NULL);"),
    "mysql": (spec_toml("jobs", {"id": "id generated", "payload": "payload bytes"},
                        dialect="mysql"),
              "CREATE TABLE jobs (id BIGINT AUTO_INCREMENT PRIMARY KEY, payload BLOB NOT NULL);"),
    "sqlite": (spec_toml("jobs", {"id": "id generated", "locked_until": "locked_until",
                                  "payload": "payload bytes"}, dialect="sqlite"),
               "CREATE TABLE jobs (id INTEGER PRIMARY KEY, locked_until TEXT, payload BLOB);"),
}


def worker_app(folder: Path, module: ModuleType, name: str, body: str
               ) -> tuple[list[str], dict[str, str]]:
    """Write the service module `folder/<name>.py`: it imports `module` as `m` and Worker, then
    runs `body` (which makes `worker`). Returns the `inboxgen worker <name>:worker` command and
    the environment it runs in (the folder on the import path)."""
    assert module.__file__ is not None
    (folder / f"{name}.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(Path(module.__file__).parent)!r})\n"
        f"import {Path(module.__file__).stem} as m\n"
        "from inboxgen import Worker\n" + body)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), *sys.path])}
    return [sys.executable, "-m", "inboxgen", "worker", f"{name}:worker"], env


def start(worker: Worker) -> BaseException | None:
    """Start a worker and shut it down again; what the start raised, if anything."""
    async def main() -> None:
        try:
            await worker.start()
        finally:
            if worker.started:
                await worker.shutdown()

    try:
        asyncio.run(main())
    except BaseException as err:  # noqa: BLE001 - the test looks at what it is
        return err
    return None
