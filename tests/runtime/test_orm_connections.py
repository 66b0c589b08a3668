"""The enqueue functions take what a service holds (a SQLAlchemy Connection or Session, their
async twins, Django's connection) and run in its transaction: the job commits with the service's
own write and vanishes with its rollback. A connection of the wrong kind gets one clear error."""

from __future__ import annotations

import asyncio
import datetime as dt
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from typing import Any

import attrs
import psycopg
import pytest
import sqlalchemy as sa
from dbcases import Layout, MakeQueue, Queue, call
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from inboxgen import Backoff, Job, Worker
from inboxgen.contrib.sqlalchemy import job_async_session, job_session
from inboxgen.errors import WrongConnection

DIALECTS = ["postgres", "mysql", "sqlite"]
SHAPE = Layout(unique=True)  # insert, insert_unique and insert_many


class Base(DeclarativeBase):
    pass


class Order(Base):
    """The service's own table, written by the ORM in the job's transaction."""

    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(primary_key=True)
    note: Mapped[str] = mapped_column(sa.String(40))


def url(q: Queue, *, asynchronous: bool = False) -> sa.URL:
    """The queue's database as a SQLAlchemy URL on the driver the module runs on."""
    if q.pg:
        info = psycopg.conninfo.conninfo_to_dict(q.target)
        return sa.URL.create("postgresql+psycopg", username=str(info["user"]),
                             host=str(info["host"]), port=int(str(info["port"])),
                             database=str(info["dbname"]))
    if q.mysql:
        driver = "asyncmy" if asynchronous else "pymysql"
        return sa.make_url(q.target.replace("mysql://", f"mysql+{driver}://", 1))
    return sa.URL.create("sqlite+pysqlite", database=q.target)


def enqueue_three(q: Queue, conn: Any) -> None:
    q.mod.insert(conn, q.new())
    assert q.mod.insert_unique(conn, q.new()) is True
    q.mod.insert_many(conn, [q.new()])


async def enqueue_three_async(q: Queue, conn: Any) -> None:
    await q.mod.insert_async(conn, q.new())
    assert await q.mod.insert_unique_async(conn, q.new()) is True
    await q.mod.insert_many_async(conn, [q.new()])


def orders(engine: sa.Engine) -> list[str]:
    with engine.connect() as conn:
        return list(conn.scalars(sa.select(Order.note).order_by(Order.id)))


@pytest.fixture
def sa_queue(queue: MakeQueue, request: pytest.FixtureRequest) -> Iterator[tuple[Queue, sa.Engine]]:
    q = queue(request.param, SHAPE)
    engine = sa.create_engine(url(q))
    Base.metadata.create_all(engine)
    yield q, engine
    engine.dispose()


@pytest.mark.parametrize("sa_queue", DIALECTS, indirect=True)
@pytest.mark.parametrize("commit", [True, False], ids=["commit", "rollback"])
def test_session_insert_joins_the_orm_transaction(sa_queue: tuple[Queue, sa.Engine],
                                                  commit: bool) -> None:
    q, engine = sa_queue
    with Session(engine) as session:
        session.add(Order(note="paid"))
        session.flush()
        enqueue_three(q, session)
        session.commit() if commit else session.rollback()
    assert orders(engine) == (["paid"] if commit else [])
    assert len(q.ids()) == (3 if commit else 0)


@pytest.mark.parametrize("sa_queue", DIALECTS, indirect=True)
@pytest.mark.parametrize("commit", [True, False], ids=["commit", "rollback"])
def test_connection_that_ran_nothing_yet_settles_the_jobs(sa_queue: tuple[Queue, sa.Engine],
                                                          commit: bool) -> None:
    """The jobs are all the Connection ran: its commit() or rollback() settles them all the
    same."""
    q, engine = sa_queue
    with engine.connect() as conn:
        enqueue_three(q, conn)
        conn.commit() if commit else conn.rollback()
    assert len(q.ids()) == (3 if commit else 0)


@pytest.mark.parametrize("dialect", ["postgres", "mysql"])
@pytest.mark.parametrize("commit", [True, False], ids=["commit", "rollback"])
def test_async_session_insert_joins_the_orm_transaction(queue: MakeQueue, dialect: str,
                                                        commit: bool) -> None:
    q = queue(dialect, SHAPE)
    sync_engine = sa.create_engine(url(q))
    Base.metadata.create_all(sync_engine)

    async def main() -> None:
        engine = create_async_engine(url(q, asynchronous=True))
        try:
            async with AsyncSession(engine) as session:
                session.add(Order(note="paid"))
                await session.flush()
                await enqueue_three_async(q, session)
                await (session.commit() if commit else session.rollback())
            # An AsyncConnection that ran nothing yet: a job alone, settled by the same call.
            async with engine.connect() as conn:
                await q.mod.insert_async(conn, q.new())
                await (conn.commit() if commit else conn.rollback())
        finally:
            await engine.dispose()

    asyncio.run(main())
    assert orders(sync_engine) == (["paid"] if commit else [])
    assert len(q.ids()) == (4 if commit else 0)
    sync_engine.dispose()



# -- notify(), state() and cancel(): what a service calls in its own transaction too -----------

NOW = dt.datetime(2100, 1, 1, tzinfo=dt.UTC)  # past every new row's due time and lease


@pytest.mark.parametrize("sa_queue", DIALECTS, indirect=True)
def test_notify_state_and_cancel_take_a_session_and_join_its_transaction(
        sa_queue: tuple[Queue, sa.Engine]) -> None:
    q, engine = sa_queue
    listener = psycopg.connect(q.target, autocommit=True) if q.pg else None
    if listener is not None:
        listener.execute(f'LISTEN "{q.mod.CHANNEL}"')
    with Session(engine) as session:
        new_id = q.mod.insert(session, q.new())
        if q.pg:
            q.mod.notify(session)
        # Read in the Session's transaction: the job it has not committed yet.
        found = call(q.mod.state, session, id=new_id, now=NOW)
        assert found is not None and (found.id, found.state) == (new_id, "ready")
        if listener is not None:
            assert list(listener.notifies(timeout=0.2)) == []  # nothing before the commit
        session.commit()
    if listener is not None:
        (note,) = list(listener.notifies(timeout=5, stop_after=1))
        assert note.channel == q.mod.CHANNEL
        listener.close()
    with Session(engine) as session:
        assert call(q.mod.cancel, session, id=new_id, now=NOW) is True
        session.rollback()  # the cancel goes with the Session's rollback
    assert q.ids() == [new_id]
    with engine.connect() as conn:  # a Connection that ran nothing yet
        assert call(q.mod.cancel, conn, id=new_id, now=NOW) is True
        conn.commit()
    assert q.ids() == []


@pytest.mark.parametrize("dialect", ["postgres", "mysql"])
def test_the_async_twins_of_notify_state_and_cancel_take_an_async_session(
        queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, SHAPE)

    async def main() -> int:
        engine = create_async_engine(url(q, asynchronous=True))
        try:
            async with AsyncSession(engine) as session:
                new_id: int = await q.mod.insert_async(session, q.new())
                if q.pg:
                    await q.mod.notify_async(session)
                found = await call(q.mod.state_async, session, id=new_id, now=NOW)
                assert found is not None and found.state == "ready"
                await session.commit()
            async with AsyncSession(engine) as session:
                assert await call(q.mod.cancel_async, session, id=new_id, now=NOW) is True
                await session.rollback()
            return new_id
        finally:
            await engine.dispose()

    new_id = asyncio.run(main())
    assert q.ids() == [new_id]  # the cancel went with the rollback


def test_notify_given_an_engine_names_what_it_needs(queue: MakeQueue) -> None:
    q = queue("postgres", SHAPE)
    engine = sa.create_engine(url(q))
    with pytest.raises(WrongConnection) as err:
        q.mod.notify(engine)
    assert str(err.value) == (f"{q.mod.TABLE}.notify() needs {NEEDS['postgres']}; "
                              "got sqlalchemy.engine.base.Engine")
    engine.dispose()


# -- Django ------------------------------------------------------------------------------------

def django_connection(q: Queue) -> Any:
    """Django's connection to the queue's database, as `django.db.connections[alias]` in a
    process configured with it (one alias per test database)."""
    from django.conf import settings

    if q.mysql:
        # Django's MySQL backend loads MySQLdb (mysqlclient); PyMySQL stands in for it. Its
        # submodules are named under MySQLdb too: imported afresh there they would replace
        # pymysql.err (and the rest) with copies, whose errors the other tests would not catch.
        import pymysql.constants.CLIENT
        import pymysql.constants.FIELD_TYPE
        import pymysql.converters  # noqa: F401

        pymysql.install_as_MySQLdb()
        for name, module in list(sys.modules.items()):
            if name.startswith("pymysql."):
                sys.modules.setdefault("MySQLdb." + name.removeprefix("pymysql."), module)
    if not settings.configured:
        settings.configure(DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3",
                                                  "NAME": ":memory:"}},
                           USE_TZ=True, INSTALLED_APPS=[])
        import django

        django.setup()
    from django.db import connections

    u = url(q)
    alias = f"{q.dialect}_{u.database}".replace("/", "_").replace(".", "_")
    engine = {"postgres": "postgresql", "mysql": "mysql", "sqlite": "sqlite3"}[q.dialect]
    db = {"ENGINE": f"django.db.backends.{engine}", "NAME": u.database}
    if q.dialect != "sqlite":
        db.update(HOST=u.host, PORT=str(u.port), USER=u.username, PASSWORD="")
    filled = connections.configure_settings({"default": connections.settings["default"],
                                             alias: db})
    connections.settings[alias] = filled[alias]
    return connections[alias]


@pytest.fixture
def dj(queue: MakeQueue, request: pytest.FixtureRequest) -> Iterator[tuple[Queue, Any]]:
    q = queue(request.param, SHAPE)
    conn = django_connection(q)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, note VARCHAR(40))")
    yield q, conn
    conn.close()
    from django.db import connections

    with suppress(AttributeError):
        del connections[conn.alias]


def django_orders(q: Queue) -> list[str]:
    return [r[0] for r in q.db.rows("SELECT note FROM orders")]


@pytest.mark.parametrize("dj", DIALECTS, indirect=True)
@pytest.mark.parametrize("commit", [True, False], ids=["commit", "rollback"])
def test_django_atomic_block_settles_the_jobs(dj: tuple[Queue, Any], commit: bool) -> None:
    from django.db import transaction

    q, conn = dj

    class Rollback(Exception):
        pass

    with suppress(Rollback), transaction.atomic(using=conn.alias):
        with conn.cursor() as cur:
            cur.execute("INSERT INTO orders (id, note) VALUES (1, 'paid')")
        enqueue_three(q, conn)
        if not commit:
            raise Rollback
    assert django_orders(q) == (["paid"] if commit else [])
    assert len(q.ids()) == (3 if commit else 0)


@pytest.mark.parametrize("dj", ["postgres"], indirect=True)
def test_django_autocommit_outside_atomic_commits_at_once(dj: tuple[Queue, Any]) -> None:
    """Outside atomic() Django runs in autocommit: the job commits as any Django write does."""
    q, conn = dj
    q.mod.insert(conn, q.new())
    assert len(q.ids()) == 1


# -- the wrong kind ----------------------------------------------------------------------------

# What each module's plain enqueue functions need, as their errors say it.
NEEDS = {
    "postgres": "a psycopg connection, a SQLAlchemy Connection or Session over psycopg, or a "
                "Django connection to PostgreSQL",
    "mysql": "a PyMySQL connection, a SQLAlchemy Connection or Session over PyMySQL "
             "(mysql+pymysql), or a Django connection to MySQL on PyMySQL "
             "(pymysql.install_as_MySQLdb())",
    "sqlite": "a sqlite3 connection, a SQLAlchemy Connection or Session over sqlite3 "
              "(sqlite+pysqlite), or a Django connection to SQLite",
}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_connection_of_the_wrong_kind_is_named(queue: MakeQueue, dialect: str,
                                                 tmp_path: Any) -> None:
    q = queue(dialect, SHAPE)
    table = q.mod.TABLE
    engine = sa.create_engine(url(q))
    with pytest.raises(TypeError) as err:
        q.mod.insert(engine, q.new())
    assert isinstance(err.value, WrongConnection)
    assert str(err.value) == (f"{table}.insert() needs {NEEDS[dialect]}; "
                              "got sqlalchemy.engine.base.Engine")
    engine.dispose()
    # Another database's driver connection, bare and under a Session.
    if dialect == "sqlite":
        other_q = queue("postgres", SHAPE)
        other, other_url = other_q.connect(), url(other_q)
    else:
        other = sqlite3.connect(tmp_path / "other.db")
        other_url = sa.URL.create("sqlite+pysqlite", database=str(tmp_path / "other.db"))
    other_name = f"{type(other).__module__}.{type(other).__qualname__}"
    with pytest.raises(WrongConnection) as err:
        q.mod.insert_many(other, [q.new()])
    assert str(err.value) == f"{table}.insert_many() needs {NEEDS[dialect]}; got {other_name}"
    other_engine = sa.create_engine(other_url)
    driver = "psycopg.Connection" if dialect == "sqlite" else "sqlite3.Connection"
    with Session(other_engine) as session, pytest.raises(WrongConnection) as err:
        q.mod.insert_unique(session, q.new())
    assert str(err.value) == (f"{table}.insert_unique() needs {NEEDS[dialect]}; "
                              f"got sqlalchemy.orm.session.Session over {driver}")
    other_engine.dispose()
    other.close()
    if dialect == "sqlite":
        return
    # The async twins take no sync connection, not even their driver's plain one.
    with pytest.raises(WrongConnection, match=rf"^{table}\.insert_async\(\) needs an? \w+ "):
        asyncio.run(q.mod.insert_async(q.connect(), q.new()))


def test_modules_enqueue_where_neither_sqlalchemy_nor_django_is_installed(
        queue: MakeQueue) -> None:
    q = queue("sqlite", SHAPE)
    script = f"""
import datetime, importlib.util, sqlite3, sys
sys.modules["sqlalchemy"] = sys.modules["django"] = None  # as if not installed
spec = importlib.util.spec_from_file_location("jobs", {q.mod.__file__!r})
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
conn = sqlite3.connect({q.target!r})
mod.insert(conn, mod.NewRow(**{attrs.asdict(q.new())!r}))
conn.commit()
print(sorted(m for m in sys.modules if m.startswith(("sqlalchemy", "django"))))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "['django', 'sqlalchemy']"  # only the blocked entries
    assert len(q.ids()) == 1


# -- a transactional handler's connection as a Session ---------------------------------------

@pytest.mark.parametrize("sa_queue", DIALECTS, indirect=True)
def test_a_transactional_handler_writes_through_a_session(sa_queue: tuple[Queue, sa.Engine]
                                                          ) -> None:
    """The session's writes commit with the ack; its rollback() undoes its own writes; a
    handler that raises takes them back with the job's transaction."""
    q, engine = sa_queue
    conn = q.connect()
    due = dt.datetime.now(dt.UTC)
    q.mod.insert_many(conn, [q.new(payload=p, retry_after=due) for p in ("keep", "undo",
                                                                          "fail")])
    conn.commit()

    def write(session: Any, job: Job[Any]) -> list[str]:
        """What the handler does with its session; returns the notes it wrote, for a
        handler that must flush them first."""
        session.add(Order(id=len(job.payload) * 10 + (job.attempt or 1),
                          note=f"{job.payload} {job.attempt}"))
        if job.payload == "undo" and job.attempt == 1:
            return ["rollback"]
        if job.payload == "fail" and job.attempt == 1:
            return ["raise"]
        return []

    def plain(job: Job[Any]) -> None:
        with job_session(job) as session:
            then = write(session, job)
            if then == ["rollback"]:
                session.rollback()  # the first note goes; the second stays
                session.add(Order(id=99, note="undo again"))
            elif then == ["raise"]:
                session.flush()
                raise RuntimeError("the first attempt fails after its write")

    async def asynchronous(job: Job[Any]) -> None:
        async with job_async_session(job) as session:
            then = write(session, job)
            if then == ["rollback"]:
                await session.rollback()
                session.add(Order(id=99, note="undo again"))
            elif then == ["raise"]:
                await session.flush()
                raise RuntimeError("the first attempt fails after its write")

    worker = Worker(q.mod.DESCRIPTOR, asynchronous if q.pg else plain, database=q.target,
                    transactional=True, backoff=Backoff(base=0.01), listen=False)

    async def main() -> None:
        await worker.start()
        try:
            async with asyncio.timeout(60):
                while worker.stats.acked < 3:
                    await asyncio.sleep(0.01)
        finally:
            await worker.shutdown()

    asyncio.run(main())
    assert sorted(orders(engine)) == ["fail 2", "keep 1", "undo again"]
    assert worker.stats.retried == 1


def test_a_job_without_a_connection_has_no_session(queue: MakeQueue) -> None:
    job: Job[Any] = Job(payload=None, id=7, attempt=1, row=None, group=None, headers={},
                        connection=None, worker="jobs")
    with pytest.raises(WrongConnection, match="job 7 has no connection: only a transactional "
                                              "worker"), job_session(job):
        pass


# -- an enqueue of this process wakes its workers once it commits ----------------------------

@pytest.mark.parametrize("how", ["session", "connection", "django"])
@pytest.mark.parametrize("dialect", ["sqlite", "mysql"])
def test_an_enqueue_through_the_orm_wakes_this_process_workers_at_commit(
        queue: MakeQueue, dialect: str, how: str) -> None:
    """No NOTIFY on SQLite and MySQL/MariaDB: a worker polling once an hour still picks up a
    job enqueued in its process through SQLAlchemy or Django as soon as that commits."""
    q = queue(dialect, SHAPE)
    due = dt.datetime.now(dt.UTC)

    def enqueue() -> None:
        if how == "django":
            from django.db import transaction

            dj = django_connection(q)
            with transaction.atomic(using=dj.alias):
                q.mod.insert(dj, q.new(retry_after=due))
            return
        engine = sa.create_engine(url(q))
        try:
            if how == "session":
                with Session(engine) as session:
                    q.mod.insert(session, q.new(retry_after=due))
                    session.commit()
            else:
                with engine.connect() as conn:
                    q.mod.insert(conn, q.new(retry_after=due))
                    conn.commit()
        finally:
            engine.dispose()

    assert asyncio.run(picked_up_after(q, enqueue)) < 60


@pytest.mark.parametrize("dialect", ["sqlite", "mysql"])
def test_a_connection_whose_commit_lands_late_still_wakes_the_workers(queue: MakeQueue,
                                                                    dialect: str) -> None:
    """A SQLAlchemy Connection tells of its commit before the COMMIT reaches the server: here
    the COMMIT lands 0.4 s after that (a listener of the application's holds it), so the claim
    woken at once finds nothing; a worker polling once an hour still picks the job up within
    seconds, woken again after the commit had time to land."""
    q = queue(dialect, SHAPE)
    due = dt.datetime.now(dt.UTC)

    def enqueue() -> None:
        engine = sa.create_engine(url(q))
        try:
            with engine.connect() as conn:
                q.mod.insert(conn, q.new(retry_after=due))
                # Registered after the insert's: runs after the wake-up, before the COMMIT.
                sa.event.listen(conn, "commit", lambda c: time.sleep(0.4), once=True)
                conn.commit()
        finally:
            engine.dispose()

    assert asyncio.run(picked_up_after(q, enqueue)) < 10


async def picked_up_after(q: Queue, enqueue: Callable[[], None]) -> float:
    """Seconds from `enqueue` (run in a thread) until a worker polling once an hour, whose first
    claim found nothing, starts the job."""
    picked = asyncio.Event()

    async def handler(job: Job[Any]) -> None:
        picked.set()

    worker = Worker(q.mod.DESCRIPTOR, handler, database=q.target, poll_interval=3600,
                    listen=False)
    await worker.start()
    try:
        await asyncio.sleep(0.2)  # its first claim found nothing: it waits for an hour
        started = time.monotonic()
        await asyncio.to_thread(enqueue)
        async with asyncio.timeout(60):  # reached only on failure; the poll is an hour
            await picked.wait()
        return time.monotonic() - started
    finally:
        await worker.shutdown()
