"""Shared fixtures: private PostgreSQL and MariaDB servers per session, a fresh database per test.

PostgreSQL-backed tests never skip: if the server cannot start, the ``pg_server``
fixture raises and every test using it errors (locally and under CI alike).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from mariadb_server import MariaDBServer
from servers import PostgresServer

_db_counter = itertools.count(1)


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
