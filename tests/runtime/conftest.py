"""Fixtures of the runtime tests: the databases a promise is shown on (`server_dialect`, `db`,
`lease_dialect`), the inboxgen log at INFO (`log_inboxgen`), and a plain queue on a fresh
PostgreSQL database with its URL (`pg_jobs`, `pg_url`)."""

from __future__ import annotations

import logging
from typing import Any

import psycopg
import pytest
from dbcases import Db, MakeQueue, Queue
from semantics_util import PLAIN, SECRET, make_db


@pytest.fixture
def pg_jobs(queue: MakeQueue) -> Queue:
    """A plain row-lock queue (an id and a JSON payload) on a fresh PostgreSQL database."""
    spec, ddl = PLAIN["postgres"]
    return queue("postgres", spec=spec, ddl=ddl)


@pytest.fixture
def pg_url(pg_server: Any, pg_jobs: Queue) -> str:
    """pg_jobs' database as a URL with a password (the server trusts it and ignores it)."""
    dbname = psycopg.conninfo.conninfo_to_dict(pg_jobs.target)["dbname"]
    return f"postgresql://postgres:{SECRET}@127.0.0.1:{pg_server.port}/{dbname}"


@pytest.fixture
def log_inboxgen(caplog: pytest.LogCaptureFixture) -> None:
    """The inboxgen log captured from INFO up (`pytestmark = usefixtures("log_inboxgen")`)."""
    caplog.set_level(logging.INFO, logger="inboxgen")


# MariaDB twice: on the worker's default driver (asyncmy), then on PyMySQL.
SERVERS = ["postgres", "mysql", "mysql+pymysql"]


@pytest.fixture(params=SERVERS)
def server_dialect(request: pytest.FixtureRequest) -> str:
    """The session's PostgreSQL, then its MariaDB (on each driver)."""
    return str(request.param)


@pytest.fixture
def db(request: pytest.FixtureRequest, server_dialect: str) -> Db:
    """A fresh database on the session's PostgreSQL, then on its MariaDB."""
    return make_db(request, server_dialect)


@pytest.fixture(params=["sqlite", "mysql", "mysql+pymysql"])
def lease_dialect(request: pytest.FixtureRequest) -> str:
    """A SQLite file, then a MariaDB database: the SQLite lease examples (reports, the shop's
    emails) and their MySQL twins."""
    return str(request.param)
