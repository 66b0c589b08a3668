"""How a claim's cost grows with rows that are not due. Per dialect, claim form, kind of backlog
and backlog size, a table gets `size` rows that are not due, placed ahead of the due work in
claim order, and `--jobs` due jobs; then:

- latency: claim one row and finish it, in the transactions the runtime runs them in, through
  the generated module's functions, one round after another: p50 and p99 of a round, and p50 of
  the claim statement alone (what reads past the backlog; a round's commits wait on the disk).
  Its claims are the ones a worker would run: by priority where a worker would count enough
  rows due later (kept to the list of priorities with due rows, read once a second and after
  a claim that came back short, where the table's claims keep to one: MySQL/MariaDB, a
  partitioned PostgreSQL table), and starting after the last row claimed where the table's
  claim takes a start (at the head once a second);
- drain: as many due jobs again drained by an inboxgen Worker (10 workers, batch 1, as
  bench/drain.py), measured once its connections are open: jobs/s, and the CPU each job cost
  the server (PostgreSQL, MariaDB) and this process;
- buffers (PostgreSQL): shared buffers one claim touches, from EXPLAIN (ANALYZE, BUFFERS) of
  the claim statement a worker would run, from the head of the claim order, rolled back.

The latency loop and the drain each stop after `--budget` seconds (a note says so). Every
figure is printed beside its ratio to the empty table (size 0) of the same run: on a shared
machine the ratios move less than the figures. Kinds of backlog:

- ready: due rows of another group (a group is one worker's share);
- scheduled: rows due a day later, with a more urgent priority than the due jobs;
- finished: rows with processed_at set (a table that keeps finished rows for audit).

The claim index is the one `inboxgen build` suggests for the table (see CLAIM_INDEX), so a run
after the suggestion changes measures the new index. Not a test: numbers depend on the machine.

    python bench/backlog.py --quick                                # sizes 0 and 100k, 500 jobs
    python bench/backlog.py --dialects postgres --forms lease --kinds finished
    python bench/backlog.py --sizes 0,100000,1000000,10000000
    python bench/backlog.py --dialects postgres --sizes 0,10M --partitioned
    python bench/backlog.py --continuous 200000 --forms row_lock --kinds finished

`--partitioned` (PostgreSQL) makes each table partitioned by range of id, a partition per
1,000,000 ids up to 10,000,000 and one for the ids beyond (each with the storage settings the
build asks for, the claim index on the parent): the backlog fills the first partitions, and the
due jobs of a 10M backlog land in the last.

`--continuous N` instead enqueues N due jobs on an empty table, drains them with a Worker and
prints the rate of each tenth of the drain against the first tenth, and what the drain leaves
behind (PostgreSQL: table and index sizes, dead tuples, the share of HOT updates, what a claim
reads after it; before, after the drain and after a VACUUM). With `--hold-xmin` each table is
drained twice, the second time with a REPEATABLE READ transaction held open on another
connection from before the drain to after its figures (it holds back what vacuum may remove),
and the second drain's rate is printed against the first's. `--postgres DSN` and `--mysql URL`
use a server of yours (its table bench_backlog is dropped and made again) instead of starting a
private one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import inspect
import json
import re
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests"), str(REPO / "bench")]

from drain import own_cpu, server_cpu  # noqa: E402
from genutil import import_path, make_project  # noqa: E402

from inboxgen import Worker  # noqa: E402
from inboxgen.runtime.backends.postgres import GENERIC_PLANS_SQL  # noqa: E402
from inboxgen.runtime.claimstart import ClaimStart, claims_from_id  # noqa: E402

TABLE = "bench_backlog"
WORK, OTHER, DEAD = "work", "other", "dead"  # the due jobs' group, another worker's, dead letters
WORKERS, BATCH = 10, 1  # the drain's Worker, as bench/drain.py's
FORMS = ("row_lock", "row_lock_counted", "lease", "advisory")
DIALECT_FORMS = {
    "postgres": FORMS,
    "mysql": FORMS,
    "sqlite": ("lease", "advisory"),  # SQLite has no row locks
}
KINDS = ("ready", "scheduled", "finished")

# -- the bench table: every definition in this block ------------------------------------------
# One column per role, per dialect. A kind's table has the roles it needs (KIND_ROLES), a lease
# table also locked_until.
COLUMNS: dict[str, dict[str, str]] = {
    "postgres": {
        "id": "id BIGSERIAL PRIMARY KEY",
        "group": "queue TEXT NOT NULL",
        "priority": "priority INTEGER NOT NULL DEFAULT 0",
        "retry_after": "retry_after TIMESTAMPTZ NOT NULL DEFAULT now()",
        "attempt": "attempt INTEGER NOT NULL DEFAULT 1",
        "processed_at": "processed_at TIMESTAMPTZ",
        "locked_until": "locked_until TIMESTAMPTZ",
        "payload": "payload JSONB NOT NULL",
    },
    "mysql": {
        "id": "id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY",
        "group": "queue VARCHAR(64) NOT NULL",
        "priority": "priority INT NOT NULL DEFAULT 0",
        "retry_after": "retry_after DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)",
        "attempt": "attempt INT NOT NULL DEFAULT 1",
        "processed_at": "processed_at DATETIME(6) NULL",
        "locked_until": "locked_until DATETIME(6) NULL",
        "payload": "payload JSON NOT NULL",
    },
    "sqlite": {
        "id": "id INTEGER PRIMARY KEY",
        "group": "queue TEXT NOT NULL",
        "priority": "priority INTEGER NOT NULL DEFAULT 0",
        "retry_after": "retry_after TEXT NOT NULL "
                       "DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))",
        "attempt": "attempt INTEGER NOT NULL DEFAULT 1",
        "processed_at": "processed_at TEXT",
        "locked_until": "locked_until TEXT",
        "payload": "payload TEXT NOT NULL",
    },
}
KIND_ROLES = {
    "ready": ("id", "group", "attempt", "payload"),
    "scheduled": ("id", "group", "priority", "retry_after", "attempt", "payload"),
    "finished": ("id", "group", "attempt", "processed_at", "payload"),
}
# The claim index per dialect: None takes the statement of the build's warning "no index serves
# the claim order ...; claims will scan: CREATE INDEX ...", whatever the build suggests today.
# A statement here (with {table}) is used instead, e.g. to measure an index of your own.
CLAIM_INDEX: dict[str, str | None] = {"postgres": None, "mysql": None, "sqlite": None}
# Backlog rows per kind: values of the columns the fill writes (the rest take their defaults).
# Scheduled rows are more urgent (priority 0) than the due jobs (DUE_PRIORITY) but due a day later.
DUE_PRIORITY = 1
LATER = {"postgres": "now() + interval '1 day'",
         "mysql": "UTC_TIMESTAMP(6) + INTERVAL 1 DAY",
         "sqlite": "strftime('%Y-%m-%d %H:%M:%f', 'now', '+1 day')"}
NOW = {"postgres": "now()", "mysql": "UTC_TIMESTAMP(6)",
       "sqlite": "strftime('%Y-%m-%d %H:%M:%f', 'now')"}
PAYLOAD = {"postgres": "'{\"n\": 0}'::jsonb", "mysql": "'{\"n\": 0}'", "sqlite": "'{\"n\": 0}'"}


def backlog_values(dialect: str, kind: str) -> dict[str, str]:
    if kind == "ready":
        return {"queue": f"'{OTHER}'", "payload": PAYLOAD[dialect]}
    if kind == "scheduled":
        return {"queue": f"'{WORK}'", "priority": "0", "retry_after": LATER[dialect],
                "payload": PAYLOAD[dialect]}
    return {"queue": f"'{WORK}'", "processed_at": NOW[dialect], "payload": PAYLOAD[dialect]}


def due_values(dialect: str, kind: str) -> dict[str, str]:
    """The continuous mode's due jobs, filled the same way."""
    values = {"queue": f"'{WORK}'", "payload": PAYLOAD[dialect]}
    if kind == "scheduled":
        values["priority"] = str(DUE_PRIORITY)
    return values


def fill_sql(dialect: str, values: dict[str, str], n: int) -> str:
    """Insert n rows of `values` in one statement: generate_series on PostgreSQL, a recursive
    CTE elsewhere."""
    cols, exprs = ", ".join(values), ", ".join(values.values())
    if dialect == "postgres":
        return f"INSERT INTO {TABLE} ({cols}) SELECT {exprs} FROM generate_series(1, {n})"
    return (f"INSERT INTO {TABLE} ({cols}) WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL "
            f"SELECT n + 1 FROM seq WHERE n < {n}) SELECT {exprs} FROM seq")
# -- end of the bench table -------------------------------------------------------------------


@dataclass
class Queue:
    """The generated module of one (dialect, form, kind) and the DDL its table is made with."""

    dialect: str
    form: str
    kind: str
    module: Any
    create_table: str
    index: str | None  # the claim index statement, or None where the build asked for none
    settings: tuple[str, ...] = ()  # the table settings the build asks for (ALTER TABLE ...)
    partitioned: bool = False  # --partitioned (PostgreSQL)


PARTITION_IDS, PARTITIONS = 1_000_000, 10  # --partitioned: ids per partition, and how many


def ddl_of(dialect: str, form: str, kind: str, partitioned: bool = False) -> str:
    roles = list(KIND_ROLES[kind]) + (["locked_until"] if form == "lease" else [])
    body = ",\n".join("    " + COLUMNS[dialect][r] for r in roles)
    if not partitioned:
        return f"CREATE TABLE {TABLE} (\n{body}\n);\n"
    bounds = [str(n * PARTITION_IDS + 1) for n in range(PARTITIONS + 1)]
    parts = [f"CREATE TABLE {TABLE}_p{n} PARTITION OF {TABLE} "
             f"FOR VALUES FROM ({low}) TO ({high});\n"
             for n, (low, high) in enumerate(zip(["MINVALUE", *bounds[1:-1]], bounds[1:],
                                                  strict=True))]
    parts.append(f"CREATE TABLE {TABLE}_rest PARTITION OF {TABLE} "
                 f"FOR VALUES FROM ({bounds[-1]}) TO (MAXVALUE);\n")
    return f"CREATE TABLE {TABLE} (\n{body}\n) PARTITION BY RANGE (id);\n" + "".join(parts)


def spec_of(dialect: str, form: str, kind: str) -> str:
    cols = {COLUMNS[dialect][r].split()[0]: r for r in KIND_ROLES[kind]}
    lines = [f'table = "{TABLE}"', f'dialect = "{dialect}"']
    if form == "advisory":
        lines += ['claim = "advisory"', 'advisory_key = "job-{id}"']
    lines.append("[columns]")
    for col, role in cols.items():
        if role in ("id", "attempt"):
            lines.append(f'{col} = {{ role = "{role}", generated = true }}')
        elif role == "payload":
            lines.append(f'{col} = {{ role = "payload", codec = "json" }}')
        else:
            lines.append(f'{col} = "{role}"')
    if form == "lease":
        lines.append('locked_until = "locked_until"')
    if form == "row_lock_counted":  # max_attempts with a dead-letter group: claims count
        lines += ["[runtime]", "max_attempts = 5", "[dead_letter]", f'group = "{DEAD}"']
    return "\n".join(lines) + "\n"


_SUGGESTION = re.compile(r"claims (?:will scan|walk every finished row): (CREATE INDEX .+)$")
_SETTINGS = re.compile(r"storage settings.*: (ALTER TABLE \S+ SET \(.+\))$")


def build(dialect: str, form: str, kind: str, folder: Path, partitioned: bool = False) -> Queue:
    """Generate the module; the table's DDL gets the claim index the build suggests for it
    (CLAIM_INDEX), and is then built again, which must leave no index warning."""
    from inboxgen.generate.build import generate, write

    name = f"backlog_{dialect}_{form}_{kind}" + ("_partitioned" if partitioned else "")
    create, spec = ddl_of(dialect, form, kind, partitioned), spec_of(dialect, form, kind)
    root = folder / name
    project = make_project(root, spec, create, name)
    generated = generate(project, [project.specs / f"{name}.toml"])
    found = [m.group(1) for d in generated.diagnostics
             if (m := _SUGGESTION.search(d.message))]
    index = CLAIM_INDEX[dialect]
    index = index.format(table=TABLE) if index else (found[0] if found else None)
    # The table settings the build asks for (PostgreSQL), as a user following it has them.
    settings = [m.group(1) for d in generated.diagnostics
                if (m := _SETTINGS.search(d.message))]
    if index or settings:
        extras = "".join(f"{extra};\n" for extra in [*settings, index] if extra)
        project = make_project(root, spec, create + extras, name)
        generated = generate(project, [project.specs / f"{name}.toml"])
    problems = [f"{d.path}:{d.line}: {d.message}" for d in generated.diagnostics
                if d.severity == "error" or _SUGGESTION.search(d.message)
                or _SETTINGS.search(d.message)]
    if not generated.ok or problems:
        raise SystemExit(f"backlog.py: the bench table of {name} does not build: "
                         + "; ".join(problems))
    ((path, _),) = write(generated)
    return Queue(dialect, form, kind, import_path(path, f"_bench_{name}"), create, index,
                 tuple(settings), partitioned)


# -- sessions: one connection of the latency loop, begin and commit as the runtime sends them ---

class Session:
    def __init__(self, dialect: str, database: str) -> None:
        self.dialect = dialect
        if dialect == "postgres":
            import psycopg

            self.conn: Any = psycopg.connect(database, autocommit=True)
        elif dialect == "mysql":
            from inboxgen.runtime.backends import mysql_connect_args
            from inboxgen.runtime.backends.mysql_server import open_session

            self.conn = open_session(mysql_connect_args(database))
        else:
            self.conn = sqlite3.connect(database, isolation_level=None)
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA busy_timeout=30000")

        self.claim_s = 0.0
        self.by_priority = False  # the claim a worker would run (runtime/priorities.py)
        self.priorities: list[int] = []  # the priorities a claim kept to a list keeps to
        self.listed_at: float | None = None  # when they were read (None: read them again)
        self.start: ClaimStart | None = None  # where its claims start (runtime/claimstart.py)

    def timed(self, module: ModuleType, name: str, **values: Any) -> Any:
        """call() of a claim function (the one a worker would choose), its seconds left in
        claim_s."""
        # A claim, or the advisory form's read of candidates, starts as the worker's would.
        starts = self.start is not None and name in ("claim", "candidates")
        at = self.start.at() if self.start is not None and starts else None
        # A claim by priority runs its generic plan, as a worker runs it: a row lock's with
        # the setting in the round's transaction, which the worker sends with the claim and
        # here goes before the timed statement; a lease's claim and the advisory form's read,
        # standing alone, with the setting sent with them in one pipeline (PlannedOnce).
        conn = self.conn
        if self.by_priority and self.dialect == "postgres" and name in ("claim", "candidates"):
            if conn.info.transaction_status.name != "IDLE":
                conn.execute(GENERIC_PLANS_SQL)
            else:
                conn = PlannedOnce(conn)
        # A claim kept to a list of priorities takes the list a worker reads once a second
        # and after a claim that came back short (runtime/priorities.py).
        listed = self.by_priority and hasattr(module, "due_priorities") and name in (
            "claim", "candidates")
        if listed and (self.listed_at is None or time.monotonic() - self.listed_at >= 1):
            self.priorities = call(module, "due_priorities", self.conn,
                                   **{k: v for k, v in values.items() if k in ("group", "now")})
            self.listed_at = time.monotonic()
        started = time.perf_counter()
        try:
            rows = call(module, name, conn, by_priority=self.by_priority, **(at or {}),
                        **({"priorities": self.priorities} if listed else {}), **values)
        finally:
            self.claim_s = time.perf_counter() - started
        if listed and len(rows) < values["limit"]:
            self.listed_at = None
        if self.start is not None and starts:
            self.start.took(at, rows, values["limit"], self.claim_s)
        return rows

    def execute(self, sql: str) -> None:
        if self.dialect == "mysql":
            with self.conn.cursor() as cur:
                cur.execute(sql)
        else:
            self.conn.execute(sql)

    def begin(self) -> None:
        if self.dialect == "mysql":
            self.conn.begin()
        else:
            self.execute("BEGIN IMMEDIATE" if self.dialect == "sqlite" else "BEGIN")

    def commit(self) -> None:
        if self.dialect == "mysql":
            self.conn.commit()
        else:
            self.execute("COMMIT")

    def rollback(self) -> None:
        if self.dialect == "mysql":
            self.conn.rollback()
        else:
            self.execute("ROLLBACK")

    def close(self) -> None:
        self.conn.close()


class PlannedOnce:
    """A psycopg connection whose execute() sends the generic plans' setting and the statement
    in one pipeline, as a worker's `Backend.planned_once` does: one round trip."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def execute(self, query: Any, params: Any = None) -> Any:
        with self._conn.pipeline():
            self._conn.execute(GENERIC_PLANS_SQL)
            return self._conn.execute(query, params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def call(module: ModuleType, name: str, conn: Any, **values: Any) -> Any:
    """The module's function `name`, given those of `values` it takes (a table without a
    retry_after takes no `now` in its claim, a PostgreSQL claim_guard no `wait`, ...)."""
    function = getattr(module, name)
    takes = inspect.signature(function).parameters
    return function(conn, **{k: v for k, v in values.items() if k in takes})


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def one_round(q: Queue, s: Session) -> bool:
    """Claim one row and finish it, in the transactions the runtime's form runs them in.
    False when nothing was due. `s.claim_s` is left at the seconds of the claim statement
    alone (the part that reads past the backlog; the rest is commits)."""
    m, conn = q.module, s.conn
    claim = s.timed
    if q.form == "row_lock":
        s.begin()
        rows = claim(m, "claim", group=WORK, now=now(), limit=1)
        for r in rows:
            call(m, "finish", conn, id=r.id, now=now())
        s.commit()
        return bool(rows)
    if q.form == "row_lock_counted" and hasattr(m, "release"):
        # The count commits and the rows' keys keep them; RELEASE after the settlement's
        # commit (PostgreSQL's names the rows, MySQL's unlocks every key of the session).
        s.begin()
        rows = claim(m, "claim", group=WORK, now=now(), limit=1)
        s.commit()
        s.begin()
        for r in rows:
            call(m, "finish", conn, id=r.id, now=now())
        s.commit()
        if rows and "id" in m.DESCRIPTOR.statement_params["RELEASE"]:
            m.release(conn, id=[r.id for r in rows])
        elif rows:
            m.release(conn)
        return bool(rows)
    if q.form == "row_lock_counted":
        key = f"{m.DESCRIPTOR.qualified_name}:claim"
        s.begin()
        call(m, "claim_guard", conn, key=key, wait=10.0)
        rows = claim(m, "claim", group=WORK, now=now(), limit=1)
        s.commit()
        s.begin()
        held = [call(m, "relock", conn, id=r.id, attempt=r.attempt) for r in rows]
        call(m, "claim_unguard", conn, key=key)
        for r in held:
            if r is not None:
                call(m, "finish", conn, id=r.id, now=now())
        s.commit()
        return bool(rows)
    if q.form == "lease":
        at = now()
        # On PostgreSQL the claim is one autocommit statement; by priority, with its generic
        # plan's setting in the same round trip (Session.timed).
        together = s.dialect != "postgres"
        if together:
            s.begin()
        rows = claim(m, "claim", group=WORK, now=at,
                    locked_until=at + dt.timedelta(seconds=30), limit=1)
        if together:
            s.commit()
        for r in rows:
            if together:
                s.begin()
            call(m, "finish", conn, id=r.id, now=now(), locked_until=r.locked_until,
                 attempt=r.attempt)
            if together:
                s.commit()
        return bool(rows)
    assert q.form == "advisory"
    # By priority on PostgreSQL the read runs its generic plan, the setting sent with it in
    # one round trip (Session.timed).
    rows = claim(m, "candidates", group=WORK, now=now(), limit=1)
    if s.dialect == "mysql":
        s.commit()  # the read's transaction (the other sessions are in autocommit)
    for r in rows:
        key = m.advisory_key(r)
        if hasattr(m, "lock") and not call(m, "lock", conn, key=key):
            continue  # SQLite locks keys in the process: nobody else here
        s.begin()
        taken = call(m, "take", conn, id=r.id, group=WORK, now=now())
        s.commit()
        if taken is not None:
            s.begin()
            call(m, "finish", conn, id=r.id, now=now())
            s.commit()
        if hasattr(m, "unlock"):
            call(m, "unlock", conn, key=key)
            if s.dialect == "mysql":
                s.commit()
    return bool(rows)


def latencies(q: Queue, database: str, rounds: int, budget: float
              ) -> tuple[list[float], list[float]]:
    """Seconds of each round and of its claim statement, `rounds` of them or as many as
    `budget` seconds allow."""
    s = Session(q.dialect, database)
    try:
        s.by_priority = by_priority(q, s)
        if claims_from_id(q.module.DESCRIPTOR):
            s.start = ClaimStart(q.module.DESCRIPTOR)
        out: list[float] = []
        claims: list[float] = []
        deadline = time.perf_counter() + budget
        while len(out) < rounds and time.perf_counter() < deadline:
            started = time.perf_counter()
            if not one_round(q, s):
                break
            out.append(time.perf_counter() - started)
            claims.append(s.claim_s)
        return out, claims
    finally:
        s.close()


def by_priority(q: Queue, s: Session) -> bool:
    """Whether a worker would claim priority by priority: as runtime/priorities.py counts the
    rows due later (SCHEDULED, PostgreSQL), once; the backlog does not change. On MySQL/MariaDB
    (no SCHEDULED) always. Where the claims by priority keep to a list of priorities (MySQL,
    a partitioned PostgreSQL table), Session.timed reads the list as a worker does."""
    from inboxgen.runtime.priorities import WALK_FROM

    if not hasattr(q.module, "scheduled"):
        return hasattr(q.module, "due_priorities")
    return bool(call(q.module, "scheduled", s.conn, group=WORK, now=now(),
                     limit=WALK_FROM) >= WALK_FROM)


def claim_buffers(q: Queue, database: str) -> int | None:
    """Shared buffers (hit and read) of the claim statement a worker would run for one row
    (the claim by priority where it would choose it), from EXPLAIN (ANALYZE, BUFFERS) in a
    transaction rolled back; PostgreSQL only."""
    if q.dialect != "postgres":
        return None
    m = q.module
    at = now()
    s = Session("postgres", database)
    walk = by_priority(q, s)
    # A claim kept to a list: the priorities that have due rows, as a worker reads them.
    priorities = call(m, "due_priorities", s.conn, group=WORK, now=at) if walk and hasattr(
        m, "due_priorities") else []
    s.close()
    sql = (getattr(m, "CLAIM_BY_PRIORITY" if walk else "CLAIM", None)
           or getattr(m, "CANDIDATES_BY_PRIORITY" if walk else "CANDIDATES"))
    known = {"group": WORK, "now": at, "locked_until": at + dt.timedelta(seconds=30),
             "priorities": priorities,
             "limit": 1, "row_key": f"inboxgen:{m.TABLE}:",
             # a lease claim from the head of the claim order
             "from_id": -(2**63), "from_priority": -(2**63),
             "from_retry_after": dt.datetime(1000, 1, 1, tzinfo=dt.UTC)}
    params = {k: known[k] for k in re.findall(r"%\((\w+)\)s", sql)}
    s = Session("postgres", database)
    try:
        plan: Any = None
        for _ in range(2):  # the first run reads the pages in; the second is what a claim costs
            s.begin()
            cur = s.conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params)
            (doc,) = cur.fetchone()
            s.rollback()
            plan = (json.loads(doc) if isinstance(doc, str) else doc)[0]["Plan"]
        return int(plan["Shared Hit Blocks"]) + int(plan["Shared Read Blocks"])
    finally:
        s.close()


# -- servers ------------------------------------------------------------------------------------

@dataclass
class Server:
    """A database to measure on: the dialect, how to reach it, and how to read its CPU."""

    dialect: str
    database: str
    label: str
    cpu: Callable[[], float] | None
    stop: Callable[[], None] = lambda: None
    errors: Callable[[], str] = lambda: ""  # the server log's last error, where it has one


def postgres(dsn: str | None) -> Server:
    if dsn:
        return Server("postgres", dsn, "PostgreSQL (given DSN; server CPU: every postgres "
                      "process on this machine)", lambda: server_cpu("postgres"))
    from servers import PostgresServer

    server = PostgresServer()
    root = int((server.data_dir / "postmaster.pid").read_text().split()[0])
    return Server("postgres", server.create_database("backlog"), "PostgreSQL (private server)",
                  lambda: server_cpu("postgres", root), server.stop,
                  lambda: last_error(server.log_tail(200)))


def mysql(url: str | None) -> Server:
    if url:
        return Server("mysql", url, "MySQL/MariaDB (given URL; server CPU not read)", None)
    from mariadb_server import MariaDBServer

    server = MariaDBServer()
    assert server._proc is not None
    pid = server._proc.pid
    return Server("mysql", server.create_database("backlog"), "MariaDB (private server)",
                  lambda: server_cpu("mariadbd", pid), server.stop,
                  lambda: last_error(server.log_tail(400)))


def last_error(log: str) -> str:
    lines = [x for x in log.splitlines() if "ERROR" in x or "FATAL" in x or "PANIC" in x]
    return lines[-1].strip() if lines else ""


def sqlite(folder: Path) -> Server:
    return Server("sqlite", str(folder / "backlog.sqlite3"),
                  f"SQLite {sqlite3.sqlite_version} (a file; no server)", None)


def start(dialect: str, args: argparse.Namespace, folder: Path) -> Server:
    if dialect == "postgres":
        return postgres(args.postgres)
    if dialect == "mysql":
        return mysql(args.mysql)
    return sqlite(folder)


def version(server: Server) -> str:
    s = Session(server.dialect, server.database)
    try:
        if server.dialect == "sqlite":
            return sqlite3.sqlite_version
        if server.dialect == "postgres":
            return str(s.conn.execute("SHOW server_version").fetchone()[0])
        with s.conn.cursor() as cur:
            cur.execute("SELECT VERSION()")
            return str(cur.fetchone()[0])
    finally:
        s.close()


# -- a table --------------------------------------------------------------------------------

def make_table(q: Queue, server: Server, backlog: dict[str, str] | None, size: int,
               due: int) -> None:
    """Drop and make the table: the backlog, the claim index, `due` due jobs enqueued with the
    module's insert_many, then VACUUM ANALYZE (what each dialect has of it)."""
    d = q.dialect
    if d == "sqlite":
        for suffix in ("", "-wal", "-shm"):  # a new file: nothing of the last table is left
            Path(server.database + suffix).unlink(missing_ok=True)
    s = Session(d, server.database)
    try:
        if d != "sqlite":
            s.execute(f"DROP TABLE IF EXISTS {TABLE}")  # and its partitions
        s.execute(q.create_table)
        for setting in q.settings:
            s.execute(setting)
        if d == "mysql":
            # MariaDB's recursion limit (MySQL's is cte_max_recursion_depth): a chunk's rows
            with contextlib.suppress(Exception):
                s.execute("SET SESSION max_recursive_iterations = 1000000")
            with contextlib.suppress(Exception):
                s.execute("SET SESSION cte_max_recursion_depth = 1000000")
        chunk = 1_000_000 if d != "postgres" else 10_000_000
        left = size if backlog else 0
        while left > 0:
            if d != "postgres":
                s.begin()
            s.execute(fill_sql(d, backlog or {}, min(chunk, left)))
            if d != "postgres":
                s.commit()
            left -= chunk
        if q.index:
            s.execute(q.index)
        m = q.module
        extra = {"priority": DUE_PRIORITY} if q.kind == "scheduled" else {}
        for start_at in range(0, due, 1000):
            s.begin()
            m.insert_many(s.conn, [m.NewRow(queue=WORK, payload={"n": i}, **extra)
                                   for i in range(start_at, min(due, start_at + 1000))])
            s.commit()
        if d == "postgres":  # the inserts' counts reach the statistics before VACUUM's do
            s.execute("SELECT pg_stat_force_next_flush()")
        vacuum(s, analyze=True)
    finally:
        s.close()


def vacuum(s: Session, *, analyze: bool) -> None:
    if s.dialect == "postgres":
        s.execute(f"VACUUM {'ANALYZE ' if analyze else ''}{TABLE}")
    elif s.dialect == "sqlite":
        s.execute("VACUUM")
        if analyze:
            s.execute("ANALYZE")
    else:
        with s.conn.cursor() as cur:
            cur.execute(f"{'ANALYZE' if analyze else 'OPTIMIZE'} TABLE {TABLE}")
            cur.fetchall()
        s.conn.commit()


# -- the Worker ---------------------------------------------------------------------------------

@dataclass
class Drain:
    jobs: int  # jobs started while measured
    total: int  # jobs started, the measure's and those before it
    seconds: float
    here_s: float  # this process's CPU
    server_s: float | None
    marks: list[float] = field(default_factory=list)  # seconds at each tenth (continuous)

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds if self.seconds else 0.0


async def drain_async(q: Queue, server: Server, n: int, budget: float, tenths: bool) -> Drain:
    """Run a Worker until it has started n jobs (or budget seconds passed); shut it down."""
    done = 0
    finished = asyncio.Event()
    marks: list[float] = []
    step = max(1, n // 10)

    async def handler(job: object) -> None:
        nonlocal done
        done += 1
        if tenths and done % step == 0 and len(marks) < 10:
            marks.append(time.perf_counter() - started)
        if done >= n:
            finished.set()

    worker = Worker(q.module.DESCRIPTOR, handler, database=server.database, group=WORK,
                    workers=WORKERS, batch=BATCH, poll_interval=0.05, listen=False)
    started = time.perf_counter()
    await worker.start()
    # Measured from here: the connections are open (their start-up would weigh on a short
    # drain), and the jobs started meanwhile do not count.
    here, there = own_cpu(), server.cpu() if server.cpu else 0.0
    started, before = time.perf_counter(), done
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(finished.wait(), budget)
        seconds, jobs = time.perf_counter() - started, done - before
        here, there = own_cpu() - here, (server.cpu() - there) if server.cpu else 0.0
    finally:
        await worker.shutdown()
    return Drain(jobs, done, seconds, here, there if server.cpu else None, marks)


# How long a drain may take beyond its budget (the Worker's start and shutdown) before the run
# gives up on it.
DRAIN_GRACE_S = 120.0


def drain(q: Queue, server: Server, n: int, budget: float, tenths: bool = False) -> Drain:
    try:
        return asyncio.run(asyncio.wait_for(drain_async(q, server, n, budget, tenths),
                                            budget + DRAIN_GRACE_S))
    except TimeoutError:
        raise RuntimeError(f"the Worker's drain did not end within {DRAIN_GRACE_S:g} s of "
                           f"its {budget:g} s budget") from None


# -- one measurement --------------------------------------------------------------------------

@dataclass
class Figures:
    p50_ms: float
    p99_ms: float
    claim_ms: float
    rate: float
    server_us: float | None
    here_us: float
    buffers: int | None
    rounds: int  # rounds of the latency loop
    jobs: int  # jobs measured in the drain
    cut: bool  # the latency loop or the drain ran out of time

    def values(self) -> list[float | None]:
        return [self.p50_ms, self.p99_ms, self.claim_ms, self.rate, self.server_us, self.here_us,
                None if self.buffers is None else float(self.buffers)]


def measure(q: Queue, server: Server, size: int, jobs: int, budget: float) -> Figures:
    # jobs due rows for the latency loop, jobs more for the drain
    make_table(q, server, backlog_values(q.dialect, q.kind), size, 2 * jobs)
    buffers = claim_buffers(q, server.database)
    seconds, claims = latencies(q, server.database, jobs, budget)
    if q.dialect == "postgres":  # the loop's dead rows are not the drain's business
        s = Session("postgres", server.database)
        vacuum(s, analyze=False)
        s.close()
    d = drain(q, server, jobs, budget)
    ms = sorted(x * 1000 for x in seconds) or [float("nan")]
    return Figures(
        p50_ms=statistics.median(ms), p99_ms=ms[min(len(ms) - 1, int(len(ms) * 0.99))],
        claim_ms=statistics.median(claims) * 1000 if claims else float("nan"),
        rate=d.rate, server_us=None if d.server_s is None else d.server_s / max(d.jobs, 1) * 1e6,
        here_us=d.here_s / max(d.jobs, 1) * 1e6, buffers=buffers, rounds=len(seconds),
        jobs=d.jobs, cut=len(seconds) < jobs or d.total < jobs)


MEASURING = ["start-up"]  # what is being measured, for a message when it fails


# -- printing ---------------------------------------------------------------------------------

COLUMN_HEADS = ("round p50 ms", "round p99 ms", "claim p50 ms", "drain jobs/s",
                "server us/job", "here us/job", "buffers/claim")


def cell(value: float | None, base: float | None) -> str:
    if value is None:
        return "-"
    figure = f"{value:,.0f}" if value >= 100 else f"{value:.2f}"
    if base is None or base != base or value != value or base == 0:
        return f"{figure} (-)"
    return f"{figure} ({value / base:.2f}x)"


def header() -> str:
    return (f"{'form':17} {'kind':10} {'backlog':>10}  "
            + "  ".join(f"{h:>19}" for h in COLUMN_HEADS))


def row(form: str, kind: str, size: int, f: Figures, base: Figures | None) -> str:
    bases = base.values() if base else [None] * len(COLUMN_HEADS)
    cells = [cell(v, b) for v, b in zip(f.values(), bases, strict=True)]
    note = ""
    if f.cut:
        note = f"  [in the time allowed: {f.rounds} rounds; {f.jobs} jobs drained]"
    return (f"{form:17} {kind:10} {size:>10,}  " + "  ".join(f"{c:>19}" for c in cells)
            + note)


def parse_sizes(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        part = part.strip().lower()
        scale = {"k": 1_000, "m": 1_000_000}.get(part[-1:], 1)
        out.append(int(float(part.rstrip("km")) * scale))
    return out


def run_backlog(args: argparse.Namespace, server: Server, folder: Path) -> None:
    parted = (f", the table partitioned by range of id ({PARTITION_IDS:,} ids a partition)"
              if args.partitioned else "")
    print(f"\n{server.label}, {version(server)}{parted}: {args.jobs} due jobs per measurement "
          f"(latency: claim 1 row and finish it, {args.jobs} rounds or {args.budget:g} s; "
          f"drain: Worker, {WORKERS} workers, batch {BATCH}); ratios against backlog 0",
          flush=True)
    print(header(), flush=True)
    indexes: dict[str, set[str]] = {}
    for form in args.forms:
        if form not in DIALECT_FORMS[server.dialect]:
            continue
        for kind in args.kinds:
            q = build(server.dialect, form, kind, folder, args.partitioned)
            indexes.setdefault(kind, set()).add(q.index or "(none: the build asked for none)")
            base: Figures | None = None
            for size in args.sizes:
                MEASURING[0] = f"{form} {kind} backlog {size:,}"
                f = measure(q, server, size, args.jobs, args.budget)
                if size == 0:
                    base = f
                print(row(form, kind, size, f, base), flush=True)
    for kind, stmts in indexes.items():
        print(f"claim index ({kind}): {'; '.join(sorted(stmts))}")


def sizes_now(s: Session) -> dict[str, float]:
    """What the table takes on disk, and PostgreSQL's counters of its rows."""
    if s.dialect == "postgres":
        s.conn.execute("SELECT pg_stat_force_next_flush()")
        r = s.conn.execute(
            f"SELECT pg_relation_size('{TABLE}'), pg_indexes_size('{TABLE}'), "
            f"pg_total_relation_size('{TABLE}'), n_live_tup, n_dead_tup, n_tup_upd, "
            f"n_tup_hot_upd, n_tup_del, autovacuum_count, (SELECT count(*) FROM {TABLE}) "
            f"FROM pg_stat_user_tables WHERE relname = '{TABLE}'").fetchone()
        keys = ("table", "indexes", "total", "live", "dead", "upd", "hot", "del", "autovacuum",
                "rows")
        return dict(zip(keys, (float(v) for v in r), strict=True))
    if s.dialect == "sqlite":
        pages = s.conn.execute("PRAGMA page_count").fetchone()[0]
        free = s.conn.execute("PRAGMA freelist_count").fetchone()[0]
        size = s.conn.execute("PRAGMA page_size").fetchone()[0]
        return {"total": float(pages * size), "free": float(free * size)}
    with s.conn.cursor() as cur:
        cur.execute("SELECT data_length, index_length, data_free FROM information_schema.TABLES "
                    "WHERE table_schema = DATABASE() AND table_name = %s", (TABLE,))
        data, index, free = cur.fetchone()
    s.conn.commit()
    return {"table": float(data), "indexes": float(index), "total": float(data + index),
            "free": float(free)}


def mb(value: float) -> str:
    return f"{value / 1e6:,.1f} MB"


def describe(dialect: str, where: str, v: dict[str, float]) -> str:
    if dialect == "postgres":
        hot = f"{v['hot'] / v['upd']:.0%}" if v["upd"] else "-"
        return (f"  {where:17} total {mb(v['total'])} (table {mb(v['table'])}, indexes "
                f"{mb(v['indexes'])}); rows {v['rows']:,.0f} (n_live_tup {v['live']:,.0f}), "
                f"dead {v['dead']:,.0f}; updates "
                f"{v['upd']:,.0f} ({hot} HOT), deletes {v['del']:,.0f}, autovacuums "
                f"{v['autovacuum']:.0f}")
    if dialect == "sqlite":
        return f"  {where:17} file {mb(v['total'])} ({mb(v['free'])} free pages)"
    return (f"  {where:17} total {mb(v['total'])} (table {mb(v['table'])}, indexes "
            f"{mb(v['indexes'])}, free {mb(v['free'])})")


def run_continuous(args: argparse.Namespace, server: Server, folder: Path) -> None:
    n = args.continuous
    print(f"\n{server.label}, {version(server)}: continuous drain of {n:,} jobs, Worker "
          f"{WORKERS} workers batch {BATCH}; rate of each tenth against the first", flush=True)
    holds = [False, True] if args.hold_xmin else [False]
    for form in args.forms:
        if form not in DIALECT_FORMS[server.dialect]:
            continue
        for kind in args.kinds:
            plain: Drain | None = None
            for held in holds:
                MEASURING[0] = f"{form} {kind} continuous" + (" (held snapshot)" if held else "")
                d = continuous_drain(args, server, folder, form, kind, held)
                if held and plain is not None and plain.rate:
                    print(f"  held snapshot against none: {d.rate / plain.rate:.2f}x", flush=True)
                plain = d


def continuous_drain(args: argparse.Namespace, server: Server, folder: Path, form: str,
                     kind: str, held: bool) -> Drain:
    """One continuous drain of a fresh table; `held`: with a REPEATABLE READ transaction open
    on another connection from before the drain until after its figures (PostgreSQL: it holds
    back the xmin vacuum may clean up to; InnoDB: its purge)."""
    n = args.continuous
    q = build(server.dialect, form, kind, folder)
    # the due jobs filled as a backlog would be: n rows in one statement
    make_table(q, server, due_values(q.dialect, q.kind), n, 0)
    s = Session(server.dialect, server.database)
    before = sizes_now(s)
    holder = hold_snapshot(server) if held else None
    try:
        d = drain(q, server, n, args.budget_continuous, tenths=True)
        time.sleep(1.0)  # the workers' counters reach pg_stat_user_tables
        after = sizes_now(s)
        buffers = claim_buffers(q, server.database)
    finally:
        if holder is not None:
            holder.rollback()
            holder.close()
    vacuum(s, analyze=False)
    vacuumed = sizes_now(s)
    s.close()
    cut = f" (stopped after {args.budget_continuous:g} s)" if len(d.marks) < 10 else ""
    print(f"{form} {kind} (index: {q.index or 'none'})"
          f"{', a snapshot held' if held else ''}: {d.total:,} jobs drained{cut}; "
          f"{d.jobs:,} in {d.seconds:.1f} s once the connections were open, "
          f"{d.rate:,.0f} jobs/s", flush=True)
    edges = [0.0, *d.marks]
    rates = [(n // 10) / (b - a) for a, b in zip(edges, edges[1:], strict=False) if b > a]
    if rates:
        print("  per tenth, jobs/s: " + ", ".join(
            f"{r:,.0f} ({r / rates[0]:.2f}x)" for r in rates))
    print(describe(server.dialect, "before:", before))
    print(describe(server.dialect, "after the drain:", after))
    if buffers is not None:
        print(f"  {'claim after it:':17} {buffers:,} shared buffers for one row claimed from "
              f"the head (EXPLAIN ANALYZE{', the snapshot still held' if held else ''})")
    print(describe(server.dialect, "after VACUUM:", vacuumed), flush=True)
    return d


def hold_snapshot(server: Server) -> Session:
    """A session in a REPEATABLE READ transaction that has read the table: its snapshot stays
    open until it is rolled back, as a report's or a backup's long transaction would."""
    s = Session(server.dialect, server.database)
    if server.dialect == "postgres":
        s.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        s.conn.execute(f"SELECT count(*) FROM {TABLE}").fetchone()
    elif server.dialect == "mysql":
        with s.conn.cursor() as cur:
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            cur.execute(f"SELECT count(*) FROM {TABLE}")
            cur.fetchall()
    else:
        s.execute("BEGIN")  # a read transaction: the WAL is not checkpointed past it
        s.conn.execute(f"SELECT count(*) FROM {TABLE}").fetchone()
    return s


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dialects", default="postgres,mysql,sqlite")
    p.add_argument("--forms", default=",".join(FORMS))
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument("--sizes", default=None, help="backlog sizes (default 0,100000,1000000; "
                   "100k and 1M are read too); 0 is always measured first")
    p.add_argument("--jobs", type=int, default=None, help="due jobs per measurement (2000)")
    p.add_argument("--budget", type=float, default=None,
                   help="most seconds of a latency loop and of a drain (20; continuous: 3600)")
    p.add_argument("--quick", action="store_true", help="sizes 0,100k, 500 jobs, 10 s budget")
    p.add_argument("--continuous", type=int, nargs="?", const=1_000_000, default=None,
                   metavar="N", help="the continuous drain of N jobs (1,000,000) instead")
    p.add_argument("--hold-xmin", action="store_true",
                   help="continuous: drain each table again with a REPEATABLE READ transaction "
                        "held open on another connection throughout, and compare")
    p.add_argument("--partitioned", action="store_true",
                   help="PostgreSQL: tables partitioned by range of id, 1,000,000 ids a "
                        "partition")
    p.add_argument("--postgres", metavar="DSN", help="a PostgreSQL database to use")
    p.add_argument("--mysql", metavar="URL", help="a MySQL/MariaDB database (mysql://...)")
    args = p.parse_args(argv)

    def names(text: str, allowed: tuple[str, ...], what: str) -> list[str]:
        out = [x.strip() for x in text.split(",") if x.strip()]
        bad = [x for x in out if x not in allowed]
        if bad:
            p.error(f"unknown {what}: {', '.join(bad)} (known: {', '.join(allowed)})")
        return out

    args.dialects = names(args.dialects, tuple(DIALECT_FORMS), "dialect")
    if args.partitioned and (args.dialects != ["postgres"] or args.continuous):
        p.error("--partitioned: PostgreSQL's backlog tables only (--dialects postgres)")
    args.forms = names(args.forms, FORMS, "form")
    args.kinds = names(args.kinds, KINDS, "kind")
    try:
        sizes = parse_sizes(args.sizes or ("0,100000" if args.quick else "0,100000,1000000"))
    except ValueError:
        p.error(f"--sizes: not a list of numbers: {args.sizes}")
    args.sizes = [0, *sorted(set(sizes) - {0})]
    args.jobs = args.jobs or (500 if args.quick else 2000)
    args.budget_continuous = args.budget or 3600.0
    args.budget = args.budget or (10.0 if args.quick else 20.0)
    folder = Path(tempfile.mkdtemp(prefix="inboxgen-backlog-"))
    failed = False
    for dialect in args.dialects:
        MEASURING[0] = "start-up"
        try:
            server = start(dialect, args, folder)
        except Exception as err:  # a server that does not start: its first line says why
            failed = True
            first = (str(err).strip().splitlines() or [""])[0]
            print(f"backlog.py: {dialect}: the server did not start: {type(err).__name__}: "
                  f"{first}", flush=True)
            continue
        try:
            if args.continuous:
                run_continuous(args, server, folder / dialect)
            else:
                run_backlog(args, server, folder / dialect)
        except Exception as err:  # a server that died, a drain that hung: say so, go on
            failed = True
            log = server.errors()
            print(f"backlog.py: {server.label}: stopped at {MEASURING[0]}: "
                  f"{type(err).__name__}: {err}" + (f" (server log: {log})" if log else ""),
                  flush=True)
        finally:
            server.stop()
    shutil.rmtree(folder, ignore_errors=True)
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
