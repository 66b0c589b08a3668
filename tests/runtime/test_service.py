"""A Service runs several queues in one process: one pool per PostgreSQL database, sized as
documented and never exceeded; start-up hooks before any queue checks its table; every queue
that cannot start named at once; one shutdown for all; `inboxgen serve` runs one."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from dbcases import Layout, MakeQueue, mysql_connect

from inboxgen import Job, Service, ServiceStartFailed, WorkerConfigError

REPO = Path(__file__).resolve().parents[2]


def _due() -> dt.datetime:
    return dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)


def _add(q: Any, n: int, **fields: Any) -> None:
    conn = q.connect()
    q.mod.insert_many(conn, [q.new(retry_after=_due(), **fields) for _ in range(n)])
    conn.commit()


def _sessions_back_to(dsn: str, count: int) -> int:
    """The database's other sessions once they are back to `count` (a closed connection's
    server process takes a moment to go), or after 5 s."""
    deadline = time.monotonic() + 5
    while (now := _pg_sessions(dsn)) != count and time.monotonic() < deadline:
        time.sleep(0.05)
    return now


def _pg_sessions(dsn: str) -> int:
    """Client sessions on the database other than this one (not an autovacuum worker that
    happens to be vacuuming one of its tables)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = "
                           "current_database() AND pid <> pg_backend_pid() "
                           "AND backend_type = 'client backend'").fetchone()
    assert row is not None
    return int(row[0])


def test_three_queues_on_two_databases_drain_within_the_pool(queue: MakeQueue) -> None:
    pg = queue("postgres", Layout(group=True, form="row_lock", processed=False))
    lite = queue("sqlite", Layout(form="lease", processed=False))
    _add(pg, 60, grp="a")
    _add(pg, 40, grp="b")
    _add(lite, 50)
    seen: dict[str, int] = {"a": 0, "b": 0, "lite": 0}

    def counting(key: str) -> Any:
        def handler(job: Job[Any]) -> None:
            time.sleep(0.005)
            seen[key] += 1
        return handler

    service = Service(pg.target, shutdown_timeout=5)
    service.queue(pg.mod.DESCRIPTOR, counting("a"), group="a", workers=3)
    service.queue(pg.mod.DESCRIPTOR, counting("b"), group="b", workers=2)
    service.queue(lite.mod.DESCRIPTOR, counting("lite"), database=lite.target, workers=2)
    # The rule: each queue's workers and one more each.
    assert service.pool_size() == (3 + 1) + (2 + 1)
    mine = _pg_sessions(pg.target)  # the test's own (the rows were added on them)
    most = 0

    async def run() -> float:
        nonlocal most
        await service.start()
        try:
            deadline = time.monotonic() + 30
            while sum(seen.values()) < 150 and time.monotonic() < deadline:
                most = max(most, await asyncio.to_thread(_pg_sessions, pg.target) - mine)
                await asyncio.sleep(0.02)
        finally:
            began = time.monotonic()
            await service.shutdown()
        return time.monotonic() - began

    took = asyncio.run(run())
    assert seen == {"a": 60, "b": 40, "lite": 50}
    assert pg.rows() == [] and lite.rows() == []
    # The pool, plus the one listening session the service keeps on the database.
    assert 0 < most <= service.pool_size() + 1
    assert took < 5
    assert _sessions_back_to(pg.target, mine) == mine  # the pool is closed


def test_an_enqueue_with_notify_wakes_its_queue_at_once(queue: MakeQueue) -> None:
    """The queues of one database share the service's listening session: a job enqueued with
    notify=True is taken at once by its group's queue, not at the next poll."""
    pg = queue("postgres", Layout(group=True, form="lease", processed=False))
    ran: dict[str, float] = {}
    got = threading.Event()

    def handler(group: str) -> Any:
        def run(job: Job[Any]) -> None:
            ran[group] = time.monotonic()
            got.set()
        return run

    service = Service(pg.target)
    for group in ("a", "b"):
        service.queue(pg.mod.DESCRIPTOR, handler(group), group=group, poll_interval=300)

    async def run() -> float:
        await service.start()
        try:
            await asyncio.sleep(0.5)  # every slot has claimed nothing and waits
            conn = await asyncio.to_thread(pg.connect)
            sent = time.monotonic()
            pg.mod.insert(conn, pg.new(grp="b", retry_after=_due()), notify=True)
            conn.commit()
            await asyncio.to_thread(got.wait, 60)
            return sent
        finally:
            await service.shutdown()

    sent = asyncio.run(run())
    assert list(ran) == ["b"]
    # Against the poll, not a latency: a loaded machine may take seconds to run the wake-up.
    assert ran["b"] - sent < 60  # not the 300 s poll


def test_every_queue_that_cannot_start_is_named_at_once(queue: MakeQueue) -> None:
    pg = queue("postgres", Layout(group=True, form="lease"))
    lite = queue("sqlite", Layout(form="lease"))
    for q in (pg, lite):
        conn = q.connect()
        conn.execute(f"DROP TABLE {q.table_sql()}")
        conn.commit()
    mine = _pg_sessions(pg.target)
    service = Service(pg.target, connect_timeout=5)
    service.queue(pg.mod.DESCRIPTOR, lambda job: None, group="a")
    service.queue(lite.mod.DESCRIPTOR, lambda job: None, database=lite.target)
    with pytest.raises(ServiceStartFailed) as raised:
        asyncio.run(service.start())
    message = str(raised.value)
    assert message.startswith("2 queue(s) cannot start: ")
    assert "table jobs" in message and message.count("statement does not prepare") == 2
    assert len(raised.value.problems) == 2
    assert _sessions_back_to(pg.target, mine) == mine  # what was opened is closed


def test_start_up_hooks_run_before_the_queues_check_their_tables(queue: MakeQueue) -> None:
    """The order a service needs: the migrations run in an on_startup hook, so the queues'
    start-up check sees the schema this release reads."""
    pg = queue("postgres", Layout(group=True, form="lease"))
    _add(pg, 1, grp="a")
    conn = pg.connect()
    conn.execute("ALTER TABLE jobs RENAME TO jobs_old")
    conn.commit()
    order: list[str] = []
    service = Service(pg.target)

    @service.on_startup
    async def migrate() -> None:
        order.append("migrate")
        with psycopg.connect(pg.target) as c:
            c.execute("ALTER TABLE jobs_old RENAME TO jobs")

    @service.on_shutdown
    def closing() -> None:
        order.append("shutdown hook")

    done = threading.Event()

    def handler(job: Job[Any]) -> None:
        order.append("job")
        done.set()

    service.queue(pg.mod.DESCRIPTOR, handler, group="a")

    async def run() -> None:
        await service.start()
        try:
            await asyncio.to_thread(done.wait, 10)
        finally:
            await service.shutdown()

    asyncio.run(run())
    assert order == ["migrate", "job", "shutdown hook"]


def test_a_queue_added_twice_under_one_name_is_refused(queue: MakeQueue) -> None:
    pg = queue("postgres", Layout(group=True, form="lease"))
    service = Service(pg.target)
    service.queue(pg.mod.DESCRIPTOR, lambda job: None, group="a")
    with pytest.raises(WorkerConfigError, match="two queues are named"):
        service.queue(pg.mod.DESCRIPTOR, lambda job: None, group="a")
    with pytest.raises(WorkerConfigError, match="no database"):
        Service().queue(pg.mod.DESCRIPTOR, lambda job: None, group="a")


def test_inboxgen_serve_runs_a_service_until_sigterm(queue: MakeQueue, tmp_path: Path) -> None:
    pg = queue("postgres", Layout(group=True, form="lease", processed=False))
    _add(pg, 5, grp="a")
    _add(pg, 5, grp="b")
    module = pg.mod.__name__
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("")
    (tmp_path / "app" / "queues.py").write_text(textwrap.dedent(f"""
        import os, sys
        from inboxgen import Service
        mod = sys.modules.get({module!r})
        if mod is None:
            import importlib.util
            spec = importlib.util.spec_from_file_location({module!r}, {pg.mod.__file__!r})
            mod = importlib.util.module_from_spec(spec)
            sys.modules[{module!r}] = mod
            spec.loader.exec_module(mod)

        def work(job):
            sys.stdout.write(f"ran {{job.id}}\\n")  # one write: handlers run on threads
            sys.stdout.flush()

        service = Service(os.environ["QUEUE_DSN"])
        service.queue(mod.DESCRIPTOR, work, group="a")
        service.queue(mod.DESCRIPTOR, work, group="b")
    """))
    proc = subprocess.Popen(
        [sys.executable, "-m", "inboxgen", "serve", "app.queues:service"], cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "QUEUE_DSN": pg.target,
             "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])})
    try:
        deadline = time.monotonic() + 20
        while (left := pg.rows()) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    assert left == [], err
    assert proc.returncode == 0, err
    assert out.count("ran ") == 10
    assert "serving 2 queue(s)" in err


def _mysql_sessions(target: str) -> int:
    """Sessions on the MariaDB database other than this one (its processlist)."""
    conn = mysql_connect(target)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST "
                        "WHERE DB = DATABASE() AND ID <> CONNECTION_ID()")
            (count,) = cur.fetchone()
    finally:
        conn.close()
    return int(count)


@pytest.mark.parametrize("form", ["row_lock", "lease"])
def test_mariadb_queues_keep_within_the_documented_connections(
        queue: MakeQueue, form: str) -> None:
    """MariaDB queues keep connections of their own: at most one per worker slot and one
    more each, the pool rule's count."""
    q = queue("mysql", Layout(group=True, form=form, processed=False))
    _add(q, 60, grp="a")
    _add(q, 40, grp="b")
    done = {"a": 0, "b": 0}

    def handler(group: str) -> Any:
        def run(job: Job[Any]) -> None:
            time.sleep(0.005)
            done[group] += 1
        return run

    service = Service(q.target, shutdown_timeout=5)
    service.queue(q.mod.DESCRIPTOR, handler("a"), group="a", workers=3)
    service.queue(q.mod.DESCRIPTOR, handler("b"), group="b", workers=2)
    mine = _mysql_sessions(q.target)
    most = 0

    async def run() -> None:
        nonlocal most
        await service.start()
        try:
            deadline = time.monotonic() + 30
            while sum(done.values()) < 100 and time.monotonic() < deadline:
                most = max(most, await asyncio.to_thread(_mysql_sessions, q.target) - mine)
                await asyncio.sleep(0.02)
        finally:
            await service.shutdown()

    asyncio.run(run())
    assert done == {"a": 60, "b": 40}
    assert 0 < most <= service.pool_size()
