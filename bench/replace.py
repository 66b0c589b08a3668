"""What an enqueue costs through insert_replace() and insert_debounced() against insert(), each
call in a transaction of its own (as a web request enqueues), on private servers with stock
durability (PostgreSQL 15 with fsync and synchronous_commit on; MariaDB with
innodb_flush_log_at_trx_commit = 1) and a SQLite file (WAL, synchronous=NORMAL): the modules of
the golden case tests/generate/golden/replace (a lease on PostgreSQL and SQLite, a counted row
lock on MariaDB) on tables holding N queued rows. Four ways, in turns, N calls each:

- insert: a new row (no unique key asked for);
- replace, new key: insert_replace() of a key no row has (REPLACE finds nothing, then
  REPLACE_INSERT);
- replace, queued key: insert_replace() of a key whose row is queued (REPLACE alone; MariaDB
  REPLACE_PICK and REPLACE);
- debounce, queued key: insert_debounced() of the same.

Prints microseconds a call (commit included) and the ratio to insert. Not a test: figures
depend on the machine.

    python bench/replace.py [--calls 2000] [--dialects postgres,mysql,sqlite]
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

CASE = REPO / "tests" / "generate" / "golden" / "replace"
MODULES = {"postgres": ("pg_debounce_leases", "pg.sql"), "mysql": ("my_replace_jobs", "my.sql"),
           "sqlite": ("lite_debounce_jobs", "lite.sql")}


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, CASE / "expected" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def new_row(m: ModuleType, dialect: str, n: int) -> Any:
    due = dt.datetime.now(dt.UTC)
    if dialect == "postgres":
        return m.NewRow(queue="q", doc_id=f"doc-{n}", retry_after=due, payload={"n": n})
    if dialect == "mysql":
        return m.NewRow(order_id=n, kind="mail", retry_after=due, payload={"n": n})
    return m.NewRow(doc_id=f"doc-{n}", retry_after=due, payload=f"job {n}")


def measure(connect: Callable[[], Any], call: Callable[[Any, int], Any], first: int,
            calls: int) -> float:
    """Microseconds a call, each committed on its own, on one connection."""
    conn = connect()
    try:
        started = time.perf_counter()
        for n in range(first, first + calls):
            call(conn, n)
            conn.commit()
        return (time.perf_counter() - started) / calls * 1e6
    finally:
        conn.close()


def run(dialect: str, connect: Callable[[], Any], calls: int) -> None:
    name, _ = MODULES[dialect]
    m = load(name)
    wait = dt.timedelta(seconds=60)
    ways: list[tuple[str, Callable[[Any, int], Any], int]] = [
        ("insert", lambda c, n: m.insert(c, new_row(m, dialect, n)), 1_000_000),
        ("replace, new key", lambda c, n: m.insert_replace(c, new_row(m, dialect, n)),
         2_000_000),
        ("replace, queued key", lambda c, n: m.insert_replace(c, new_row(m, dialect, n)), 0),
        ("debounce, queued key", lambda c, n: m.insert_debounced(
            c, new_row(m, dialect, n), wait=wait, max_wait=10 * wait), 0),
    ]
    # The queued keys the replacements find: rows 0 .. calls - 1.
    measure(connect, lambda c, n: m.insert(c, new_row(m, dialect, n)), 0, calls)
    base = None
    for turn in range(2):
        for way, call, first in ways:
            first = first + turn * calls if first else 0
            each = measure(connect, call, first, calls)
            base = each if way == "insert" else base
            assert base is not None
            print(f"{dialect} round {turn + 1}, {way}: {each:.0f} us a call "
                  f"({base / each:.2f}x insert's rate)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--dialects", default="postgres,mysql,sqlite")
    opts = parser.parse_args()
    for dialect in opts.dialects.split(","):
        ddl = (CASE / "specs" / MODULES[dialect][1]).read_text()
        if dialect == "postgres":
            import psycopg
            from servers import PostgresServer

            pg = PostgresServer(durable=True)
            try:
                dsn = pg.create_database("replace_bench")
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute(ddl)
                run(dialect, lambda dsn=dsn: psycopg.connect(dsn), opts.calls)
            finally:
                pg.stop()
        elif dialect == "mysql":
            import pymysql
            from mariadb_server import MariaDBServer

            my = MariaDBServer("--skip-log-bin", "--innodb-flush-log-at-trx-commit=1")
            try:
                my.create_database("replace_bench")
                args = my.connect_args("replace_bench")
                conn = pymysql.connect(**args, autocommit=True)
                with conn.cursor() as cur:
                    for statement in ddl.split(";"):
                        if statement.strip():
                            cur.execute(statement)
                conn.close()

                def connect(args: dict[str, Any] = args) -> Any:
                    c = pymysql.connect(**args)
                    with c.cursor() as cur:
                        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                        cur.execute("SET SESSION time_zone = '+00:00'")
                    return c

                run(dialect, connect, opts.calls)
            finally:
                my.stop()
        else:
            with tempfile.TemporaryDirectory() as folder:
                path = Path(folder) / "replace.db"
                setup = sqlite3.connect(path, isolation_level=None)
                setup.execute("PRAGMA journal_mode = WAL")
                setup.executescript(ddl)
                setup.close()

                def connect_sqlite(path: Path = path) -> Any:
                    c = sqlite3.connect(path, timeout=30)
                    c.execute("PRAGMA synchronous = NORMAL")
                    return c

                run(dialect, connect_sqlite, opts.calls)


if __name__ == "__main__":
    main()
