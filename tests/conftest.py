"""Shared fixtures: private PostgreSQL and MariaDB servers per session, a fresh database per test,
and a queue (a generated module with its tables) on a fresh database of any dialect.

PostgreSQL-backed tests never skip: if the server cannot start, the ``pg_server``
fixture raises and every test using it errors (locally and under CI alike).

This folder is on sys.path for every test below it (pytest's default prepend import mode puts
the first folder without an ``__init__.py`` there), so the helper modules here (dbcases,
genutil, semantics_util, servers, mariadb_server) import by their plain names.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from dbcases import Layout, MakeQueue, Queue, Shape, on_dialect, open_queue
from mariadb_server import MariaDBServer
from servers import PostgresServer

_db_counter = itertools.count(1)

# Django's task framework (django.tasks) came with Django 6, which needs Python 3.12:
# scripts/test.sh runs tests/django_tasks under a Python that has it.
if sys.version_info < (3, 12):
    collect_ignore = ["django_tasks"]


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    server = PostgresServer()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_dsn(pg_server: PostgresServer) -> str:
    """conninfo of a freshly created, uniquely named database (``t_<n>``)."""
    return pg_server.create_database(f"t_{next(_db_counter)}")


@pytest.fixture
def sqlite_path(tmp_path: Path) -> Path:
    """Path of a not-yet-existing sqlite database file in the test's tmp dir."""
    return tmp_path / "test.sqlite3"


@pytest.fixture(scope="session")
def mariadb_server() -> Iterator[MariaDBServer]:
    """One private MariaDB server for the session (never skipped: a server that cannot start
    fails the tests that need it)."""
    server = MariaDBServer()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def mysql_url(mariadb_server: MariaDBServer) -> str:
    """URL (mysql://root@127.0.0.1:PORT/t_N) of a freshly created MariaDB database."""
    return mariadb_server.create_database()


@pytest.fixture
def fresh_database(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[str], str]:
    """fresh_database(dialect) -> a new, empty database of its own for each call: a PostgreSQL
    conninfo, a mysql:// URL, or the path of a SQLite file not yet made."""
    files = itertools.count(1)

    def make(dialect: str) -> str:
        if dialect == "postgres":
            server: PostgresServer = request.getfixturevalue("pg_server")
            return server.create_database(f"t_{next(_db_counter)}")
        if dialect == "mysql":
            url: str = request.getfixturevalue("mariadb_server").create_database()
            return url
        assert dialect == "sqlite", dialect
        return str(tmp_path / f"db{next(files)}.sqlite3")

    return make


@pytest.fixture
def queue(request: pytest.FixtureRequest, tmp_path: Path,
          fresh_database: Callable[[str], str]) -> Iterator[MakeQueue]:
    """queue(dialect, shape=Layout()) -> dbcases.Queue: the shape's module, its tables created on
    a fresh database of the dialect (a new one for each call); its connections are closed at the
    end of the test.

    dialect: postgres, sqlite or mysql; mysql+pymysql or mysql+asyncmy give the Worker a URL
    naming its driver (`Queue.database`). shape: a `Layout`, or an example by name (mailer,
    chat, ledger, reports, emails, or any of generated_examples/ on its own dialect), the
    example's twin on MySQL where it ships for another dialect. spec=..., ddl=... (and the
    spec's file name, name=...) instead: a table written out in the test, its spec's dialect
    line set to the queue's (`dbcases.typed` writes one DDL for every dialect).
    """
    made: list[Queue] = []

    def make(dialect: str, shape: Shape | None = None, *, spec: str | None = None,
             ddl: str | None = None, name: str = "jobs") -> Queue:
        base, driver = dialect.split("+", 1) if "+" in dialect else (dialect, "")
        target = fresh_database(base)
        mysql_args = None
        if base == "mysql":
            server: MariaDBServer = request.getfixturevalue("mariadb_server")
            mysql_args = server.connect_args(target.rsplit("/", 1)[1])
        q = open_queue(tmp_path / f"queue{len(made)}", base, shape or Layout(), target,
                       spec=None if spec is None else on_dialect(spec, base), ddl=ddl,
                       name=name, mysql_args=mysql_args,
                       database=f"{dialect}{target.removeprefix(base)}" if driver else None)
        made.append(q)
        return q

    yield make
    for q in made:
        q.close()
