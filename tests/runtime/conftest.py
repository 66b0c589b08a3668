"""Fixtures of the runtime tests: a plain queue on a fresh PostgreSQL database, and its URL."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from dbcases import MakeQueue, Queue
from semantics_util import PLAIN_PG_DDL, PLAIN_PG_SPEC, SECRET


@pytest.fixture
def pg_jobs(queue: MakeQueue) -> Queue:
    """A plain row-lock queue (an id and a JSON payload) on a fresh PostgreSQL database."""
    return queue("postgres", spec=PLAIN_PG_SPEC, ddl=PLAIN_PG_DDL)


@pytest.fixture
def pg_url(pg_server: Any, pg_jobs: Queue) -> str:
    """pg_jobs' database as a URL with a password (the server trusts it and ignores it)."""
    dbname = psycopg.conninfo.conninfo_to_dict(pg_jobs.target)["dbname"]
    return f"postgresql://postgres:{SECRET}@127.0.0.1:{pg_server.port}/{dbname}"
