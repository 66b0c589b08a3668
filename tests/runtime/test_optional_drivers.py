"""SQLite needs no driver (README): a SQLite service, worker, the operations commands and the
dashboard import none of the optional packages (psycopg and its pool, PyMySQL, asyncmy,
SQLAlchemy, Django, prometheus_client, OpenTelemetry, and starlette and uvicorn but for the
dashboard). Shown twice: in a process whose imports of them fail loudly, and in a new virtual
environment that does not have them."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from dbcases import Layout, MakeQueue
from driverless import OPTIONAL, driverless_venv, importable

REPO = Path(__file__).resolve().parents[2]

# In a child process: any import of an optional package is recorded and fails; then every
# module a SQLite user runs is imported, and a SQLite service drains its queue and stops.
GUARDED = """
import sys
BLOCKED = set(sys.argv[1].split(","))
asked = []

class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            asked.append(name)
            raise ImportError(f"{name} is blocked")
        return None

sys.meta_path.insert(0, Blocked())

import asyncio, importlib, importlib.util, json, pathlib, threading
import inboxgen

# Every module of the package but the extras' own (contrib, the dashboard), the pytest plugin
# and __main__ (which runs the command).
skipped = ("inboxgen.contrib", "inboxgen.ops.dashboard", "inboxgen.pytest_plugin",
           "inboxgen.__main__")
root = pathlib.Path(inboxgen.__file__).parent
for path in sorted(root.rglob("*.py")):
    parts = path.relative_to(root.parent).with_suffix("").parts
    name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    if not name.startswith(skipped):
        importlib.import_module(name)

from inboxgen import Service, Worker
from inboxgen.testing import run_until_idle

spec = importlib.util.spec_from_file_location("jobs_module", sys.argv[2])
jobs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(jobs)
database = sys.argv[3]

import datetime, sqlite3
conn = sqlite3.connect(database)
due = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=1)
jobs.insert_many(conn, [jobs.NewRow(retry_after=due, **json.loads(row))
                        for row in sys.argv[4:]])
conn.commit()
ran = []
done = threading.Event()

def work(job):
    ran.append(job.id)
    if len(ran) == len(sys.argv[4:]):
        done.set()

async def main():
    service = Service(database, shutdown_timeout=5)
    service.queue(jobs.DESCRIPTOR, work, workers=2, poll_interval=0.05)
    await service.start()
    try:
        await asyncio.to_thread(done.wait, 20)
    finally:
        service.stop()
        await service.shutdown()
    worker = Worker(jobs.DESCRIPTOR, work, database=database)
    await run_until_idle(worker, timeout=20)

asyncio.run(main())
left = conn.execute("SELECT count(*) FROM jobs").fetchone()[0]
print(json.dumps({"asked": asked, "ran": len(ran), "left": left}))
"""


def test_a_sqlite_service_imports_no_optional_package(queue: MakeQueue, tmp_path: Path) -> None:
    q = queue("sqlite", Layout(form="lease", processed=False))
    rows = [json.dumps({"priority": 0, "account": f"a{i}", "payload": f"p{i}"})
            for i in range(5)]
    script = tmp_path / "guarded.py"
    script.write_text(GUARDED, encoding="utf-8")
    assert q.mod.__file__ is not None
    result = subprocess.run([sys.executable, str(script), ",".join(OPTIONAL), q.mod.__file__,
                             q.target, *rows], capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome == {"asked": [], "ran": 5, "left": 0}, outcome


# -- a new virtual environment without the drivers -------------------------------------------------

SPEC = """\
table = "jobs"
dialect = "sqlite"
ddl = "jobs.sql"

[columns]
id = { role = "id", generated = true }
attempt = { role = "attempt", generated = true }
locked_until = "locked_until"
payload = { role = "payload", codec = "text" }
"""
DDL = ("CREATE TABLE jobs (id INTEGER PRIMARY KEY, attempt INTEGER NOT NULL DEFAULT 1, "
       "locked_until TEXT, payload TEXT NOT NULL);\n")
QUEUES = """\
import os
from inboxgen import Service
from generated import jobs

def work(job):
    with open(os.environ["RAN"], "a") as out:
        out.write(job.payload + "\\n")

service = Service(os.environ["DATABASE"], shutdown_timeout=5)
service.queue(jobs.DESCRIPTOR, work, poll_interval=0.05)
"""
ENQUEUE = """\
import sqlite3, sys
from generated import jobs
conn = sqlite3.connect(sys.argv[1])
jobs.insert_many(conn, [jobs.NewRow(payload=f"job {i}") for i in range(5)])
conn.commit()
"""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode in (0, -signal.SIGTERM), out + err  # uvicorn ends by the signal
    assert "Traceback" not in err, err
    return out + err


def test_a_sqlite_service_and_the_dashboard_run_without_the_drivers(tmp_path: Path) -> None:
    """In a virtual environment of inboxgen and its four dependencies (and starlette and
    uvicorn, for the dashboard): build a SQLite project, enqueue, `inboxgen serve` until the
    jobs are done, `inboxgen status`, and `inboxgen dashboard`'s /api/status."""
    python = driverless_venv(tmp_path / "venv", ["attrs", "jinja2", "sqlglot", "msgspec",
                                                 "starlette", "uvicorn"])
    for name in ("psycopg", "psycopg_pool", "pymysql", "asyncmy", "sqlalchemy", "django"):
        assert not importable(python, name), f"{name} must not be there"
    assert importable(python, "inboxgen") and importable(python, "starlette")
    project = tmp_path / "app"
    (project / "specs").mkdir(parents=True)
    (project / "pyproject.toml").write_text('[tool.inboxgen]\nout = "generated"\n')
    (project / "specs" / "jobs.toml").write_text(SPEC)
    (project / "specs" / "jobs.sql").write_text(DDL)
    (project / "queues.py").write_text(QUEUES)
    database = tmp_path / "app.sqlite3"
    with sqlite3.connect(database) as conn:
        conn.executescript(DDL)
    env = {"PATH": "/usr/bin:/bin", "DATABASE": str(database), "RAN": str(tmp_path / "ran"),
           "INBOXGEN_DATABASE_URL": str(database)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([str(python), *args], cwd=project, env=env, capture_output=True,
                              text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        return done

    run("-m", "inboxgen", "build")
    run("-c", ENQUEUE, str(database))
    served = subprocess.Popen([str(python), "-m", "inboxgen", "serve", "queues:service"],
                              cwd=project, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and served.poll() is None:
            with sqlite3.connect(database) as conn:
                if conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0:
                    break
            time.sleep(0.1)
    finally:
        log = _stop(served)
    assert sorted((tmp_path / "ran").read_text().splitlines()) == [f"job {i}" for i in range(5)]
    assert "stopped: 5 delivered, 5 acked" in log, log
    assert "jobs" in run("-m", "inboxgen", "status").stdout

    port = _free_port()
    board = subprocess.Popen([str(python), "-m", "inboxgen", "dashboard", "--bind",
                              f"127.0.0.1:{port}"], cwd=project, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        answer = None
        while answer is None and time.monotonic() < deadline and board.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status",
                                            timeout=5) as response:
                    answer = (response.status, json.loads(response.read()))
            except OSError:
                time.sleep(0.1)
    finally:
        _stop(board)
    assert answer is not None, "the dashboard did not answer"
    status, tables = answer
    assert status == 200 and [t["table"] for t in tables] == ["jobs"], tables
