"""The exact-ledger scenario one shape runs, and what it checks.

1. The crashing job is enqueued alone and a worker process starts: its handler SIGKILLs the
   process on the first delivery (alone, so no other job's settlement dies with it).
2. The other jobs are enqueued (ack, drop, fail once, fail until dead where the shape has dead
   letters, an undecodable payload where the column can hold one) and a second worker process
   serves until every job reached its fate, then a little longer (a loop shows as extra
   deliveries), and is stopped with SIGTERM.
3. Every job's fate is checked exactly: deliveries and effects per job, where its row is, its
   attempt, `inboxgen status --json`, the dashboard's /api/status, the worker's Prometheus
   counts, `state()` of each job; then a dead letter is requeued and a queued job cancelled.

`Scenario.run()` returns the list of what differed (empty: the shape conforms).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import inspect
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec
import psycopg
from dbcases import apply_ddl, mysql_connect

from conformance import shapes
from conformance.axes import Shape

TESTS = Path(__file__).resolve().parent.parent
CHILD = Path(__file__).resolve().parent / "child.py"
WAIT_S = 60.0  # for a worker to reach the state the scenario waits for
SETTLE_S = 0.7  # served on after every fate was reached: a loop delivers again meanwhile
PAUSED_S = 1.5  # a worker on a paused queue is watched this long (30 poll intervals)


class Scenario:
    def __init__(self, shape: Shape, module: ModuleType, module_path: Path, project: Path,
                 database: str, logs: Path) -> None:
        self.s, self.mod, self.module_path = shape, module, module_path
        self.project, self.database, self.logs = project, database, logs
        self.problems: list[str] = []
        self.ids: dict[str, Any] = {}  # job key -> its id
        self.started = 0  # worker processes started
        self.kinds: dict[str, str] = {}  # job key -> what its handler does
        self.waiting: list[str] = []  # `after`: the jobs enqueued after job A
        self.d = module.DESCRIPTOR
        logs.mkdir(parents=True, exist_ok=True)

    # -- the database ------------------------------------------------------------------------

    def connect(self) -> Any:
        if self.s.dialect == "postgres":
            return psycopg.connect(self.database)
        if self.s.dialect == "mysql":
            return mysql_connect(self.database)
        return sqlite3.connect(self.database, timeout=30)

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        conn = self.connect()
        try:
            cur = conn.cursor()
            cur.execute(sql)
            out = list(cur.fetchall())
            conn.commit()
            return out
        finally:
            conn.close()

    def exec(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        conn = self.connect()
        try:
            cur = conn.cursor()
            cur.execute(sql, params)
            conn.commit()
        finally:
            conn.close()

    @property
    def p(self) -> str:
        return "?" if self.s.dialect == "sqlite" else "%s"

    def now(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC)

    # -- the run -----------------------------------------------------------------------------

    def run(self, ddl: str) -> list[str]:
        apply_ddl(self.s.dialect, self.database, ddl)
        self.enqueue([shapes.Job("F", shapes.CRASH)])
        first = self.start()
        code = self.wait_exit(first, WAIT_S)
        if code != -signal.SIGKILL:
            self.problems.append(f"the crashing job's worker exited with {code}, not SIGKILL")
        if self.s.pauses == "table":
            self.cli("pause", *self.pause_group())
        self.enqueue(shapes.jobs(self.s))
        before = self.deliveries()
        second = self.start()
        if self.s.pauses == "table":
            self.check_pause_holds(second, before)
        reached = self.wait_for_fates(second)
        time.sleep(SETTLE_S)
        second.send_signal(signal.SIGTERM)
        code = self.wait_exit(second, 30.0)
        if code != 0:
            self.problems.append(f"the worker exited with {code} after SIGTERM:\n"
                                 + self.stderr_tail())
        if not reached:
            self.problems.append(f"not every job reached its fate within {WAIT_S:g} s")
        self.check_ledger()
        self.check_rows()
        self.check_status()
        self.check_metrics()
        self.check_states()
        self.check_after()
        self.check_requeue_and_cancel()
        return self.problems

    def check_after(self) -> None:
        """`after`: no job enqueued after A was delivered before A's last delivery."""
        path = self.logs / "deliveries.log"
        order = [line.split()[0] for line in path.read_text().splitlines()] \
            if path.exists() else []
        if not self.waiting or "A" not in order:
            return
        last = len(order) - 1 - order[::-1].index("A")
        early = [k for k in self.waiting if k in order and order.index(k) < last]
        if early:
            self.problems.append(f"jobs {early} enqueued after A were delivered before it")

    # -- a pause ([flow] pauses) ---------------------------------------------------------------

    def pause_group(self) -> list[str]:
        """What the scenario pauses: the worker's group where the table has groups (a group's
        pause), else the whole queue."""
        return ["--group", shapes.GROUP] if self.s.group != "none" else []

    def cli(self, *args: str) -> str:
        """`inboxgen <args> <the shape's spec>` in the project, as an operator runs it."""
        env = {**os.environ, "INBOXGEN_DATABASE_URL": self.database}
        spec = self.project / "specs" / f"{self.s.name}.toml"
        done = subprocess.run([sys.executable, "-m", "inboxgen", *args, str(spec)],
                              cwd=self.project, env=env, capture_output=True, text=True,
                              timeout=60)
        if done.returncode != 0:
            self.problems.append(f"inboxgen {' '.join(args)} failed: "
                                 f"{done.stderr.strip()[-500:]}")
        return done.stdout

    def check_pause_holds(self, proc: subprocess.Popen[bytes], before: Counter[str]) -> None:
        """The worker, started on a paused queue, delivers nothing for PAUSED_S (many poll
        intervals); status says what is paused; `inboxgen resume` then lets it drain."""
        time.sleep(PAUSED_S)
        if proc.poll() is not None:
            self.problems.append(f"the worker exited while paused ({proc.returncode})")
        elif self.deliveries() != before:
            self.problems.append(f"paused, the worker delivered {self.deliveries() - before}")
        report = self.cli("status", "--json")
        paused = [t.get("paused") for t in json.loads(report or "[]")]
        want = [[shapes.GROUP if self.s.group != "none" else None]]
        if paused != want:
            self.problems.append(f"inboxgen status says paused {paused}, expected {want}")
        if "resumed" not in self.cli("resume", *self.pause_group()):
            self.problems.append("inboxgen resume did not say it resumed")

    def enqueue(self, jobs: list[shapes.Job]) -> None:
        task = None
        if self.s.payload == "typed":
            task = sys.modules[shapes.PAYLOAD_MODULE].Task
        conn = self.connect()
        try:
            for n, job in enumerate(jobs, start=len(self.ids) + 1):
                fields: dict[str, Any] = {"payload": shapes.payload(self.s, job, task)}
                given = shapes.new_id(self.s, n)
                if given is not None:
                    fields["id"] = given
                if self.s.group != "none":
                    fields["grp"] = shapes.GROUP
                if self.s.has_priority:
                    fields["priority"] = n  # the order they were enqueued in
                if self.s.has_retry_after:
                    fields["retry_after"] = self.now() - dt.timedelta(seconds=1)
                if self.s.replace == "debounce":
                    fields["job_key"] = job.key
                if hasattr(self.mod, "insert_replace"):
                    new = self.replaced(conn, job, fields, task)
                elif self.s.after != "none" and "A" in self.ids and job.kind != shapes.CANCELLED:
                    new = self.mod.insert_after(conn, self.mod.NewRow(**fields),
                                                after=[self.ids["A"]], on_failure="run")
                    self.waiting.append(job.key)
                else:
                    new = self.mod.insert(conn, self.mod.NewRow(**fields))
                self.ids[job.key] = given if given is not None else new
                if job.kind == shapes.UNDECODABLE:
                    raw = shapes.undecodable_raw(self.s)
                    cur = conn.cursor()
                    cur.execute(f"UPDATE {self.s.name} SET payload = {self.p} "
                                f"WHERE id = {self.p}", (raw, self.ids[job.key]))
            conn.commit()
        finally:
            conn.close()
        self.kinds.update({j.key: j.kind for j in jobs})

    def replaced(self, conn: Any, job: shapes.Job, fields: dict[str, Any], task: Any) -> Any:
        """Enqueue `job` through insert_replace() with a decoy's payload (another kind), then
        replace it with its own (insert_debounced() with no wait, where the module has it):
        the key's one row must take the second payload. Returns its id."""
        decoy = shapes.Job(job.key, shapes.DROP if job.kind != shapes.DROP else shapes.ACK)
        first = self.mod.insert_replace(
            conn, self.mod.NewRow(**{**fields, "payload": shapes.payload(self.s, decoy, task)}))
        if hasattr(self.mod, "insert_debounced"):
            now = dt.timedelta(0)
            again = self.mod.insert_debounced(conn, self.mod.NewRow(**fields), wait=now,
                                              max_wait=now)
        else:
            again = self.mod.insert_replace(conn, self.mod.NewRow(**fields))
        if (first.outcome, again.outcome, again.id) != ("queued", "replaced", first.id):
            self.problems.append(f"job {job.key}: insert_replace() gave {first}, then {again}")
        st = self.mod.state(conn, id=first.id, now=self.now())
        if st is None or shapes.job_of(st.payload) != (job.key, job.kind):
            self.problems.append(f"job {job.key}: after its replacement state() says {st}")
        return first.id

    def start(self) -> subprocess.Popen[bytes]:
        config = {"tests": str(TESTS), "project": str(self.project),
                  "module": str(self.module_path), "name": f"conformance_{self.s.name}",
                  "dialect": self.s.dialect, "database": self.database,
                  "group": shapes.GROUP if self.s.group != "none" else None,
                  "handler": self.s.handler, "batch": int(self.s.batch),
                  "logs": str(self.logs),
                  "ledger_sql": f"INSERT INTO {self.s.name}_ledger (job_key) VALUES ({self.p})",
                  # Every other process of a key-limited shape claims by walking the keys
                  # (CLAIM_BY_KEY), which a worker chooses behind a key's backlog alone.
                  "walk_keys": self.started % 2 == 1}
        self.started += 1
        path = self.logs / f"config-{self.started}.json"
        path.write_text(json.dumps(config))
        stderr = open(self.logs / "stderr.log", "ab")  # noqa: SIM115 (the child keeps it)
        return subprocess.Popen([sys.executable, str(CHILD), str(path)], stderr=stderr,
                                stdout=subprocess.DEVNULL, cwd=self.project)

    @staticmethod
    def wait_exit(proc: subprocess.Popen[bytes], timeout: float) -> int | str:
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return f"no exit within {timeout:g} s"

    def stderr_tail(self) -> str:
        text = (self.logs / "stderr.log").read_text(errors="replace")
        return "\n".join(text.splitlines()[-15:])

    # -- what each job should come to ----------------------------------------------------------

    def expected_deliveries(self) -> dict[str, int]:
        out = {}
        for key, kind in self.kinds.items():
            out[key] = {shapes.ACK: 1, shapes.DROP: 1, shapes.FAIL_ONCE: 2, shapes.CRASH: 2,
                        shapes.FAIL_ALWAYS: shapes.MAX_ATTEMPTS, shapes.UNDECODABLE: 0}[kind]
        return out

    def expected_effects(self) -> dict[str, int]:
        return {key: int(kind in (shapes.ACK, shapes.FAIL_ONCE, shapes.CRASH))
                for key, kind in self.kinds.items()}

    def undecodable_fate(self) -> str:
        """Where a payload that does not decode ends: dead, in the queue (delayed by its
        retry_after, or parked under a lease) or finished (dropped)."""
        if self.s.dead != "none":
            return "dead"
        if self.s.has_retry_after or self.s.form == "lease":
            return "queued"
        return "finished"

    def fate(self, key: str) -> str:
        kind = self.kinds[key]
        if kind == shapes.FAIL_ALWAYS:
            return "dead"
        if kind == shapes.UNDECODABLE:
            return self.undecodable_fate()
        return "finished"

    def deliveries(self) -> Counter[str]:
        path = self.logs / "deliveries.log"
        lines = path.read_text().splitlines() if path.exists() else []
        return Counter(line.split()[0] for line in lines)

    def effects(self) -> Counter[str]:
        path = self.logs / "effects.log"
        found = Counter(path.read_text().split() if path.exists() else [])
        found.update(r[0] for r in self.rows(f"SELECT job_key FROM {self.s.name}_ledger"))
        return found

    def row_fates(self) -> dict[str, str]:
        """Each job's fate as the tables say: finished (gone, or processed_at set), dead
        (in the dead-letter table, or in the dead group), queued."""
        cols = ["id", "attempt"] + (["grp"] if self.s.group != "none" else []) \
            + (["processed_at"] if self.s.finished == "kept" else [])
        queue = {str(r[0]): dict(zip(cols, r, strict=True))
                 for r in self.rows(f"SELECT {', '.join(cols)} FROM {self.s.name}")}
        dead = {str(r[0]) for r in self.rows(f"SELECT id FROM {self.s.name}_dead")} \
            if self.s.dead == "table" else set()
        self.attempts = {str(k): v["attempt"] for k, v in queue.items()}
        out = {}
        for key, job_id in self.ids.items():
            row = queue.get(str(job_id))
            if str(job_id) in dead:
                out[key] = "dead" if row is None else "dead and still queued"
            elif row is None:
                out[key] = "finished"
            elif row.get("grp") == shapes.DEAD_GROUP:
                out[key] = "dead"
            elif row.get("processed_at") is not None:
                out[key] = "finished"
            else:
                out[key] = "queued"
        return out

    def wait_for_fates(self, proc: subprocess.Popen[bytes]) -> bool:
        deadline = time.monotonic() + WAIT_S
        want = self.expected_deliveries()
        while time.monotonic() < deadline and proc.poll() is None:
            got = self.deliveries()
            if all(got[k] >= n for k, n in want.items()):
                fates = self.row_fates()
                if all(fates[k] == self.fate(k) for k in self.kinds):
                    return True
            time.sleep(0.1)
        return False

    # -- the checks ------------------------------------------------------------------------------

    def check_ledger(self) -> None:
        got, want = self.deliveries(), self.expected_deliveries()
        for key in sorted(want):
            if got[key] != want[key]:
                self.problems.append(f"job {key} ({self.kinds[key]}): {got[key]} deliveries, "
                                     f"expected {want[key]}")
        effects, want_e = self.effects(), self.expected_effects()
        for key in sorted(want_e):
            if effects[key] != want_e[key]:
                self.problems.append(f"job {key} ({self.kinds[key]}): {effects[key]} effects, "
                                     f"expected {want_e[key]}")

    def check_rows(self) -> None:
        fates = self.row_fates()
        for key in sorted(self.kinds):
            if fates[key] != self.fate(key):
                self.problems.append(f"job {key} ({self.kinds[key]}) is {fates[key]}, "
                                     f"expected {self.fate(key)}")
        for key, job_id in self.ids.items():
            attempt = self.attempts.get(str(job_id))
            if attempt is not None and attempt > shapes.MAX_ATTEMPTS + 2:
                self.problems.append(f"job {key}: attempt column {attempt}, past max_attempts "
                                     f"{shapes.MAX_ATTEMPTS} and the crash allowance")

    def expected_counts(self) -> dict[str, int]:
        fates = Counter(self.fate(k) for k in self.kinds)
        return {"finished": fates["finished"] if self.s.finished == "kept" else 0,
                "dead": fates["dead"], "queued": fates["queued"]}

    def check_status(self) -> None:
        env = {**os.environ, "INBOXGEN_DATABASE_URL": self.database}
        spec = self.project / "specs" / f"{self.s.name}.toml"
        done = subprocess.run([sys.executable, "-m", "inboxgen", "status", "--json",
                               str(spec)], cwd=self.project, env=env, capture_output=True,
                              text=True, timeout=60)
        if done.returncode != 0:
            self.problems.append(f"inboxgen status failed: {done.stderr.strip()[-500:]}")
            return
        self.compare_status("inboxgen status", json.loads(done.stdout))
        try:
            code, body = asyncio.run(dashboard_get(self.database, self.mod, "/api/status"))
            if code != 200:
                self.problems.append(f"/api/status answered {code}: {body[:300]!r}")
            else:
                self.compare_status("/api/status", json.loads(body))
        except Exception as err:  # noqa: BLE001 (reported as the shape's failure)
            self.problems.append(f"/api/status raised {type(err).__name__}: {err}")

    def compare_status(self, source: str, report: Any) -> None:
        counts = status_counts(report, self.s.name)
        want = self.expected_counts()
        if counts != want:
            self.problems.append(f"{source} counts {counts}, the ledger says {want}")

    def check_metrics(self) -> None:
        total: Counter[str] = Counter()
        for path in self.logs.glob("metrics-*.json"):
            total.update(json.loads(path.read_text()))
        fates = Counter(self.fate(k) for k in self.kinds)
        want = {"acked": sum(1 for k in self.kinds.values()
                             if k in (shapes.ACK, shapes.FAIL_ONCE, shapes.CRASH)),
                "dead_lettered": fates["dead"],
                "dropped": 1 + (self.undecodable_fate() == "finished"
                                and shapes.UNDECODABLE in self.kinds.values())}
        got = {k: int(total[k]) for k in want}
        if got != want:
            self.problems.append(f"Prometheus counts {got}, the ledger says {want}")

    def state_of(self, key: str) -> Any:
        conn = self.connect()
        try:
            return self.mod.state(conn, id=self.ids[key], now=self.now())
        finally:
            conn.close()

    def check_states(self) -> None:
        for key in sorted(self.kinds):
            try:
                st = self.state_of(key)
            except Exception as err:  # noqa: BLE001
                self.problems.append(f"state() of job {key} ({self.kinds[key]}) raised "
                                     f"{type(err).__name__}: {err}")
                continue
            fate = self.fate(key)
            want = {"finished": "finished" if self.s.finished == "kept" else None,
                    "dead": "dead", "queued": ("ready", "scheduled", "in_work")}[fate]
            got = None if st is None else st.state
            if got != want and not (isinstance(want, tuple) and got in want):
                self.problems.append(f"state() of job {key} ({self.kinds[key]}) says {got}, "
                                     f"expected {want}")
            if self.s.error == "text" and st is not None:
                self.check_error(key, st.error)
            if self.s.result != "none" and st is not None:
                self.check_result(key, st.result)
            if self.s.progress == "json" and st is not None:
                # The acked job reported {0.5, its key} and waited for a renewal to write it.
                # (Not under a transactional handler on SQLite: see child.py.)
                reports = not (self.s.handler == "transactional" and self.s.dialect == "sqlite")
                want = ({"fraction": 0.5, "note": key}
                        if self.kinds[key] == shapes.ACK and reports else None)
                if st.progress != want:
                    self.problems.append(f"state() of job {key} ({self.kinds[key]}) has "
                                         f"progress {st.progress!r}, expected {want!r}")

    def check_result(self, key: str, result: Any) -> None:
        """What a job's row keeps of its handler's return: {"job": key} for a job that
        finished with an effect (its handler returns that), nothing for any other."""
        kind = self.kinds[key]
        effect = kind in (shapes.ACK, shapes.FAIL_ONCE, shapes.CRASH)
        want = {"job": key} if effect and self.fate(key) == "finished" else None
        if self.s.result == "typed" and result is not None:  # an instance of the class
            result = (type(result).__name__, msgspec.to_builtins(result))
            want = ("Done", want)
        if result != want:
            self.problems.append(f"state() of job {key} ({kind}) has result {result!r}, "
                                 f"expected {want!r}")

    # The first line of what the error column keeps of each kind of job that failed.
    _FAILURES = {shapes.FAIL_ONCE: "RuntimeError: job {key} fails once",
                 shapes.FAIL_ALWAYS: "RuntimeError: job {key} fails every time",
                 shapes.UNDECODABLE: "the payload does not decode: "}

    def check_error(self, key: str, error: str | None) -> None:
        """The last failure a job's row keeps: none for jobs that never failed; the handler's
        exception (or the worker's reason) for one that did."""
        kind = self.kinds[key]
        want = self._FAILURES.get(kind, "").format(key=key)
        if kind == shapes.UNDECODABLE and self.s.dead == "none" and not self.s.has_retry_after:
            want = ""  # parked (a lease left to run out) or dropped: no settlement writes it
        if not want:
            if error is not None:
                self.problems.append(f"state() of job {key} ({kind}) has error {error!r}, "
                                     f"expected none")
        elif error is None or not error.startswith(want):
            self.problems.append(f"state() of job {key} ({kind}) has error {error!r}, "
                                 f"expected one starting {want!r}")

    def check_requeue_and_cancel(self) -> None:
        from inboxgen.ops.maintenance import requeue
        conn = self.connect()
        try:
            if self.s.dead != "none":
                moved = requeue(self.mod, conn, now=self.now(), ids=None,
                                to_group=shapes.GROUP if self.s.dead == "group" else None,
                                reset_attempt=True, dry_run=False)
                conn.commit()
                dead = sum(1 for k in self.kinds if self.fate(k) == "dead")
                if moved != dead:
                    self.problems.append(f"requeue moved {moved} dead letter(s), expected {dead}")
                st = self.state_of("D")
                if st is None or st.state != "ready":
                    self.problems.append(f"state() of requeued job D says "
                                         f"{None if st is None else st.state}, expected ready")
                elif st.error is not None:
                    self.problems.append(f"state() of requeued job D keeps error {st.error!r}")
            if hasattr(self.mod, "cancel"):
                self.enqueue([shapes.Job("G", shapes.CANCELLED)])
                conn.close()
                conn = self.connect()
                takes = inspect.signature(self.mod.cancel).parameters
                extra = {"now": self.now()} if "now" in takes else {}
                if not self.mod.cancel(conn, id=self.ids["G"], **extra):
                    self.problems.append("cancel() of a queued job returned False")
                conn.commit()
                found = self.state_of("G")
                if self.s.after != "none":  # a dead letter, so the jobs after it learn it
                    if found is None or found.state != "dead":
                        self.problems.append(f"a cancelled job of a table with `after` is "
                                             f"{None if found is None else found.state}, not "
                                             f"dead")
                elif found is not None:
                    self.problems.append("a cancelled job is still found by state()")
        except Exception as err:  # noqa: BLE001
            self.problems.append(f"requeue/cancel raised {type(err).__name__}: {err}")
        finally:
            conn.close()


async def dashboard_get(database: str, module: ModuleType, path: str) -> tuple[int, bytes]:
    """GET `path` of a read-only dashboard of `module`, called as the ASGI app it is."""
    from inboxgen.ops.dashboard import app, dashboard_of

    web = app(database, [module])
    answer: dict[str, Any] = {"body": b""}

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            answer["status"] = message["status"]
        elif message["type"] == "http.response.body":
            answer["body"] += message.get("body", b"")

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "GET", "scheme": "http", "path": path, "raw_path": path.encode(),
             "query_string": b"", "root_path": "", "headers": [(b"host", b"localhost")],
             "client": ("127.0.0.1", 1), "server": ("localhost", 80)}
    try:
        await web(scope, receive, send)
    finally:
        await dashboard_of(web).stop()
    return answer["status"], answer["body"]


def status_counts(report: Any, table: str) -> dict[str, int]:
    """finished, dead and queued (ready, scheduled or in work) of `table` in a status report
    (inboxgen status --json, or /api/status)."""
    tables = report if isinstance(report, list) else report.get("tables", report)
    (entry,) = [t for t in tables if t.get("table") == table]
    out = {"finished": 0, "dead": entry.get("dead_table") or 0, "queued": 0}
    for g in entry["groups"]:
        if g.get("dead"):
            out["dead"] += sum(g.get(k) or 0 for k in ("ready", "scheduled", "in_work"))
            continue
        out["finished"] += g.get("finished") or 0
        out["queued"] += sum(g.get(k) or 0 for k in ("ready", "scheduled", "in_work"))
    return out
