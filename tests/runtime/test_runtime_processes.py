"""The runtime with real processes on real databases: crashes, shutdown, two workers, LISTEN.

Child processes run tests/process_worker.py on a module generated into tmp_path (imported there
by path) and report what their handlers do in a log file the parent polls. The parent looks at
the table with the generated functions on connections of its own, as another worker would.
Nothing is mocked: PostgreSQL and MariaDB are the session's private servers, SQLite a file in
tmp_path. Kinds are named <dialect>-<shape>; the MySQL/MariaDB kinds mirror the PostgreSQL ones
(same columns and roles, MySQL types), and LISTEN/NOTIFY stays PostgreSQL's (MySQL workers poll).

What the product brief (section 7, "Claim forms") asks of each form:

| | row lock | lease | advisory |
| --- | --- | --- | --- |
| after a crash (SIGKILL) | job back at once | back when the lease ends | back at once |
| crash spends an attempt | no | yes | yes |
| shutdown cut short | rolled back, attempt kept | lease stays | lock released |
"""

from __future__ import annotations

import asyncio
import datetime as dt
import gc
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg
import pymysql
import pymysql.cursors
import pytest
from dbcases import Db, MakeQueue, spec_toml, typed
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from inboxgen import Job, Worker, values
from inboxgen.runtime.backends import AdvisoryRegistry
from inboxgen.testing import run_until_idle

REPO = Path(__file__).resolve().parents[2]
WORKER_SCRIPT = Path(__file__).resolve().parents[1] / "process_worker.py"
UTC = dt.UTC
GROUP = "emails"
LEASE = 30  # seconds: far longer than any test waits, so "back at once" is not a lease running out
AT_ONCE = 3.0  # seconds: how long "at once" may take (the server noticing a dead session)

# -- queue tables ---------------------------------------------------------------------------------

# Tables written once for every dialect (dbcases.typed): a spec and its DDL.
ROW_LOCK_TABLE = (
    spec_toml("email_jobs", {"job_id": "id generated", "name": "group",
                             "attempt": "attempt generated", "payload": "payload bytes"}), """
    CREATE TABLE email_jobs (
        job_id  {id},
        name    {text} NOT NULL,
        attempt SMALLINT NOT NULL DEFAULT 1,
        payload {bytes} NOT NULL
    );
    CREATE INDEX email_jobs_claim ON email_jobs (name, job_id);
    """)
LEASE_TABLE = (
    spec_toml("lease_jobs", {"id": "id generated", "attempt": "attempt generated",
                             "locked_until": "locked_until", "payload": "payload text"}), """
    CREATE TABLE lease_jobs (
        id {id},
        attempt INTEGER NOT NULL DEFAULT 1,
        locked_until {lease},
        payload TEXT NOT NULL
    );
    """)
# InnoDB locks every row a claim reads: on MySQL the lease claim reads by an index.
LEASE_INDEX = "CREATE INDEX lease_jobs_claim ON lease_jobs (locked_until, id);\n"
REPORTS_TABLE = (
    spec_toml("report_jobs", {"id": "id generated", "attempt": "attempt generated",
                              "locked_until": "locked_until", "payload": "payload bytes"},
              dialect="sqlite"), """
    CREATE TABLE report_jobs (
        id INTEGER PRIMARY KEY,
        attempt INTEGER NOT NULL DEFAULT 1,
        locked_until TEXT,
        payload BLOB NOT NULL
    );
    """)
THUMBNAILS_TABLE = (
    spec_toml("thumbnail_jobs", {"id": "id generated", "attempt": "attempt generated",
                                 "processed_at": "processed_at", "payload": "payload json"},
              dialect="sqlite", advisory_key="image-{image_path}"), """
    CREATE TABLE thumbnail_jobs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        image_path TEXT NOT NULL,
        attempt INTEGER NOT NULL DEFAULT 1,
        processed_at TEXT,
        payload TEXT NOT NULL
    );
    """)
# kind (<dialect>-<shape>) -> its table, or an example's shape (dbcases): the ledger (advisory)
# and the chat (FIFO groups under a lease; schema-qualified, mixed-case), their MySQL twins.
KINDS: dict[str, tuple[str, str] | str] = {
    "pg-row_lock": ROW_LOCK_TABLE,
    "pg-fifo_lease": "chat",
    "pg-lease": LEASE_TABLE,
    "pg-advisory": "ledger",
    "sqlite-lease": REPORTS_TABLE,
    "sqlite-advisory": THUMBNAILS_TABLE,
    "mysql-row_lock": ROW_LOCK_TABLE,
    "mysql-fifo_lease": "chat",
    "mysql-lease": (LEASE_TABLE[0], LEASE_TABLE[1] + LEASE_INDEX),
    "mysql-advisory": "ledger",
}
DIALECTS = {"pg": "postgres", "sqlite": "sqlite", "mysql": "mysql"}
CONVERSATION = "c1"
ACCOUNTS = 100  # advisory kinds on a server: rows of account i % ACCOUNTS share the key


def now() -> dt.datetime:
    return dt.datetime.now(UTC)


def until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll `check` until it returns something truthy (returned), failing after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)


async def until_async(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.005)


@dataclass
class Queue:
    """A generated module, the file it lives in, and its database with the table created."""

    kind: str
    module: ModuleType
    path: Path
    db: Db  # a SQLite file, a PostgreSQL conninfo or a MySQL URL, and plain connections to it
    table: str
    id_column: str

    @property
    def dialect(self) -> str:
        return self.db.dialect

    @property
    def form(self) -> str:
        form: str = self.module.DESCRIPTOR.form
        return form

    @property
    def database(self) -> str:
        return self.db.database

    @property
    def pg(self) -> bool:
        return self.dialect == "postgres"

    @property
    def mysql(self) -> bool:
        return self.db.mysql

    @property
    def server(self) -> bool:
        """PostgreSQL or MySQL: sessions and locks live on a server another process can see."""
        return not self.db.sqlite

    @property
    def shape(self) -> str:
        """The kind without its dialect: row_lock, lease, fifo_lease, advisory."""
        return self.kind.split("-", 1)[1]

    @property
    def group(self) -> str | None:
        if self.shape == "row_lock":
            return GROUP
        return CONVERSATION if self.shape == "fifo_lease" else None

    def claimed(self, rows: list[Any]) -> list[tuple[int, int]]:
        """(id, attempt) of claimed rows."""
        return [(getattr(r, self.id_column), r.attempt) for r in rows]

    def connect(self, *, autocommit: bool = False) -> Any:
        """A connection of the dialect's driver; MySQL sessions as the worker's own."""
        return self.db.connect(autocommit=autocommit)

    def new_row(self, i: int) -> Any:
        new = self.module.NewRow
        if self.shape == "row_lock":
            return new(name=GROUP, payload=f"job {i}".encode())
        if self.kind == "sqlite-lease":
            return new(payload=f"job {i}".encode())
        if self.shape == "lease":
            return new(payload=f"job {i}")
        if self.shape == "fifo_lease":
            return new(conversation=CONVERSATION, body=f"message {i}",
                       retry_after=now() - dt.timedelta(seconds=1))
        if self.server:  # advisory
            return new(account_id=i % ACCOUNTS, payload={"n": i})
        return new(image_path=f"img-{i % 50}.png", payload={"n": i})

    def add(self, n: int) -> list[int]:
        """Enqueue n rows in one transaction (the generated bulk insert); their ids in order."""
        before = set(self.rows())
        with closing(self.connect()) as conn:
            self.module.insert_many(conn, [self.new_row(i) for i in range(n)])
            conn.commit()
        return sorted(set(self.rows()) - before)

    def rows(self) -> dict[int, dict[str, Any]]:
        """Every row of the table, read on a fresh connection (as another process sees it)."""
        sql = f"SELECT * FROM {self.table}"
        if self.pg:
            with psycopg.connect(self.database, autocommit=True, row_factory=dict_row) as c:
                found = c.execute(sql).fetchall()
        elif self.mysql:
            with closing(self.connect(autocommit=True)) as c, \
                    c.cursor(pymysql.cursors.DictCursor) as cur:
                cur.execute(sql)
                found = list(cur.fetchall())
        else:
            with closing(sqlite3.connect(self.database, timeout=30)) as c:
                c.row_factory = sqlite3.Row
                found = [dict(r) for r in c.execute(sql).fetchall()]
        return {r[self.id_column]: dict(r) for r in found}

    def row(self, job_id: int) -> dict[str, Any] | None:
        return self.rows().get(job_id)

    def finished(self, job_id: int) -> bool:
        return job_id not in self.unfinished()

    def unfinished(self) -> set[int]:
        """Ids of the rows still to do (neither deleted nor marked processed)."""
        return {job for job, row in self.rows().items() if row.get("processed_at") is None}

    def locked_until(self, job_id: int) -> dt.datetime | None:
        row = self.row(job_id)
        assert row is not None
        value = row["locked_until"]
        if isinstance(value, str):
            return values.parse_sqlite_time(value)
        if isinstance(value, dt.datetime) and value.tzinfo is None:
            return value.replace(tzinfo=UTC)  # MySQL DATETIME: naive UTC
        return value  # type: ignore[no-any-return]

    def key(self, job_id: int) -> str:
        row = self.row(job_id)
        assert row is not None
        if self.server:
            return f"account-{row['account_id']}"
        return f"image-{row['image_path']}"

    # -- claiming from the parent, leaving the table as it was -------------------------------

    def probe(self, at: dt.datetime | None = None) -> list[Any]:
        """The rows the generated claim would hand out at `at` (default: now), as claimed rows;
        rolled back afterwards, so the table is left as it was."""
        at = at or now()
        m = self.module
        with closing(self.connect()) as conn:
            try:
                if self.form == "row_lock":
                    rows: list[Any] = m.claim(conn, group=GROUP, limit=10)
                elif self.shape == "fifo_lease":
                    head = m.fifo_claim(conn, group=CONVERSATION, now=at,
                                        locked_until=at + dt.timedelta(seconds=LEASE))
                    rows = [] if head is None else [head]
                elif self.form == "lease":
                    rows = m.claim(conn, now=at, locked_until=at + dt.timedelta(seconds=LEASE),
                                   limit=10)
                else:
                    rows = self._probe_advisory(conn, at)
            finally:
                conn.rollback()
        return rows

    def _probe_advisory(self, conn: Any, at: dt.datetime) -> list[Any]:
        assert self.server, "SQLite's advisory registry lives in one process: probe it there"
        m = self.module
        rows = []
        for candidate in m.candidates(conn, now=at, limit=10):
            key = m.advisory_key(candidate)
            if not m.lock(conn, key=key):
                continue
            try:
                taken = m.take(conn, id=candidate.id, now=at)
                if taken is not None:
                    rows.append(taken)
            finally:
                conn.rollback()  # the take counted an attempt: undo it
                m.unlock(conn, key=key)
                conn.commit()
        return rows

    def key_is_free(self, key: str) -> bool:
        """Whether the parent can take the advisory lock on `key` right now (released again)."""
        if not self.server:
            owner = object()
            if not AdvisoryRegistry.try_lock(self.database, key, owner):
                return False
            AdvisoryRegistry.unlock(self.database, key, owner)
            return True
        with closing(self.connect(autocommit=True)) as conn:
            if not self.module.lock(conn, key=key):
                return False
            self.module.unlock(conn, key=key)
            return True

    # -- what a server still holds for a worker ----------------------------------------------

    def sessions(self, application_name: str) -> int:
        """Sessions of a worker: on PostgreSQL by its application_name; on MySQL, which has
        none, by the test's own database (every session connected to it but this one)."""
        if self.mysql:
            with closing(self.connect(autocommit=True)) as conn, conn.cursor() as cur:
                cur.execute("SELECT count(*) FROM information_schema.PROCESSLIST "
                            "WHERE DB = %s AND ID <> CONNECTION_ID()",
                            [self.db.mysql_args["database"]])
                row = cur.fetchone()
        else:
            with psycopg.connect(self.database, autocommit=True) as pg:
                row = pg.execute("SELECT count(*) FROM pg_stat_activity "
                                 "WHERE application_name = %s", [application_name]).fetchone()
        assert row is not None
        return int(row[0])

    def advisory_locks(self) -> list[tuple[Any, ...]]:
        """Advisory locks held on the server for this database: PostgreSQL's from pg_locks; on
        MySQL, every key the advisory rows can have (account-0 .. account-99) whose user lock
        IS_USED_LOCK reports held, with the holder's connection id."""
        if self.mysql:
            return self._mysql_user_locks()
        with psycopg.connect(self.database, autocommit=True) as conn:
            return conn.execute(
                "SELECT pid, classid, objid, granted FROM pg_locks WHERE locktype = 'advisory'"
                " AND database = (SELECT oid FROM pg_database"
                " WHERE datname = current_database())").fetchall()

    def _mysql_user_locks(self) -> list[tuple[Any, ...]]:
        if self.form != "advisory":
            return []
        # The lock name as the generated LOCK statement spells it (checked here, so a change of
        # naming fails loudly instead of looking at names nobody takes).
        name = "IF(CHAR_LENGTH(name) > 64, SHA2(name, 256), name)"
        named = "FROM (SELECT CONCAT(DATABASE(), '.', %(key)s) AS name) AS lock_name"
        assert f"GET_LOCK({name}, 0)\n{named}" in self.module.LOCK
        held = []
        with closing(self.connect(autocommit=True)) as conn, conn.cursor() as cur:
            for n in range(ACCOUNTS):
                key = f"account-{n}"
                cur.execute(f"SELECT IS_USED_LOCK({name}) {named}", {"key": key})
                row = cur.fetchone()
                if row is not None and row[0] is not None:
                    held.append((key, row[0]))
        return held


MakeKind = Callable[[str], Queue]


@pytest.fixture
def make_queue(queue: MakeQueue) -> MakeKind:
    """make_queue(kind) -> Queue: the kind's module and its table on a fresh PostgreSQL or
    MariaDB database or a SQLite file (the shared `queue` fixture), with what a child process
    and the parent need to reach them."""

    def make(kind: str) -> Queue:
        dialect, source = DIALECTS[kind.split("-")[0]], KINDS[kind]
        if isinstance(source, str):
            made = queue(dialect, source)
        else:
            spec, ddl = source
            made = queue(dialect, spec=spec, ddl=typed(ddl, dialect),
                         name=kind.replace("-", "_"))
        assert made.mod.__file__ is not None
        return Queue(kind, made.mod, Path(made.mod.__file__), made.db, made.table,
                     made.roles["id"])

    return make


# -- child processes ------------------------------------------------------------------------------


class Child:
    """A process running tests/process_worker.py, with its event log."""

    def __init__(self, q: Queue, mode: str, folder: Path, name: str, *,
                 application_name: str | None = None, **options: Any) -> None:
        self.name = name
        self.log = folder / f"{name}.log"
        self.err = folder / f"{name}.err"
        self.log.touch()
        database = q.database
        if application_name is not None and q.pg:
            database = make_conninfo(database, application_name=application_name)
        cmd = [sys.executable, str(WORKER_SCRIPT), str(q.path), database, mode,
               "--log", str(self.log)]
        if q.group is not None:
            cmd += ["--group", q.group]
        for option, value in options.items():
            flag = "--" + option.replace("_", "-")
            if value is True:
                cmd.append(flag)
            elif value is not None and value is not False:
                cmd += [flag, str(value)]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(REPO), *filter(None, [env.get("PYTHONPATH")])])
        with open(self.err, "wb") as err:
            self.proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                                         stdout=err, stderr=err)

    def events(self, kind: str | None = None) -> list[list[str]]:
        lines = [line.split(" ", 1) for line in
                 self.log.read_text(encoding="utf-8").splitlines() if line]
        parsed = [[first, *rest[0].split()] if rest and first != "exit" else [first, *rest]
                  for first, *rest in lines]
        return [e for e in parsed if kind is None or e[0] == kind]

    def stderr(self) -> str:
        return self.err.read_text(encoding="utf-8", errors="replace")[-4000:]

    def wait_for(self, kind: str, count: int = 1, timeout: float = 30.0) -> list[list[str]]:
        """Wait until the log holds `count` events of `kind`; fails early if the child died."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.events(kind)
            if len(found) >= count:
                return found
            if self.proc.poll() is not None:
                found = self.events(kind)
                if len(found) >= count:
                    return found
                raise AssertionError(f"{self.name} exited ({self.proc.returncode}) before "
                                     f"{count} {kind!r} event(s):\n{self.stderr()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name}: no {count} {kind!r} event(s) after "
                                     f"{timeout} s; log {self.events()}\n{self.stderr()}")
            time.sleep(0.005)

    def signal(self, sig: int) -> None:
        assert self.proc.poll() is None, f"{self.name} is not running:\n{self.stderr()}"
        self.proc.send_signal(sig)

    def wait_exit(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} still running after {timeout} s; log "
                                 f"{self.events()}\n{self.stderr()}") from None

    def sigkill(self) -> None:
        self.signal(signal.SIGKILL)
        assert self.wait_exit(10) == -signal.SIGKILL

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


Spawn = Callable[..., Child]


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Spawn]:
    """spawn(queue, mode, name=..., **options) -> Child; every child is killed at the end."""
    children: list[Child] = []

    def start(q: Queue, mode: str, name: str = "child", **options: Any) -> Child:
        child = Child(q, mode, tmp_path, f"{name}-{len(children)}", **options)
        children.append(child)
        return child

    try:
        yield start
    finally:
        for child in children:
            child.kill()


def app_name() -> str:
    return f"ibx_test_{uuid.uuid4().hex[:12]}"


# -- 1-3. Crashes: SIGKILL while a handler runs ---------------------------------------------------


@pytest.mark.parametrize("kind", ["pg-row_lock", "mysql-row_lock"])
def test_row_lock_crash_returns_the_job_at_once_and_spends_no_attempt(
        make_queue: MakeKind, spawn: Spawn, kind: str) -> None:
    q = make_queue(kind)
    (job,) = q.add(1)
    child = spawn(q, "crash")
    assert child.wait_for("start") == [["start", str(job), "1"]]
    assert q.probe() == [], "the child's open claim transaction holds the row"

    child.sigkill()
    back = until(q.probe, AT_ONCE, "the crashed child's row to be claimable again")
    assert q.claimed(back) == [(job, 1)], "a crash under row lock spends no attempt"
    row = q.row(job)
    assert row is not None and row["attempt"] == 1

    # The hazard this form carries (product brief, "Hazards"): a job that kills its process
    # comes back with the same attempt, every time.
    again = spawn(q, "crash")
    assert again.wait_for("start") == [["start", str(job), "1"]]
    again.sigkill()
    assert q.claimed(until(q.probe, AT_ONCE, "the row to come back again")) == [(job, 1)]


@pytest.mark.parametrize("kind", ["pg-advisory", "mysql-advisory"])
def test_advisory_crash_releases_the_key_at_once_and_spends_an_attempt(
        make_queue: MakeKind, spawn: Spawn, kind: str) -> None:
    # MySQL: GET_LOCK is a session lock, so it dies with the killed child's session.
    q = make_queue(kind)
    (job,) = q.add(1)
    key = q.key(job)
    child = spawn(q, "crash")
    assert child.wait_for("start") == [["start", str(job), "1"]]
    assert not q.key_is_free(key), "the child holds the job's key"
    assert len(q.advisory_locks()) == 1, "the server shows the child's lock"
    row = q.row(job)
    assert row is not None and row["attempt"] == 2, "the take counted the delivery"
    assert q.probe(now() + dt.timedelta(seconds=1)) == []

    child.sigkill()
    until(lambda: q.key_is_free(key), AT_ONCE, f"the key {key!r} to be free after the crash")
    assert q.advisory_locks() == []
    with closing(q.connect(autocommit=True)) as conn:
        at = now() + dt.timedelta(seconds=1)
        assert q.module.lock(conn, key=key)
        candidates = q.module.candidates(conn, now=at, limit=10)
        assert [(c.id, c.attempt) for c in candidates] == [(job, 2)]
        taken = q.module.take(conn, id=job, now=at)
        assert taken is not None and taken.attempt == 2, "the next delivery reads 2"
        q.module.unlock(conn, key=key)


@pytest.mark.parametrize("kind", ["sqlite-lease", "pg-lease", "pg-fifo_lease", "mysql-lease",
                                  "mysql-fifo_lease"])
def test_lease_crash_returns_the_job_when_its_lease_ends_with_the_attempt_counted(
        make_queue: MakeKind, spawn: Spawn, kind: str) -> None:
    # *-fifo_lease (chat-shaped; on PostgreSQL in schema "Chat"): the crashed head's lease also
    # holds back the rest of its FIFO group until it ends.
    q = make_queue(kind)
    job, *_ = q.add(2 if q.group else 1)
    child = spawn(q, "crash", lease=LEASE)
    assert child.wait_for("start") == [["start", str(job), "1"]]
    child.sigkill()

    expiry = q.locked_until(job)
    assert expiry is not None and expiry > now() + dt.timedelta(seconds=LEASE - 5)
    assert q.probe() == [], "not claimable while the lease runs"
    assert q.probe(expiry - dt.timedelta(seconds=1)) == [], "nor a second before it ends"
    back = q.probe(expiry)
    assert q.claimed(back)[:1] == [(job, 2)], "claimable once it ends, attempt 2"
    row = q.row(job)
    assert row is not None and row["attempt"] == 2


# -- 4. Two workers on one queue ------------------------------------------------------------------

ROWS = 1000
SERVING_ROWS = 300  # the advisory variants that serve instead of run_until_idle
# MySQL advisory: a GET_LOCK and four transactions per row; 300 rows over two processes of three
# slots and 100 keys still contend on every key, and keep this file's run time in bounds.
ROWS_BY_KIND = {"mysql-advisory": 300}


Delivery = tuple[str, int, int | None]  # (worker or child, row id, attempt)


def assert_each_row_delivered_once(delivered: list[Delivery], ids: list[int]) -> None:
    """Every row of `ids` delivered exactly once, at attempt 1."""
    counts = Counter(job for _, job, _ in delivered)
    assert [job for job, n in counts.items() if n > 1] == [], "a row was delivered twice"
    assert set(counts) == set(ids), "every row is delivered"
    assert {attempt for _, _, attempt in delivered} == {1}


def child_deliveries(children: list[Child], event: str) -> list[Delivery]:
    return [(child.name, int(e[1]), int(e[2])) for child in children for e in child.events(event)]


class KeyedHandler:
    """A handler for the SQLite advisory rows that records each delivery and any two jobs of one
    key that ran side by side."""

    def __init__(self) -> None:
        self.delivered: list[Delivery] = []
        self.running: Counter[str] = Counter()
        self.overlaps: list[str] = []

    async def __call__(self, job: Job[Any]) -> None:
        key = f"image-{job.row.image_path}"
        self.running[key] += 1
        if self.running[key] > 1:
            self.overlaps.append(key)
        self.delivered.append((job.worker, job.id, job.attempt))
        await asyncio.sleep(0.001)
        self.running[key] -= 1

    def assert_each_row_once_by_both(self, ids: list[int]) -> None:
        assert_each_row_delivered_once(self.delivered, ids)
        assert self.overlaps == [], "jobs sharing a key ran side by side"
        per_worker = Counter(name for name, _, _ in self.delivered)
        assert per_worker["a"] > 0 and per_worker["b"] > 0, per_worker


@pytest.mark.parametrize("kind", [
    "pg-row_lock",
    "pg-lease",
    "pg-advisory",
    "sqlite-lease",
    "mysql-row_lock",
    "mysql-lease",
    "mysql-advisory",
])
def test_two_worker_processes_deliver_every_row_once(
        make_queue: MakeKind, spawn: Spawn, tmp_path: Path, kind: str) -> None:
    q = make_queue(kind)
    rows = ROWS_BY_KIND.get(kind, ROWS)
    ids = q.add(rows)
    assert len(ids) == rows
    go = tmp_path / "go"
    children = [spawn(q, "drain", name=name, go=go, workers=3, batch=10, lease=LEASE,
                      job_seconds=0.001) for name in ("a", "b")]
    for child in children:
        child.wait_for("ready")
    go.touch()  # both start claiming together
    for child in children:
        assert child.wait_exit(30) == 0, child.stderr()
        assert child.events("idle")

    delivered = child_deliveries(children, "deliver")
    assert_each_row_delivered_once(delivered, ids)
    per_child = Counter(name for name, _, _ in delivered)
    assert all(per_child[c.name] > 0 for c in children), f"both took part: {per_child}"
    assert q.unfinished() == set()


START_ROUNDS = 8  # pairs of processes started together, each on a file of its own


def test_two_sqlite_worker_processes_started_at_once_on_a_fresh_file_both_serve(
        make_queue: MakeKind, spawn: Spawn, tmp_path: Path) -> None:
    # A file as migrations leave it, not yet in WAL mode: each process's first connection turns
    # WAL on, a change SQLite answers "database is locked" at once (without its busy handler)
    # while the other process holds a lock. The second to get there must wait, not fail to start.
    def one_round(round_: int) -> None:
        q = make_queue("sqlite-lease")
        gc.collect()  # the connection the table was made on: leaving WAL needs it closed
        with closing(sqlite3.connect(q.database, isolation_level=None)) as c:
            assert c.execute("PRAGMA journal_mode=DELETE").fetchone() == ("delete",)
        ids = q.add(60)
        go = tmp_path / f"go-{round_}"
        children = [spawn(q, "run", name=name, go=go, workers=4, poll_interval=0.02,
                          job_seconds=0.05) for name in (f"a{round_}", f"b{round_}")]
        for child in children:
            child.wait_for("ready")
        go.touch()  # both connect at once
        for child in children:
            child.wait_for("start", timeout=30)  # serving: it started a job
        until(lambda: not q.unfinished(), 30, "every row to be finished")
        for child in children:
            child.signal(signal.SIGTERM)
        for child in children:
            assert child.wait_exit(15) == 0, child.stderr()
            assert "ConnectFailed" not in child.stderr(), child.stderr()
        assert_each_row_delivered_once(child_deliveries(children, "start"), ids)
        with closing(sqlite3.connect(q.database)) as c:
            assert c.execute("PRAGMA journal_mode").fetchone() == ("wal",)

    for round_ in range(START_ROUNDS):
        one_round(round_)


def test_two_sqlite_advisory_workers_in_one_process_deliver_every_row_once(
        make_queue: MakeKind) -> None:
    # SQLite's advisory locks are an in-process registry: one process per database file, so the
    # two workers share a process here.
    q = make_queue("sqlite-advisory")
    ids = q.add(ROWS)
    handler = KeyedHandler()

    workers = [Worker(q.module.DESCRIPTOR, handler, database=q.database, name=name,
                      workers=3, batch=10, poll_interval=0.05) for name in ("a", "b")]

    async def both() -> None:
        await asyncio.gather(*(run_until_idle(w, timeout=30) for w in workers))

    asyncio.run(both())
    handler.assert_each_row_once_by_both(ids)
    assert q.unfinished() == set()


@pytest.mark.parametrize("kind", ["pg-advisory", "mysql-advisory"])
def test_an_advisory_worker_with_several_slots_drains_without_waiting_out_its_poll_interval(
        make_queue: MakeKind, kind: str) -> None:
    # One worker, three slots, a
    # queue full of due rows, poll interval 10 s. The slots only wait when a claim came back
    # short, which should mean nothing more is due.
    q = make_queue(kind)
    q.add(100)

    async def handler(job: Job[Any]) -> None:
        pass

    worker = Worker(q.module.DESCRIPTOR, handler, database=q.database, workers=3, batch=10,
                    poll_interval=10, listen=False)

    async def serve() -> None:
        serving = asyncio.create_task(worker.serve())
        try:
            await until_async(lambda: worker.stats.acked >= 100, 5, "100 acks")
        except AssertionError as err:
            raise AssertionError(f"{err}; {worker.stats.acked} acked, then every slot waited "
                                 f"for its poll interval") from None
        finally:
            worker.stop()
            await asyncio.wait_for(serving, 15)

    asyncio.run(serve())
    assert q.unfinished() == set()


@pytest.mark.parametrize("kind", ["pg-advisory", "mysql-advisory"])
def test_two_advisory_worker_processes_serving_never_share_a_row(
        make_queue: MakeKind, spawn: Spawn, tmp_path: Path, kind: str) -> None:
    # The same property as above without run_until_idle: both children serve (Worker.run) until
    # the parent sees every row finished, then get SIGTERM.
    q = make_queue(kind)
    ids = q.add(SERVING_ROWS)
    go = tmp_path / "go"
    # Jobs of 5 ms: one child alone takes about half a second for the rows, more than the
    # other needs to start (its connections open at start-up), so both take part.
    children = [spawn(q, "run", name=name, go=go, workers=3, batch=10, poll_interval=0.02,
                      job_seconds=0.005) for name in ("a", "b")]
    for child in children:
        child.wait_for("ready")
    go.touch()
    until(lambda: not q.unfinished(), 30, "every row to be finished")
    for child in children:
        child.signal(signal.SIGTERM)
    for child in children:
        assert child.wait_exit(15) == 0, child.stderr()

    delivered = child_deliveries(children, "start")
    assert_each_row_delivered_once(delivered, ids)
    per_child = Counter(name for name, _, _ in delivered)
    assert all(per_child[c.name] > 0 for c in children), f"both took part: {per_child}"


def test_two_sqlite_advisory_workers_serving_never_share_a_row(make_queue: MakeKind) -> None:
    q = make_queue("sqlite-advisory")
    ids = q.add(SERVING_ROWS)
    handler = KeyedHandler()
    delivered = handler.delivered

    workers = [Worker(q.module.DESCRIPTOR, handler, database=q.database, name=name,
                      workers=3, batch=10, poll_interval=0.02) for name in ("a", "b")]

    async def serve_until_done() -> None:
        tasks = [asyncio.create_task(w.serve()) for w in workers]
        try:
            await until_async(lambda: len(delivered) >= SERVING_ROWS
                              and all(w.quiet for w in workers),
                              30, "every row to be delivered")
        finally:
            for w in workers:
                w.stop()
            await asyncio.wait_for(asyncio.gather(*tasks), 15)

    asyncio.run(serve_until_done())
    handler.assert_each_row_once_by_both(ids)
    assert q.unfinished() == set()


# -- 5. LISTEN/NOTIFY ----------------------------------------------------------------------------


def test_notify_wakes_an_idle_worker_at_once_also_after_its_listener_is_killed(
        make_queue: MakeKind, caplog: pytest.LogCaptureFixture) -> None:
    q = make_queue("pg-row_lock")
    with caplog.at_level(logging.WARNING, logger="inboxgen.worker"):
        asyncio.run(_listen_scenario(q))
    assert "listening again" in caplog.text, "the lost listener was re-established"


async def _listen_scenario(q: Queue) -> None:
    starts: list[tuple[int, float]] = []

    async def handler(job: Job[Any]) -> None:
        starts.append((job.id, time.monotonic()))

    # Polls far apart: a job that starts well before the next poll was woken. The bounds below
    # are against the poll, not a latency, which a loaded machine stretches to seconds.
    worker = Worker(q.module.DESCRIPTOR, handler, database=q.database, group=GROUP,
                    workers=2, poll_interval=300)
    assert worker.listen
    serving = asyncio.create_task(worker.serve())

    async def enqueue_and_wait() -> float:
        """Insert and notify in one transaction; seconds from the commit to the handler."""
        seen = len(starts)
        async with await psycopg.AsyncConnection.connect(q.database) as conn:
            await q.module.insert_async(conn, q.new_row(len(starts)))
            await q.module.notify_async(conn, GROUP)
            await conn.commit()
            committed = time.monotonic()
        await until_async(lambda: len(starts) > seen, 60, "the notified job to start")
        return starts[seen][1] - committed

    try:
        await until_async(lambda: worker.listener_pid is not None and worker.quiet, 15,
                          "the worker to listen and go idle")
        first = await enqueue_and_wait()
        print(f"notify latency {first * 1000:.1f} ms")
        assert first < 60, f"a notified job started after {first:.3f} s (poll interval 300 s)"

        old = worker.listener_pid
        async with await psycopg.AsyncConnection.connect(q.database, autocommit=True) as admin:
            cur = await admin.execute("SELECT pg_terminate_backend(%s)", [old])
            assert (await cur.fetchone()) == (True,)
        await until_async(lambda: worker.listener_pid not in (None, old), 10,
                          "the listener to reconnect")
        await asyncio.sleep(0.2)  # let the wake-up after the reconnect run its claims
        await until_async(lambda: worker.quiet, 10, "the worker to go idle again")
        async with await psycopg.AsyncConnection.connect(q.database, autocommit=True) as admin:
            cur = await admin.execute("SELECT pid FROM pg_stat_activity WHERE pid = %s",
                                      [worker.listener_pid])
            assert await cur.fetchone() is not None, "the new listening session is alive"
        second = await enqueue_and_wait()
        print(f"notify latency after the listener was killed {second * 1000:.1f} ms")
        assert second < 60, f"after the listener was killed, a notified job started after " \
                            f"{second:.3f} s (poll interval 300 s)"
    finally:
        worker.stop()
        await asyncio.wait_for(serving, 15)
    assert worker.stats.acked == 2


# -- 6-7. Shutdown -------------------------------------------------------------------------------

SHUTDOWN_KINDS = ["pg-row_lock", "pg-lease", "pg-advisory", "sqlite-lease",
                  "mysql-row_lock", "mysql-lease", "mysql-advisory"]


def assert_worker_left_nothing(q: Queue, application_name: str) -> None:
    """No session of the worker and no advisory lock is left on the server (MySQL: no session
    on the test's database, no user lock on any key)."""
    if not q.server:
        return
    until(lambda: q.sessions(application_name) == 0, AT_ONCE,
          f"the sessions of {application_name} to end")
    assert q.advisory_locks() == []


def assert_finished_in_time(q: Queue, first: int, second: int) -> None:
    assert q.finished(first), "the job in work finished and was acked"
    row = q.row(second)
    assert row is not None and row["attempt"] == 1, "no claim after the stop"
    if q.form == "lease":
        assert row["locked_until"] is None


def assert_unfinished_follows_its_form(q: Queue, job: int) -> None:
    """A job cut off by the shutdown timeout is left as its claim form says."""
    row = q.row(job)
    assert row is not None, "the unfinished job was not acked"
    if q.form == "row_lock":
        back = q.probe()
        assert q.claimed(back) == [(job, 1)], \
            "row lock: rolled back, claimable at once, attempt unchanged"
        assert row["attempt"] == 1
    elif q.form == "lease":
        expiry = q.locked_until(job)
        assert expiry is not None and expiry > now(), "lease: the lease stays"
        assert q.probe() == [], "lease: not claimable before the lease ends"
        assert q.claimed(q.probe(expiry)) == [(job, 2)]
    else:
        assert q.key_is_free(q.key(job)), "advisory: the key's lock is released"
        assert row["attempt"] == 2, "advisory: the delivery counted its attempt"
        if q.server:
            assert q.claimed(q.probe(now() + dt.timedelta(seconds=1))) == [(job, 2)], \
                "advisory: claimable at once"


@pytest.mark.parametrize("kind", SHUTDOWN_KINDS)
def test_sigterm_lets_the_job_in_work_finish_then_exits_0(
        make_queue: MakeKind, spawn: Spawn, kind: str) -> None:
    q = make_queue(kind)
    first, second = q.add(2)
    app = app_name()
    child = spawn(q, "run", application_name=app, job_seconds=1.0, shutdown_timeout=15,
                  lease=LEASE)
    assert child.wait_for("start") == [["start", str(first), "1"]]
    if q.server:
        assert q.sessions(app) > 0, \
            "the child's sessions are seen (PostgreSQL: its application_name; MySQL: its database)"
    child.signal(signal.SIGTERM)
    assert child.wait_exit(15) == 0, child.stderr()
    assert child.events("done") == [["done", str(first)]]
    assert len(child.events("start")) == 1
    assert child.events("exit")
    assert_finished_in_time(q, first, second)
    assert_worker_left_nothing(q, app)


@pytest.mark.parametrize("kind", SHUTDOWN_KINDS)
def test_sigterm_past_the_shutdown_timeout_leaves_the_job_as_its_form_says(
        make_queue: MakeKind, spawn: Spawn, kind: str) -> None:
    q = make_queue(kind)
    (job,) = q.add(1)
    app = app_name()
    child = spawn(q, "run", application_name=app, job_seconds=120, shutdown_timeout=0.5,
                  lease=LEASE)
    child.wait_for("start")
    started = time.monotonic()
    child.signal(signal.SIGTERM)
    assert child.wait_exit(15) == 0, child.stderr()
    assert time.monotonic() - started < 10, "the shutdown timeout cut the job off"
    assert child.events("done") == []
    assert_worker_left_nothing(q, app)  # before the parent takes any lock of its own
    assert_unfinished_follows_its_form(q, job)


async def _serve_then_stop(q: Queue, application_name: str, *, job_seconds: float,
                           shutdown_timeout: float, pool: Any = None,
                           keep: list[Worker] | None = None) -> list[tuple[str, int]]:
    """Serve until a job starts, then stop. The worker goes into `keep`: while the caller holds
    it, nothing the worker left open is closed by the garbage collector (a PyMySQL connection
    dropped with its worker closes its socket, so the server would end the session for it)."""
    events: list[tuple[str, int]] = []

    async def handler(job: Job[Any]) -> None:
        events.append(("start", job.id))
        await asyncio.sleep(job_seconds)
        events.append(("done", job.id))

    database: str | None = q.database
    if pool is not None:
        database = None
    elif q.pg:
        database = make_conninfo(q.database, application_name=application_name)
    worker = Worker(q.module.DESCRIPTOR, handler, database=database, pool=pool, group=q.group,
                    workers=1, batch=1, lease=LEASE, poll_interval=0.05,
                    shutdown_timeout=shutdown_timeout)
    if keep is not None:
        keep.append(worker)
    serving = asyncio.create_task(worker.serve())
    try:
        await until_async(lambda: events, 15, "a job to start")
    finally:
        worker.stop()
        await asyncio.wait_for(serving, shutdown_timeout + 15)
    return events


@pytest.mark.parametrize("kind", [*SHUTDOWN_KINDS, "sqlite-advisory"])
def test_stop_lets_the_job_in_work_finish(make_queue: MakeKind, kind: str) -> None:
    q = make_queue(kind)
    first, second = q.add(2)
    app = app_name()
    kept: list[Worker] = []
    events = asyncio.run(_serve_then_stop(q, app, job_seconds=0.5, shutdown_timeout=15,
                                          keep=kept))
    assert events == [("start", first), ("done", first)]
    assert_finished_in_time(q, first, second)
    assert_worker_left_nothing(q, app)
    assert kept and not kept[0].started


@pytest.mark.parametrize("kind", [*SHUTDOWN_KINDS, "sqlite-advisory"])
def test_stop_past_the_shutdown_timeout_leaves_the_job_as_its_form_says(
        make_queue: MakeKind, kind: str) -> None:
    q = make_queue(kind)
    (job,) = q.add(1)
    app = app_name()
    started = time.monotonic()
    kept: list[Worker] = []
    events = asyncio.run(_serve_then_stop(q, app, job_seconds=120, shutdown_timeout=0.3,
                                          keep=kept))
    assert time.monotonic() - started < 10
    assert events == [("start", job)]
    assert_worker_left_nothing(q, app)
    assert_unfinished_follows_its_form(q, job)
    assert kept and not kept[0].started


@pytest.mark.parametrize("kind", ["pg-row_lock", "pg-lease", "pg-advisory"])
def test_stop_past_the_shutdown_timeout_on_a_pool_the_worker_does_not_own(
        make_queue: MakeKind, kind: str) -> None:
    # The user's pool stays open after the worker's shutdown, so whatever the worker left on its
    # sessions (an open claim transaction, an advisory lock) would still be there: the row lock
    # must have been rolled back and the advisory key unlocked by the worker itself.
    q = make_queue(kind)
    (job,) = q.add(1)
    app = app_name()

    async def scenario() -> list[tuple[str, int]]:
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            make_conninfo(q.database, application_name=app), min_size=2, max_size=3,
            open=False)
        await pool.open(wait=True)
        try:
            events = await _serve_then_stop(q, app, job_seconds=120, shutdown_timeout=0.3,
                                            pool=pool)
            assert q.sessions(app) >= 1, "the pool is still open"
            assert q.advisory_locks() == []
            await asyncio.to_thread(assert_unfinished_follows_its_form, q, job)
        finally:
            await pool.close()
        return events

    assert asyncio.run(scenario()) == [("start", job)]
    until(lambda: q.sessions(app) == 0, AT_ONCE, "the pool's sessions to end")


@pytest.mark.parametrize(("kind", "sig"), [
    pytest.param("pg-row_lock", signal.SIGTERM, id="pg-SIGTERM"),
    pytest.param("pg-row_lock", signal.SIGINT, id="pg-SIGINT"),
    pytest.param("sqlite-lease", signal.SIGTERM, id="sqlite-SIGTERM"),
    pytest.param("mysql-row_lock", signal.SIGTERM, id="mysql-SIGTERM"),
])
def test_run_returns_normally_on_a_signal_and_the_child_exits_0(
        make_queue: MakeKind, spawn: Spawn, kind: str, sig: int) -> None:
    q = make_queue(kind)
    (job,) = q.add(1)
    child = spawn(q, "run")
    child.wait_for("done")  # the worker serves: its signal handlers are in place
    until(lambda: q.finished(job), 10, "the ack")
    child.signal(sig)
    assert child.wait_exit(15) == 0, child.stderr()
    (exit_event,) = child.events("exit")
    assert '"acked": 1' in exit_event[1]
    assert "Traceback" not in child.stderr()
