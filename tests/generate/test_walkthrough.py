"""docs/postgres.md and docs/sqlite.md, a user's first hour, run as written: each page's shell
lines in order, in one shell session of their own (each line starts in the folder and with the
environment the lines before it left, as at a terminal), from an empty folder beside a clone of
inboxgen (this checkout): a brand-new virtual environment, inboxgen installed into it from the
clone as the page says, the page's files written where the session stands when the page shows
them. The outputs a page shows (a ```text block after a shell block: its last line's) are the
outputs the commands print, but for times and PostgreSQL's statistics, which vary by the run.

PostgreSQL: the page's URL (`postgresql://app@localhost/shop`) names a database the test makes
on the suite's server, reached through the server's port in $PGPORT, as libpq reads it."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

REPO = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
FILE_LINE = re.compile(r"^(?:#|--) ([\w./-]+\.\w+)$")
AGE = re.compile(r"\b\d+(?:\.\d+)? (?:s|min|h)\b")  # a time status prints, as its age column


def _blocks(page: Path) -> list[tuple[str, str]]:
    """The page's code blocks in order: (language, text)."""
    return [(m.group(1), m.group(2))
            for m in FENCE.finditer(page.read_text(encoding="utf-8"))]


def _lines(text: str) -> list[str]:
    """Output as the page shows it: its lines, each with its spaces collapsed, any age replaced
    by `<age>`, and the figures of PostgreSQL's statistics (which a session reports when it
    gets to it) left out."""
    lines = [AGE.sub("<age>", " ".join(line.split())) for line in text.splitlines()
             if line.strip()]
    return [re.sub(r": \d+ dead row version.*", ": <statistics>", line) for line in lines]


class Session:
    """One shell session: each line runs in bash, in the folder and the environment (exported
    variables, an activated virtual environment) the lines before it left."""

    def __init__(self, cwd: Path, env: dict[str, str], state: Path) -> None:
        self.cwd, self.env, self.state = cwd, env, state
        state.mkdir()

    def run(self, line: str, timeout: float = 600) -> str:
        after = (f"__rc=$?; pwd > {shlex.quote(str(self.state / 'cwd'))}; "
                 f"env -0 > {shlex.quote(str(self.state / 'env'))}; exit $__rc")
        result = subprocess.run(["bash", "-c", f"{line}\n{after}"], cwd=self.cwd, env=self.env,
                                capture_output=True, text=True, timeout=timeout, check=False)
        assert result.returncode == 0, f"{line}: {result.stdout}{result.stderr}"
        self.cwd = Path((self.state / "cwd").read_text(encoding="utf-8").strip())
        pairs = (self.state / "env").read_text(encoding="utf-8").split("\0")
        self.env = dict(p.split("=", 1) for p in pairs if "=" in p)
        return result.stdout

    def start(self, line: str) -> subprocess.Popen[str]:
        """A line that runs until Ctrl-C, started in the background."""
        return subprocess.Popen(["bash", "-c", f"exec {line}"], cwd=self.cwd, env=self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def write(self, name: str, text: str) -> None:
        (self.cwd / name).parent.mkdir(parents=True, exist_ok=True)
        (self.cwd / name).write_text(text, encoding="utf-8")


def walk(page: Path, tmp_path: Path, env: dict[str, str],
         settled: Callable[[str], bool]) -> tuple[list[str], str]:
    """Run `page` in a session in `tmp_path` (beside `inboxgen`, this checkout): its files
    written, its lines run, each output it shows compared. The worker line is started in the
    background; a status line after it is run again until `settled` (its output) says the
    worker took every job. Returns the files written and the worker's output after Ctrl-C."""
    (tmp_path / "inboxgen").symlink_to(REPO)
    bin_dir = tmp_path / "bin"  # python3: the suite's Python, and nothing else of the suite's
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    env = {k: v for k, v in env.items()
           if not k.startswith(("PYTEST", "INBOXGEN", "PYTHON", "VIRTUAL_ENV"))}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    session = Session(tmp_path, env, tmp_path / ".session")
    written: list[str] = []
    worker: subprocess.Popen[str] | None = None
    last = ""  # the output of the last shell block's last line
    blocks = _blocks(page)
    for i, (lang, body) in enumerate(blocks):
        if lang == "text" and i and blocks[i - 1][0] == "sh":
            assert _lines(last) == _lines(body), f"{page.name}: shown\n{body}\nprinted\n{last}"
            continue
        if lang != "sh":
            first, _, rest = body.partition("\n")
            named = FILE_LINE.match(first)
            if named:
                session.write(named.group(1), rest)
                written.append(named.group(1))
            continue
        for line in body.splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            if line.startswith("inboxgen worker "):
                assert session.run("command -v inboxgen").strip() == str(
                    session.cwd / ".venv" / "bin" / "inboxgen"), "not the project's inboxgen"
                worker = session.start(line)
                last = ""
                continue
            last = session.run(line)
            deadline = time.monotonic() + 60
            while (worker is not None and line.startswith("inboxgen status")
                   and not settled(last) and time.monotonic() < deadline):
                time.sleep(0.2)
                last = session.run(line)
    assert worker is not None and worker.stdout is not None, "the page starts no worker"
    worker.send_signal(signal.SIGINT)  # Ctrl-C
    output = worker.stdout.read()
    assert worker.wait(timeout=60) == 0, output
    assert "Traceback" not in output, output
    return written, output


def _no_rows(output: str) -> bool:
    return "(no rows)" in output


def test_the_postgres_walkthrough_runs_as_written(pg_server: Any, tmp_path: Path) -> None:
    with psycopg.connect(pg_server.conninfo(), autocommit=True) as admin:
        admin.execute("DROP DATABASE IF EXISTS shop")
        admin.execute("DROP ROLE IF EXISTS app")
        admin.execute("CREATE ROLE app LOGIN")
        admin.execute("CREATE DATABASE shop OWNER app")
    env = {**os.environ, "PGPORT": str(pg_server.port)}
    env.pop("PGHOST", None)
    try:
        written, output = walk(REPO / "docs" / "postgres.md", tmp_path, env, _no_rows)
    finally:
        with psycopg.connect(pg_server.conninfo(), autocommit=True) as admin:
            admin.execute("DROP DATABASE IF EXISTS shop WITH (FORCE)")
            admin.execute("DROP ROLE IF EXISTS app")
    assert sorted(written) == ["app/__init__.py", "app/messages.py", "app/orders.py",
                               "app/queues.py", "migrations/001_orders.sql", "pyproject.toml",
                               "specs/email_jobs.toml"]
    assert (tmp_path / "shop" / "generated" / "email_jobs.py").is_file()
    assert "sending 'Order 1 confirmed' to ada@example.com" in output


def test_the_sqlite_walkthrough_runs_as_written(tmp_path: Path) -> None:
    written, output = walk(REPO / "docs" / "sqlite.md", tmp_path, dict(os.environ), _no_rows)
    assert sorted(written) == ["app/__init__.py", "app/messages.py", "app/migrate.py",
                               "app/orders.py", "app/queues.py", "migrations/001_orders.sql",
                               "pyproject.toml", "specs/email_jobs.toml"]
    assert (tmp_path / "shop" / "shop.db").is_file()
    assert "sending 'Order 1 confirmed' to ada@example.com" in output
    # The order placed while the worker ran was sent without waiting for a poll.
    assert "sending 'Order 2 confirmed' to grace@example.com" in output


@pytest.mark.parametrize("page", ["postgres.md", "sqlite.md"])
def test_the_walkthrough_installs_from_a_clone_into_a_new_virtual_environment(
        page: str) -> None:
    """No release of inboxgen is published: the page installs it from a clone, into a virtual
    environment it makes."""
    lines = [line for lang, body in _blocks(REPO / "docs" / page) if lang == "sh"
             for line in body.splitlines()]
    assert lines[:2] == ["mkdir shop && cd shop", "python3 -m venv .venv && . .venv/bin/activate"]
    assert re.fullmatch(r"pip install -e '\.\./inboxgen(\[postgres\])?'", lines[2]), lines[2]
