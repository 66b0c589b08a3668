"""One scenario end to end: a target with its jobs enqueued, a fleet of worker processes, the
faults, a bounded wait for the drain, a bounded shutdown, then the checker.

    report = run_scenario(Scenario(...), target, folder, pg_server=..., mariadb=...)

Every child process is killed before `run_scenario` returns, whatever happened.
"""

from __future__ import annotations

import itertools
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from .checker import Report, check
from .fleet import Fleet
from .injectors import Fault
from .shapes import QUEUE, Target

_prefixes = itertools.count(1)


@dataclass
class Scenario:
    name: str
    jobs: int = 300
    poison: int = 0
    selfkill: int = 0
    processes: int = 2
    workers: int = 4
    lease: int = 2
    job_ms: float = 5.0
    batch: int = 1
    shutdown_timeout: float = 5.0
    poll_interval: float = 0.05
    timeout: float = 30.0  # from the start until the queue must be empty
    faults: list[Fault] = field(default_factory=list)
    keys: int | None = None  # advisory: rows share key n % keys
    clean_rate: float | None = None  # measured elsewhere (else: before the first fault)
    fsync: bool = True
    end_grace: float = 5.0  # beyond shutdown_timeout for the final SIGTERM
    effects: str = "transaction"  # "outside": a broken handler (see child.py)
    skip_every: int = 0  # a broken handler: acks every Nth job without its effect
    # At-least-once: handlers that are not transactional (the pipelined row lock, the lease
    # settler) write their effect on a connection of their own before they ack. A crash between
    # effect and settlement runs the job again, so duplicated effects are reported, not failed.
    plain: bool = False
    # Hosts whose clocks are off: FAKETIME of worker process 0, 1, ... (fleet.py).
    skews: tuple[str | None, ...] = ()
    own_clock: bool = False  # workers judge time by their host's clock (to show the checker)
    # Of the jobs, `scheduled` are enqueued due `scheduled_in` s later (a `-due` shape), each
    # running `scheduled_ms` (else job_ms).
    scheduled: int = 0
    scheduled_in: float = 20.0
    scheduled_ms: float | None = None
    # No fault keeps a holder from renewing: a job delivered again while its holder lives and
    # runs breaks an invariant (checker.py, overlapping).
    exclusive: bool = False

    @property
    def fault_label(self) -> str:
        labels = [f.label for f in self.faults]
        if self.poison or self.selfkill:
            labels.append("bad jobs")
        if any(self.skews):
            labels.append("clock skew " + "/".join(s for s in self.skews if s))
        return "+".join(labels) or "clean"


@dataclass
class Run:
    name: str
    target: Target
    fleet: Fleet
    faults: list[Fault]
    fault_label: str
    rng: random.Random
    pg_server: Any = None  # RestartablePostgres
    mariadb: Any = None  # RestartableMariaDB
    clean_rate: float | None = None
    exclusive: bool = False
    db_offset: float = 0.0  # the database's clock minus the suite's, in seconds
    progress: float = 0.0
    go_at: float = 0.0
    drained_at: float | None = None
    finished_at: float = 0.0
    leftovers: dict[str, int] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)
    _conn: Any = None

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                pass
            self._conn = None

    def refresh(self) -> int | None:
        """Read how many jobs are still queued (None while the database does not answer)."""
        try:
            if self._conn is None:
                self._conn = self.target.connect()
            if self.target.dialect == "mysql":
                with self._conn.cursor() as cur:
                    cur.execute(f"SELECT count(*) FROM {QUEUE}")
                    left = int(cur.fetchone()[0])
            else:
                left = int(self._conn.execute(f"SELECT count(*) FROM {QUEUE}").fetchone()[0])
        except Exception:
            self.close()
            return None
        total = len(self.target.jobs) or 1
        self.progress = (total - left) / total
        return left

    def server_leftovers(self, wait: float = 3.0) -> dict[str, int]:
        """What the server still holds for the worker processes that are gone: sessions, sessions
        idle in transaction, advisory locks (PostgreSQL; on MySQL/MariaDB sessions on the
        database and open InnoDB transactions). Waits up to `wait` s for the server to notice
        closed connections."""
        if self.target.dialect == "sqlite":
            return {}
        deadline = time.monotonic() + wait
        while True:
            try:
                snapshot = self._leftovers()
            except Exception as err:
                snapshot = {"unreadable": 1}
                self.log.append(f"leftovers unreadable: {err}")
            if not any(snapshot.values()) or time.monotonic() > deadline:
                return snapshot
            time.sleep(0.1)

    def _leftovers(self) -> dict[str, int]:
        live = {inc.application_name for inc in self.fleet.live()}
        if self.target.dialect == "postgres":
            with psycopg.connect(self.target.database, autocommit=True,
                                 connect_timeout=5) as conn:
                rows = conn.execute(
                    "SELECT a.application_name, a.state, "
                    "  (SELECT count(*) FROM pg_locks l WHERE l.pid = a.pid "
                    "   AND l.locktype = 'advisory') "
                    "FROM pg_stat_activity a WHERE a.datname = current_database() "
                    "AND a.application_name LIKE %s AND a.pid <> pg_backend_pid()",
                    [self.fleet.app_prefix + "-%"]).fetchall()
            gone = [r for r in rows if r[0] not in live]
            return {"sessions": len(gone),
                    "idle_in_transaction": sum(1 for r in gone
                                               if r[1] and r[1].startswith("idle in trans")),
                    "advisory_locks": sum(int(r[2]) for r in gone)}
        if self.fleet.live():
            return {}  # MySQL sessions carry no name: only when no worker runs
        mine = [self._conn.thread_id()] if self._conn is not None else []
        with self.target.session() as conn, conn.cursor() as cur:
            cur.execute("SELECT CONNECTION_ID()")
            mine.append(int(cur.fetchone()[0]))
            ids = ", ".join(str(int(i)) for i in mine)
            cur.execute("SELECT count(*) FROM information_schema.PROCESSLIST "
                        f"WHERE DB = DATABASE() AND ID NOT IN ({ids})")
            sessions = int(cur.fetchone()[0])
            cur.execute("SELECT count(*) FROM information_schema.INNODB_TRX "
                        f"WHERE trx_mysql_thread_id NOT IN ({ids})")
            trx = int(cur.fetchone()[0])
        return {"sessions": sessions, "open_transactions": trx}


def run_scenario(sc: Scenario, target: Target, folder: Path, *, pg_server: Any = None,
                 mariadb: Any = None) -> Report:
    target.enqueue(sc.jobs - sc.poison - sc.selfkill - sc.scheduled, poison=sc.poison,
                   selfkill=sc.selfkill, keys=sc.keys)
    if sc.scheduled:
        target.enqueue(sc.scheduled, due_in=sc.scheduled_in, ms=sc.scheduled_ms)
    fleet = Fleet(target, folder, processes=sc.processes, workers=sc.workers, lease=sc.lease,
                  job_ms=sc.job_ms, shutdown_timeout=sc.shutdown_timeout,
                  poll_interval=sc.poll_interval, batch=sc.batch, fsync=sc.fsync,
                  effects="outside" if sc.plain else sc.effects, skip_every=sc.skip_every,
                  plain=sc.plain, skews=sc.skews, own_clock=sc.own_clock,
                  max_seconds=sc.timeout + 120.0, max_restarts=max(200, sc.jobs // 10),
                  app_prefix=f"fault{os.getpid()}x{next(_prefixes)}")
    run = Run(sc.name, target, fleet, list(sc.faults), sc.fault_label, random.Random(sc.name),
              pg_server=pg_server, mariadb=mariadb, clean_rate=sc.clean_rate,
              exclusive=sc.exclusive)
    if target.due:
        run.db_offset = target.clock_offset()
    try:
        fleet.start()
        run.go_at = time.time()
        _drive(run, sc)
        _shutdown(run, sc)
    finally:
        for fault in run.faults:
            try:
                fault.end(run)
            except Exception as err:  # ending a fault must not hide the scenario's result
                run.log.append(f"ending {fault.label}: {err}")
        fleet.kill_all()
        run.close()
    if not run.finished_at:
        run.finished_at = time.time()
    report = check(run)
    return report


def _drive(run: Run, sc: Scenario) -> None:
    deadline = run.go_at + sc.timeout
    pending = list(run.faults)
    active: list[Fault] = []
    while time.time() < deadline:
        left = run.refresh()
        run.fleet.reap()
        for fault in list(pending):
            if run.progress >= fault.start_at:
                pending.remove(fault)
                fault.begin(run)
                active.append(fault)
        for fault in list(active):
            if fault.tick(run):
                active.remove(fault)
                fault.end(run)
        if left == 0:
            # The faults stop with the work (the checks ask whether they really happened).
            for fault in active:
                fault.end(run)
            if pending:  # the queue drained before these could begin
                run.log.append(f"never began: {[f.label for f in pending]}")
            run.drained_at = time.time()
            return
        time.sleep(0.1)
    for fault in active:
        fault.end(run)


def _shutdown(run: Run, sc: Scenario) -> None:
    run.fleet.reap()
    exits = run.fleet.sigterm_all(sc.shutdown_timeout + sc.end_grace)
    for inc, took in exits:
        if took is None:
            run.fleet.sigkill(inc)
            inc.expected = "sigkill-at-end"
    run.finished_at = time.time()
    run.close()  # the suite's own session is not a leftover
    run.leftovers = run.server_leftovers()
