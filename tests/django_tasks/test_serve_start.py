"""`manage.py inboxgen_serve` starting: on SQLite in an environment without psycopg or PyMySQL
(SQLite needs no driver), and a PostgreSQL database that is not there told in one warning, then
one line (no pool warnings, no hint lines)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from driverless import driverless_venv, importable

PROJECT = Path(__file__).resolve().parent / "project"


def test_the_task_shop_serves_on_sqlite_without_the_drivers(tmp_path: Path,
                                                            fresh_database: Callable[[str], str]
                                                            ) -> None:
    python = driverless_venv(tmp_path / "venv", ["attrs", "jinja2", "sqlglot", "msgspec",
                                                 "django"])
    for name in ("psycopg", "psycopg_pool", "pymysql", "asyncmy", "sqlalchemy"):
        assert not importable(python, name), f"{name} must not be there"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(PROJECT), "TASKSHOP_ENGINE": "sqlite3",
           "TASKSHOP_NAME": fresh_database("sqlite")}

    def manage(*args: str) -> str:
        done = subprocess.run([str(python), "manage.py", *args], cwd=PROJECT, env=env,
                              capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def status(task_id: str) -> str:
        return manage("shell", "-v", "0", "-c",
                      "from taskshop.tasks import write_note; "
                      f"print(write_note.get_result({task_id!r}).status)").strip()

    manage("migrate", "-v", "0")
    task_id = manage("shell", "-v", "0", "-c", "from taskshop.tasks import write_note; "
                                              "print(write_note.enqueue('no driver').id)").strip()
    server = subprocess.Popen([str(python), "manage.py", "inboxgen_serve"], cwd=PROJECT,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
    try:
        deadline = time.monotonic() + 60
        while status(task_id) != "SUCCESSFUL" and server.poll() is None:
            assert time.monotonic() < deadline, "the task did not run"
            time.sleep(0.5)
    finally:
        server.send_signal(signal.SIGTERM)
        out, _ = server.communicate(timeout=60)
    assert server.returncode == 0, out
    assert "Traceback" not in out and "SIGTERM: stopping" in out, out
    assert status(task_id) == "SUCCESSFUL"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("where", ["unknown database", "wrong port"])
def test_a_database_that_is_not_there_is_one_warning_then_one_line(
        fresh_database: Callable[[str], str], where: str) -> None:
    """An unknown database fails at once, in one line; a wrong port is waited for (30 s, the
    service's connect timeout) with one warning, then that line."""
    info = psycopg.conninfo.conninfo_to_dict(fresh_database("postgres"))
    port = str(_free_port()) if where == "wrong port" else str(info["port"])
    name = "no_such_db" if where == "unknown database" else str(info["dbname"])
    env = {**os.environ, "PYTHONPATH": str(PROJECT), "TASKSHOP_ENGINE": "postgresql",
           "TASKSHOP_NAME": name, "TASKSHOP_HOST": str(info["host"]), "TASKSHOP_PORT": port,
           "TASKSHOP_USER": str(info["user"]), "TASKSHOP_OPTIONS": json.dumps({"WORKERS": 1})}
    done = subprocess.run([sys.executable, "manage.py", "inboxgen_serve"], cwd=PROJECT,
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    lines = (done.stdout + done.stderr).splitlines()
    assert done.returncode == 1, lines
    waits = 1 if where == "wrong port" else 0
    assert len(lines) == 1 + waits, lines
    assert lines[-1].startswith("CommandError: 2 queue(s) cannot start: cannot connect to "
                                f"PostgreSQL at {info['host']}:{port}, database {name}"), lines
    if waits:
        assert "cannot connect to PostgreSQL" in lines[0] and "trying again" in lines[0], lines


def test_a_second_sigterm_stops_manage_py_inboxgen_serve_at_once(
        tmp_path: Path, fresh_database: Callable[[str], str]) -> None:
    """As `inboxgen serve`: the second signal stops at once, and the command exits without
    waiting for the thread of the task still running."""
    env = {**os.environ, "PYTHONPATH": str(PROJECT), "TASKSHOP_ENGINE": "sqlite3",
           "TASKSHOP_NAME": fresh_database("sqlite")}
    started = tmp_path / "started"
    for args in (["migrate", "-v", "0"],
                 ["shell", "-v", "0", "-c", "from taskshop.tasks import wait_a_minute; "
                                            f"wait_a_minute.enqueue({str(started)!r})"]):
        done = subprocess.run([sys.executable, "manage.py", *args], cwd=PROJECT, env=env,
                              capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
    server = subprocess.Popen([sys.executable, "manage.py", "inboxgen_serve"], cwd=PROJECT,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
    try:
        deadline = time.monotonic() + 60
        while not started.exists():
            assert server.poll() is None and time.monotonic() < deadline, "the task did not start"
            time.sleep(0.05)
        server.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert server.poll() is None, "the first signal waits for the task in work"
        server.send_signal(signal.SIGTERM)
        began = time.monotonic()
        out, _ = server.communicate(timeout=20)
        took = time.monotonic() - began
    finally:
        server.kill()
        server.wait()
    assert server.returncode == 0, out
    assert took < 5, f"exited {took:.1f} s after the second signal:\n{out}"
    assert "exiting with 1 handler thread(s) still running" in out, out
