"""docs/postgres.md, a PostgreSQL user's first hour, run as written: its files written into an
empty folder, its commands run in order with the installed `inboxgen` command, against a real
PostgreSQL server."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from psycopg.conninfo import conninfo_to_dict

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "postgres.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
FILE_LINE = re.compile(r"^(?:#|--) ([\w./-]+\.\w+)$")
# The lines that set up a machine rather than use inboxgen: the suite runs in a folder and an
# environment of its own, with inboxgen installed and DATABASE_URL pointing at its server.
SETUP = ["mkdir shop && cd shop", "python3 -m venv .venv && . .venv/bin/activate",
         "pip install 'inboxgen[postgres]'", "export DATABASE_URL=postgresql://app@localhost/shop"]


def _page() -> tuple[dict[str, str], list[str]]:
    """The page's files (path -> text) and its command lines, in order."""
    files: dict[str, str] = {}
    commands: list[str] = []
    for m in FENCE.finditer(PAGE.read_text(encoding="utf-8")):
        lang, body = m.group(1), m.group(2)
        if lang == "sh":
            commands += [line for line in body.splitlines() if line.strip()]
            continue
        first, _, rest = body.partition("\n")
        named = FILE_LINE.match(first)
        if named:
            files[named.group(1)] = rest
    return files, commands


def _url(dsn: str) -> str:
    d = conninfo_to_dict(dsn)
    return f"postgresql://{d['user']}@{d['host']}:{d['port']}/{d['dbname']}"


def _run(command: str, cwd: Path, env: dict[str, str]) -> str:
    result = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 0, f"{command}: {result.stdout}{result.stderr}"
    return result.stdout


def _status(cwd: Path, env: dict[str, str]) -> dict[str, int]:
    out = _run('inboxgen status --database-url "$DATABASE_URL" --json', cwd, env)
    (table,) = json.loads(out)
    return {g["group"]: g["ready"] for g in table["groups"]}


def test_the_postgres_walkthrough_runs_as_written(pg_dsn: str, tmp_path: Path) -> None:
    files, commands = _page()
    assert sorted(files) == ["app/__init__.py", "app/messages.py", "app/orders.py",
                             "app/queues.py", "migrations/001_orders.sql", "pyproject.toml",
                             "specs/email_jobs.toml"]
    assert commands[:len(SETUP)] == SETUP
    project = tmp_path / "shop"
    for name, text in files.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text, encoding="utf-8")
    # The installed commands (`inboxgen`, `python3`) of the environment running the suite, and
    # nothing of the suite's own: no PYTHONPATH, so the project's imports work as they would for
    # a user.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST", "INBOXGEN", "PYTHON"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["DATABASE_URL"] = _url(pg_dsn)

    worker = None
    for command in commands[len(SETUP):]:
        if command.startswith("inboxgen worker "):
            worker = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=project, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True)
            continue
        out = _run(command, project, env)
        if command.startswith("python3 -m app.orders"):
            assert out.strip() == "placed order 1"
        if command.startswith("inboxgen status"):
            assert re.search(r"emails\b.*\bready\b|ready.*\n.*emails", out, re.S), out
            assert _status(project, env) == {"emails": 1}
    assert (project / "generated" / "email_jobs.py").is_file()

    # The worker sends the email; status then shows nothing ready; Ctrl-C stops it cleanly.
    assert worker is not None and worker.stdout is not None
    deadline = time.monotonic() + 60
    while _status(project, env).get("emails", 0) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _status(project, env).get("emails", 0) == 0
    worker.send_signal(signal.SIGINT)
    output = worker.stdout.read()
    assert worker.wait(timeout=60) == 0, output
    assert "sending 'Order 1 confirmed' to ada@example.com" in output
    assert "Traceback" not in output
