"""The fault suite's queue tables, and `Target`: one generated module and its database.

Every shape has the same columns as the kinds of tests/runtime/test_runtime_processes.py (an id, an
attempt, a payload; a lease column for the lease form, a key column for the advisory form), plus
what the invariants need: `max_attempts` with a dead-letter table, a JSON payload stored as text
(so a poison job is a payload that does not decode), and the ledger table `fault_ledger` that the
transactional handler writes one row to per settled delivery. The ledger has no unique key: a
second committed effect of one job must be visible, not refused.

The `-due` shapes add a due time (`retry_after`, the database's clock by default): jobs can be
enqueued due later, and the target keeps every job's due time as the database wrote it.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg
import pymysql
from genutil import build_module
from psycopg import sql as pgsql

from inboxgen.runtime.backends import mysql_connect_args

MAX_ATTEMPTS = 3
QUEUE = "fault_jobs"
DEAD = "fault_jobs_dead"
LEDGER = "fault_ledger"
POISON = "{this is not json"

# (dialect, form) of every shape. "row_lock" leaves count_crashes to the runtime's default (with
# max_attempts, it counts crashes); "counted" sets count_crashes = true, "plain" false.
SHAPES = {
    "pg-row_lock": ("postgres", "row_lock"),
    "pg-counted": ("postgres", "counted"),
    "pg-plain": ("postgres", "plain"),
    "pg-lease": ("postgres", "lease"),
    "pg-advisory": ("postgres", "advisory"),
    "sqlite-lease": ("sqlite", "lease"),
    "sqlite-advisory": ("sqlite", "advisory"),
    "mysql-row_lock": ("mysql", "row_lock"),
    "mysql-counted": ("mysql", "counted"),
    "mysql-plain": ("mysql", "plain"),
    "mysql-lease": ("mysql", "lease"),
    "mysql-advisory": ("mysql", "advisory"),
    # Lease tables with a due time (the clock-skew scenarios).
    "pg-lease-due": ("postgres", "lease"),
    "mysql-lease-due": ("mysql", "lease"),
}

_TYPES = {
    "postgres": {"id": "BIGSERIAL PRIMARY KEY", "ref": "BIGINT", "int": "INTEGER",
                 "time": "TIMESTAMPTZ", "text": "TEXT", "float": "DOUBLE PRECISION",
                 "seq": "BIGSERIAL PRIMARY KEY"},
    "mysql": {"id": "BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY", "ref": "BIGINT",
              "int": "INT", "time": "DATETIME", "text": "TEXT", "float": "DOUBLE",
              "seq": "BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY"},
    "sqlite": {"id": "INTEGER PRIMARY KEY AUTOINCREMENT", "ref": "INTEGER", "int": "INTEGER",
               "time": "TEXT", "text": "TEXT", "float": "REAL",
               "seq": "INTEGER PRIMARY KEY AUTOINCREMENT"},
}
# A due column defaulting to the database's clock.
_DUE = {"postgres": "retry_after TIMESTAMPTZ NOT NULL DEFAULT now()",
        "mysql": "retry_after DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)"}
# The database's clock, and a due time, as seconds since the epoch (MySQL/MariaDB: the session's
# time zone is UTC, see Target.connect), and a due time `%s` seconds (microseconds) from now.
_EPOCH = {"postgres": "extract(epoch from {})::float8", "mysql": "UNIX_TIMESTAMP({})"}
_NOW = {"postgres": "clock_timestamp()", "mysql": "NOW(6)"}
_LATER = {"postgres": "now() + make_interval(secs => %s)",
          "mysql": "UTC_TIMESTAMP(6) + INTERVAL %s MICROSECOND"}


def spec_of(dialect: str, form: str, due: bool = False) -> str:
    lines = [f'table = "{QUEUE}"', f'dialect = "{dialect}"']
    if form == "counted":
        lines.append("count_crashes = true")
    if form == "plain":
        lines.append("count_crashes = false")
    if form == "advisory":
        lines += ['claim = "advisory"', 'advisory_key = "job-{job_key}"']
    lines += ["", "[columns]", 'id = { role = "id", generated = true }',
              'attempt = { role = "attempt", generated = true }']
    if due:
        lines.append('retry_after = "retry_after"')
    if form == "lease":
        lines.append('locked_until = "locked_until"')
    lines += ['payload = { role = "payload", codec = "json" }', "", "[runtime]",
              f"max_attempts = {MAX_ATTEMPTS}", "", "[dead_letter]", f'table = "{DEAD}"', ""]
    return "\n".join(lines)


def ddl_of(dialect: str, form: str, due: bool = False) -> str:
    t = _TYPES[dialect]

    def columns(primary: str) -> str:
        cols = [f"id {primary}", f"attempt {t['int']} NOT NULL DEFAULT 1"]
        if due:
            cols.append(_DUE[dialect])
        if form == "lease":
            cols.append(f"locked_until {t['time']} NULL" if dialect == "mysql"
                        else f"locked_until {t['time']}")
        if form == "advisory":
            cols.append(f"job_key {t['ref']} NOT NULL")
        cols.append(f"payload {t['text']} NOT NULL")
        return ",\n    ".join(cols)

    index = after = ""
    if dialect == "mysql" and form == "lease":
        index = f",\n    KEY {QUEUE}_claim ({'retry_after' if due else 'locked_until'}, id)"
    elif due:
        after = f"CREATE INDEX {QUEUE}_claim ON {QUEUE} (retry_after, id);\n"
    return (
        f"CREATE TABLE {QUEUE} (\n    {columns(t['id'])}{index}\n);\n{after}"
        f"CREATE TABLE {DEAD} (\n    {columns(t['ref'] + ' PRIMARY KEY')}\n);\n"
        f"CREATE TABLE {LEDGER} (\n    seq {t['seq']},\n    job_id {t['ref']} NOT NULL,\n"
        f"    pid {t['int']} NOT NULL,\n    attempt {t['int']},\n"
        f"    at {t['float']} NOT NULL\n);\n"
    )


@dataclass
class Target:
    """A queue table, its dead letters and its ledger in one database, with the module built
    for it. `jobs` maps every enqueued id to its kind: ok, poison or selfkill."""

    name: str
    dialect: str
    form: str
    module: ModuleType
    module_path: Path
    database: str  # PostgreSQL conninfo, MySQL URL or SQLite file
    due_column: bool = False
    jobs: dict[int, str] = field(default_factory=dict)
    due: dict[int, float] = field(default_factory=dict)  # job -> due, by the database's clock
    scheduled: set[int] = field(default_factory=set)  # jobs enqueued due later

    @property
    def claim_form(self) -> str:
        """The runtime's claim form: row_lock, lease or advisory."""
        return str(self.module.DESCRIPTOR.form)

    @property
    def counts_crashes(self) -> bool:
        """A crash spends an attempt: the claim counts it (every form but a row lock without
        count_crashes, as the generated module says)."""
        d = self.module.DESCRIPTOR
        return d.form != "row_lock" or bool(getattr(d, "count_crashes", False))

    # -- connections ----------------------------------------------------------------------

    def connect(self, *, autocommit: bool = True) -> Any:
        if self.dialect == "postgres":
            return psycopg.connect(self.database, autocommit=autocommit, connect_timeout=5)
        if self.dialect == "mysql":
            args = mysql_connect_args(self.database)
            conn = pymysql.connect(**args, autocommit=autocommit, connect_timeout=5)
            with conn.cursor() as cur:
                cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                cur.execute("SET SESSION time_zone = '+00:00'")
            return conn
        return sqlite3.connect(self.database, timeout=30,
                               isolation_level=None if autocommit else "DEFERRED")

    @contextmanager
    def session(self) -> Iterator[Any]:
        conn = self.connect()
        try:
            yield conn
        finally:
            conn.close()

    def query(self, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
        """Rows of one statement on a fresh connection (what another process sees)."""
        with self.session() as conn:
            return self.query_on(conn, sql, params)

    def query_on(self, conn: Any, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
        if self.dialect == "mysql":
            with conn.cursor() as cur:
                cur.execute(sql, params or None)
                return list(cur.fetchall())
        return list(conn.execute(sql, params).fetchall())

    # -- enqueue --------------------------------------------------------------------------

    def enqueue(self, ok: int, *, poison: int = 0, selfkill: int = 0,
                keys: int | None = None, due_in: float = 0.0, ms: float | None = None) -> None:
        """Enqueue ok + poison + selfkill jobs in one transaction, the bad ones spread evenly
        through the queue. Advisory rows get key n (or n % keys). A `-due` shape's jobs are due
        `due_in` s after the database's now; `ms` sets how long each one runs (else the
        worker's --job-ms)."""
        total = ok + poison + selfkill
        kinds = ["ok"] * total
        for i in range(poison):
            kinds[int((i + 0.5) * total / max(poison, 1))] = "poison"
        placed = 0
        step = total / max(selfkill, 1)
        while placed < selfkill:
            pos = int(step * (placed + 0.3))
            while kinds[pos] != "ok":
                pos = (pos + 1) % total
            kinds[pos] = "selfkill"
            placed += 1
        rows: list[tuple[int, str]] = []
        for n, kind in enumerate(kinds, len(self.jobs)):
            body: dict[str, Any] = {"n": n, "kind": kind}
            if ms is not None:
                body["ms"] = ms
            payload = POISON if kind == "poison" else json.dumps(body)
            key = n if keys is None else n % keys
            rows.append((key, payload))
        ph = "?" if self.dialect == "sqlite" else "%s"
        if self.form == "advisory":
            sql = f"INSERT INTO {QUEUE} (job_key, payload) VALUES ({ph}, {ph})"
            params: list[tuple[Any, ...]] = list(rows)
        elif due_in:
            assert self.due_column, f"{self.name} has no due time"
            sql = (f"INSERT INTO {QUEUE} (payload, retry_after) "
                   f"VALUES ({ph}, {_LATER[self.dialect]})")
            later = due_in if self.dialect == "postgres" else round(due_in * 1e6)
            params = [(p, later) for _, p in rows]
        else:
            sql = f"INSERT INTO {QUEUE} (payload) VALUES ({ph})"
            params = [(p,) for _, p in rows]
        before = {r[0] for r in self.query(f"SELECT id FROM {QUEUE}")}
        with closing(self.connect(autocommit=False)) as conn:
            if self.dialect == "mysql":
                with conn.cursor() as cur:
                    cur.executemany(sql, params)
            else:
                conn.cursor().executemany(sql, params)
            conn.commit()
        got = sorted(r[0] for r in self.query(f"SELECT id FROM {QUEUE}") if r[0] not in before)
        assert len(got) == total, f"enqueued {total}, found {len(got)} new rows"
        for job_id, kind in zip(got, kinds, strict=True):
            self.jobs[int(job_id)] = kind
            if due_in:
                self.scheduled.add(int(job_id))
        if self.due_column:
            epoch = _EPOCH[self.dialect].format("retry_after")
            self.due.update((int(i), float(at)) for i, at in
                            self.query(f"SELECT id, {epoch} FROM {QUEUE}") if int(i) in got)

    def clock_offset(self, readings: int = 5) -> float:
        """How far the database's clock is ahead of this process's, in seconds: this process's
        time halfway through the shortest of a few round trips is the server's instant."""
        sql = f"SELECT {_EPOCH[self.dialect].format(_NOW[self.dialect])}"
        best: tuple[float, float] | None = None
        with self.session() as conn:
            for _ in range(readings):
                sent = time.time()
                (server,) = self.query_on(conn, sql)[0]
                back = time.time()
                if best is None or back - sent < best[0]:
                    best = (back - sent, float(server) - (sent + back) / 2)
        assert best is not None
        return best[1]

    # -- state ----------------------------------------------------------------------------

    def remaining(self) -> int:
        return int(self.query(f"SELECT count(*) FROM {QUEUE}")[0][0])

    def effects(self) -> int:
        return int(self.query(f"SELECT count(*) FROM {LEDGER}")[0][0])

    def queue_rows(self) -> dict[int, int]:
        """id -> attempt of the rows still in the queue."""
        return {int(i): int(a) for i, a in self.query(f"SELECT id, attempt FROM {QUEUE}")}

    def dead_rows(self) -> dict[int, int]:
        return {int(i): int(a) for i, a in self.query(f"SELECT id, attempt FROM {DEAD}")}

    def ledger_rows(self) -> list[tuple[int, int, int | None, float]]:
        """(job id, pid, attempt, time) of every committed effect, in commit order."""
        return [(int(j), int(p), None if a is None else int(a), float(t)) for j, p, a, t in
                self.query(f"SELECT job_id, pid, attempt, at FROM {LEDGER} ORDER BY seq")]


def make_target(folder: Path, shape: str, database: str) -> Target:
    """Build the module of `shape` into `folder` and create its tables in `database` (a fresh
    PostgreSQL or MariaDB database, or a SQLite file that does not exist yet)."""
    dialect, form = SHAPES[shape]
    due = shape.endswith("-due")
    name = shape.replace("-", "_")
    ddl = ddl_of(dialect, form, due)
    module = build_module(folder, spec_of(dialect, form, due), ddl, name)
    assert module.__file__ is not None
    if dialect == "postgres":
        with psycopg.connect(database, autocommit=True) as conn:
            conn.execute("SET synchronous_commit = on")  # the tables and setting themselves
            conn.execute(ddl.encode())
            dbname = conn.info.dbname
            # Commits the server acknowledged survive an immediate restart (the suite's servers
            # run with synchronous_commit off for speed).
            conn.execute(pgsql.SQL("ALTER DATABASE {} SET synchronous_commit = on")
                         .format(pgsql.Identifier(dbname)))
    elif dialect == "mysql":
        mconn = pymysql.connect(**mysql_connect_args(database), autocommit=True)
        try:
            with mconn.cursor() as cur:
                for statement in ddl.split(";"):
                    if statement.strip():
                        cur.execute(statement)
        finally:
            mconn.close()
    else:
        with closing(sqlite3.connect(database)) as sconn:
            sconn.execute("PRAGMA journal_mode=WAL")
            sconn.executescript(ddl)
    return Target(shape, dialect, form, module, Path(module.__file__), database, due)
