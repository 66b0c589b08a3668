"""A worker process of the fault suite.

    python -m tests.faults.child MODULE DATABASE --dialect D --log FILE [options]

MODULE is the path of a module built from tests/faults/shapes.py, DATABASE a PostgreSQL conninfo,
a MySQL/MariaDB URL or a SQLite file. The worker is transactional: for every delivery of a healthy
job the handler sleeps --job-ms, then writes one row (job id, this pid, attempt, time) to the
ledger table on `job.connection`, so the row commits with the settlement or not at all. A job
whose payload says "selfkill" SIGKILLs this process instead. Events go to the log (eventlog.py).

"settled" and "discarded" are observed on the driver's connections (the runtime has no hook for
a settlement): PostgreSQL and MySQL/MariaDB by wrapping the driver's commit and rollback, SQLite by
a trace callback on the handler's connection that sees its COMMIT or ROLLBACK.

The process may run with its clock off (the fleet preloads libfaketime): its log and ledger then
keep the suite's time all the same, this process's monotonic clock (libfaketime leaves it alone)
plus `--wall-anchor`, the suite's wall clock minus its monotonic clock. `ready` logs how far this
process's own clock is off from that. Waits are relative (select): libfaketime fails time.sleep.
`--own-clock` gives the worker this host's clock instead of the database's, to show what skew
does without the runtime's correction (never in a passing scenario).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import logging
import os
import re
import select
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import attrs

from inboxgen import Job, Worker, ack
from inboxgen.errors import LeaseLost
from inboxgen.runtime.clock import SystemClock

from .eventlog import EventLog

LEDGER = "fault_ledger"  # shapes.LEDGER (not imported: the build machinery is slow to import)


def pause(seconds: float) -> None:
    """A relative wait: under libfaketime, time.sleep fails (EINVAL)."""
    select.select([], [], [], max(seconds, 0.0))


def _conn(job: Job[Any]) -> Any:
    """The transactional handler's connection (always there: the worker is transactional)."""
    assert job.connection is not None
    return job.connection


def load_module(path: str) -> Any:
    name = f"_inboxgen_fault_{Path(path).stem}_{os.getpid()}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class Settlements:
    """Effects written on a connection and not yet committed; the commit logs them settled."""

    def __init__(self, events: EventLog) -> None:
        self.events = events
        self._pending: dict[int, list[tuple[Any, Any]]] = {}
        self._lock = threading.Lock()
        self._traced: set[int] = set()

    def note(self, conn: Any, job_id: Any, attempt: Any) -> None:
        with self._lock:
            self._pending.setdefault(id(conn), []).append((job_id, attempt))

    def ended(self, conn: Any, committed: bool) -> None:
        with self._lock:
            done = self._pending.pop(id(conn), [])
        for job_id, attempt in done:
            self.events.write("settled" if committed else "discarded", job_id, attempt)

    def patch_postgres(self) -> None:
        import psycopg

        commit, rollback = psycopg.AsyncConnection.commit, psycopg.AsyncConnection.rollback
        tracker = self

        async def traced_commit(conn: Any) -> None:
            try:
                await commit(conn)
            except BaseException:
                tracker.ended(conn, False)
                raise
            tracker.ended(conn, True)

        async def traced_rollback(conn: Any) -> None:
            tracker.ended(conn, False)
            await rollback(conn)

        psycopg.AsyncConnection.commit = traced_commit  # type: ignore[method-assign,assignment]
        psycopg.AsyncConnection.rollback = traced_rollback  # type: ignore[method-assign,assignment]

    def patch_mysql(self) -> None:
        import pymysql.connections

        cls = pymysql.connections.Connection
        commit, rollback = cls.commit, cls.rollback
        tracker = self

        def traced_commit(conn: Any) -> None:
            try:
                commit(conn)
            except BaseException:
                tracker.ended(conn, False)
                raise
            tracker.ended(conn, True)

        def traced_rollback(conn: Any) -> None:
            tracker.ended(conn, False)
            rollback(conn)

        cls.commit = traced_commit  # type: ignore[method-assign,assignment]
        cls.rollback = traced_rollback  # type: ignore[method-assign,assignment]

    def trace_sqlite(self, conn: Any) -> None:
        if id(conn) in self._traced:
            return
        self._traced.add(id(conn))

        def seen(statement: str) -> None:
            word = statement.strip().upper()
            if word == "COMMIT" or word.startswith("COMMIT "):
                self.ended(conn, True)
            elif word == "ROLLBACK":
                self.ended(conn, False)

        conn.set_trace_callback(seen)


class WorkerEvents(logging.Handler):
    """Turns the worker's own log records into events: LeaseLost and dead letters."""

    _ROW = re.compile(r"\brow (\S+?)[ :,;)]")

    def __init__(self, events: EventLog) -> None:
        super().__init__(logging.WARNING)
        self.events = events

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
            args = record.args if isinstance(record.args, tuple) else ()
            found = self._ROW.search(message + " ")
            row = found.group(1) if found else "?"
            if any(isinstance(a, LeaseLost) for a in args):
                self.events.write("lease_lost", row)
            elif "moved to the dead letters" in message:
                note = message.split(":", 2)[-1].strip().replace("\n", " ")
                self.events.write("dead", row, note)
        except Exception:  # a log line must never break the worker
            pass


def watchdog(max_seconds: float) -> None:
    """A worker process never outlives the suite: when its parent is gone (it was reparented) or
    it ran `max_seconds`, it SIGTERMs itself, and SIGKILLs itself 15 s later."""
    parent = os.getppid()
    began = time.monotonic()

    def watch() -> None:
        while os.getppid() == parent and time.monotonic() - began < max_seconds:
            pause(0.5)
        os.kill(os.getpid(), signal.SIGTERM)
        pause(15)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, daemon=True, name="watchdog").start()


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="a worker process of the fault suite")
    p.add_argument("module")
    p.add_argument("database")
    p.add_argument("--dialect", required=True, choices=["postgres", "mysql", "sqlite"])
    p.add_argument("--log", required=True)
    p.add_argument("--go", help="wait (at most 60 s) until this file exists")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--lease", type=int, default=2)
    p.add_argument("--poll-interval", type=float, default=0.05)
    p.add_argument("--shutdown-timeout", type=float, default=5.0)
    p.add_argument("--job-ms", type=float, default=5.0)
    p.add_argument("--no-fsync", action="store_true")
    p.add_argument("--max-seconds", type=float, default=900.0,
                   help="stop (SIGTERM to itself, then SIGKILL) after this long at most")
    # A deliberately broken handler, to show the checker catches what it should (PostgreSQL):
    # "outside" commits the effect on a connection of its own before the settlement.
    p.add_argument("--effects", choices=["transaction", "outside"], default="transaction")
    p.add_argument("--plain", action="store_true", help="handlers not transactional")
    p.add_argument("--skip-every", type=int, default=0,
                   help="ack every Nth job (by id) without writing its effect")
    p.add_argument("--wall-anchor", type=float, default=None,
                   help="log times as time.monotonic() + this (the suite's clock)")
    p.add_argument("--own-clock", action="store_true",
                   help="due times and leases by this host's clock, not the database's")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    watchdog(args.max_seconds)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s")
    anchor = args.wall_anchor

    def now() -> float:
        return time.time() if anchor is None else time.monotonic() + anchor

    events = EventLog(args.log, fsync=not args.no_fsync, clock=now)
    module = load_module(args.module)
    settlements = Settlements(events)
    logging.getLogger("inboxgen.worker").addHandler(WorkerEvents(events))
    pid = os.getpid()

    def job_seconds(job: Job[Any]) -> float:
        ms = job.payload.get("ms") if isinstance(job.payload, dict) else None
        return (args.job_ms if ms is None else float(ms)) / 1000.0
    ph = "?" if args.dialect == "sqlite" else "%s"
    insert = f"INSERT INTO {LEDGER} (job_id, pid, attempt, at) VALUES ({ph}, {ph}, {ph}, {ph})"

    def begin(job: Job[Any]) -> None:
        events.write("claimed", job.id, job.attempt)
        kind = job.payload.get("kind") if isinstance(job.payload, dict) else None
        if kind == "selfkill":
            events.write("selfkill", job.id, job.attempt, sync=True)
            os.kill(pid, signal.SIGKILL)
            pause(10)  # not reached
        events.write("started", job.id, job.attempt)

    outside: list[Any] = []

    async def pg_handler(job: Job[Any]) -> Any:
        begin(job)
        if job_seconds(job):
            await asyncio.sleep(job_seconds(job))
        if args.skip_every and job.id % args.skip_every == 0:
            return ack()
        if args.effects == "outside":
            import psycopg

            for again in (True, False):
                if not outside or outside[0].closed:
                    outside[:] = [await psycopg.AsyncConnection.connect(args.database,
                                                                        autocommit=True)]
                try:
                    await outside[0].execute(insert, (job.id, pid, job.attempt, now()))
                    break
                except psycopg.OperationalError:
                    # The connection went with a server restart or a terminated session: the
                    # worker claimed this row, so the server is back; connect again once.
                    await outside[0].close()
                    if not again:
                        raise
            events.write("settled", job.id, job.attempt)
            return ack()
        await _conn(job).execute(insert, (job.id, pid, job.attempt, now()))
        settlements.note(job.connection, job.id, job.attempt)
        return ack()

    own = threading.local()  # plain handlers (threads): a connection of each thread's own

    def mysql_outside(job: Job[Any]) -> Any:
        import pymysql

        from inboxgen.runtime.backends import mysql_connect_args

        for again in (True, False):
            if getattr(own, "conn", None) is None:
                own.conn = pymysql.connect(**mysql_connect_args(args.database), autocommit=True)
            try:
                with own.conn.cursor() as cur:
                    cur.execute(insert, (job.id, pid, job.attempt, now()))
                break
            except pymysql.OperationalError:
                own.conn = None  # gone with a restart: connect again once
                if not again:
                    raise
        events.write("settled", job.id, job.attempt)
        return ack()

    def sqlite_outside(job: Job[Any]) -> Any:
        import sqlite3

        if getattr(own, "conn", None) is None:
            own.conn = sqlite3.connect(args.database, isolation_level=None, timeout=30)
        own.conn.execute(insert, (job.id, pid, job.attempt, now()))  # autocommit
        events.write("settled", job.id, job.attempt)
        return ack()

    def mysql_handler(job: Job[Any]) -> Any:
        begin(job)
        pause(job_seconds(job))
        if args.effects == "outside":
            return mysql_outside(job)
        with _conn(job).cursor() as cur:
            cur.execute(insert, (job.id, pid, job.attempt, now()))
        settlements.note(job.connection, job.id, job.attempt)
        return ack()

    def sqlite_handler(job: Job[Any]) -> Any:
        begin(job)
        pause(job_seconds(job))
        if args.effects == "outside":
            return sqlite_outside(job)
        settlements.trace_sqlite(job.connection)
        _conn(job).execute(insert, (job.id, pid, job.attempt, now()))
        settlements.note(job.connection, job.id, job.attempt)
        return ack()

    if args.dialect == "postgres":
        settlements.patch_postgres()
        handler: Any = pg_handler
    elif args.dialect == "mysql":
        settlements.patch_mysql()
        handler = mysql_handler
    else:
        handler = sqlite_handler

    worker = Worker(module.DESCRIPTOR, handler, database=args.database, workers=args.workers,
                    batch=args.batch, lease=args.lease, poll_interval=args.poll_interval,
                    shutdown_timeout=args.shutdown_timeout, transactional=not args.plain,
                    clock=SystemClock() if args.own_clock else None)

    # Until run() installs its own handlers, a SIGTERM stops the worker before it serves.
    signal.signal(signal.SIGTERM, lambda *_: worker.stop())
    events.write("ready", pid, f"{time.time() - now():.3f}")
    if args.go:
        deadline = time.monotonic() + 60
        while not os.path.exists(args.go):
            if time.monotonic() > deadline:
                events.write("exit", json.dumps({"error": "no go"}))
                return 3
            pause(0.005)
    worker.run()
    events.write("exit", json.dumps(attrs.asdict(worker.stats)), sync=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
