"""A transactional handler's job connection as a SQLAlchemy Session (`inboxgen[sqlalchemy]`).

    def place_order(job: Job[Any]) -> None:              # SQLite, MySQL/MariaDB: a sync Session
        with job_session(job) as session:
            session.add(Order(id=job.payload["order"]))

    async def place_order(job: Job[Any]) -> None:        # PostgreSQL: an AsyncSession
        async with job_async_session(job) as session:
            session.add(Order(id=job.payload["order"]))

The session works in a savepoint of the job's transaction: `session.commit()` (and the end of
the block) keeps its writes in the job's transaction, which commits with the ack and rolls back
on any other outcome; `session.rollback()` undoes the session's writes since the savepoint. The
session never commits, rolls back or closes the job's connection itself: the worker does.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

from sqlalchemy import Engine, create_engine
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import Session
from sqlalchemy.pool import StaticPool

from inboxgen.errors import WrongConnection
from inboxgen.runtime.jobs import Job

# The SQLAlchemy dialect of each driver connection a job can hold, by its class's module.
URLS = {"sqlite3": "sqlite+pysqlite://", "pymysql.connections": "mysql+pymysql://",
        "psycopg": "postgresql+psycopg_async://"}
# Engines made for job connections, the most recently used last; a worker's connections are
# few and long-lived, so a handful covers them.
KEPT = 64
# (Each engine holds its connection anyway: sqlite3's cannot be referenced weakly.)
_engines: collections.OrderedDict[int, tuple[Any, Any]] = collections.OrderedDict()


@contextlib.contextmanager
def job_session(job: Job[Any], **options: Any) -> Iterator[Session]:
    """A Session on the job's connection (SQLite and MySQL/MariaDB: a sync connection);
    `options` go to Session()."""
    conn = _connection(job, "job_session")
    if _kind(conn) == "psycopg":
        raise WrongConnection("job_session: a PostgreSQL job's connection is async: use "
                              "`async with job_async_session(job)`")
    engine: Engine = _engine(conn, asynchronous=False)
    with engine.connect() as sa_conn, sa_conn.begin():
        # The outer transaction is the job's (its BEGIN and COMMIT are the worker's); the
        # session's is a savepoint in it.
        with Session(bind=sa_conn, join_transaction_mode="create_savepoint",
                     **options) as session:
            yield session
            session.commit()


@contextlib.asynccontextmanager
async def job_async_session(job: Job[Any], **options: Any) -> AsyncIterator[AsyncSession]:
    """An AsyncSession on the job's connection (PostgreSQL: a psycopg AsyncConnection);
    `options` go to AsyncSession()."""
    conn = _connection(job, "job_async_session")
    if _kind(conn) != "psycopg":
        raise WrongConnection("job_async_session: the job's connection is not async: use "
                              "`with job_session(job)`")
    engine: AsyncEngine = _engine(conn, asynchronous=True)
    async with engine.connect() as sa_conn, sa_conn.begin():
        async with AsyncSession(bind=sa_conn, join_transaction_mode="create_savepoint",
                                **options) as session:
            yield session
            await session.commit()


def _connection(job: Job[Any], where: str) -> Any:
    if job.connection is None:
        raise WrongConnection(f"{where}: job {job.id} has no connection: only a "
                              "transactional worker (transactional=True) gives its handlers one")
    return job.connection


def _kind(conn: Any) -> str | None:
    module = type(conn).__module__
    for name in URLS:
        if module == name or module.startswith(name + "."):
            return name
    return None


def _engine(conn: Any, *, asynchronous: bool) -> Any:
    """The engine whose one connection is `conn` (made once per connection)."""
    key = id(conn)
    kept = _engines.get(key)
    if kept is not None and kept[0] is conn:
        _engines.move_to_end(key)
        return kept[1]
    kind = _kind(conn)
    if kind is None:
        raise WrongConnection(f"the job's connection is a {type(conn).__module__}."
                              f"{type(conn).__qualname__}, which SQLAlchemy is not set up for "
                              "here (psycopg, PyMySQL or sqlite3)")
    # One connection, never reset on its return: the job's transaction is the worker's.
    if asynchronous:
        async def connect() -> Any:
            return conn

        engine: Any = create_async_engine(URLS[kind], async_creator=connect,
                                          poolclass=StaticPool, pool_reset_on_return=None)
        dialect = engine.sync_engine.dialect
    else:
        engine = create_engine(URLS[kind], creator=lambda: conn, poolclass=StaticPool,
                               pool_reset_on_return=None)
        dialect = engine.dialect
    # The outer transaction's COMMIT or ROLLBACK is the worker's to send, with the ack.
    dialect.do_commit = dialect.do_rollback = _leave_to_the_worker
    _engines[key] = (conn, engine)
    while len(_engines) > KEPT:
        _, (_, old) = _engines.popitem(last=False)
        getattr(old, "sync_engine", old).dispose(close=False)
    return engine


def _leave_to_the_worker(dbapi_connection: Any) -> None:
    return None
