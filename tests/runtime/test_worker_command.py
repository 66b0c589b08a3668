"""The `inboxgen worker module:attr` command: serves until SIGTERM, and one line for a target that
is not a worker or a table that is missing."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from dbcases import example_module as example
from dbcases import sqlite_db, sqlite_rows
from semantics_util import REPO, migration_sql

pytestmark = pytest.mark.usefixtures("log_inboxgen")


CLI_MODULE = """
    import time
    from pathlib import Path

    from generated_examples import reports
    from inboxgen import Worker

    HERE = Path(__file__).resolve().parent
    NOT_A_WORKER = 42


    def render(job):
        text = job.payload.decode()
        if text == "slow":  # still in work when SIGTERM comes: it finishes first
            with open(HERE / "done.txt", "a", encoding="utf-8") as out:
                out.write("slow-start\\n")
            time.sleep(1.0)
        with open(HERE / "done.txt", "a", encoding="utf-8") as out:
            out.write(text + "\\n")


    def make_worker():
        return Worker(reports.DESCRIPTOR, render, database=HERE / "queue.db", poll_interval=0.05)


    def make_nothing():
        return "not a worker"


    def make_unprepared_worker():
        return Worker(reports.DESCRIPTOR, render, database=HERE / "empty.db")
"""


def _cli(tmp_path: Path, target: str, **kwargs: Any) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))
    return subprocess.Popen([sys.executable, "-m", "inboxgen", "worker", target], cwd=tmp_path,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **kwargs)


def test_cli_worker_serves_until_sigterm_then_exits_0(tmp_path: Path) -> None:
    (tmp_path / "myqueues.py").write_text(textwrap.dedent(CLI_MODULE), encoding="utf-8")
    reports = example("reports")
    db = sqlite_db(tmp_path / "queue.db", migration_sql("reports"))
    reports.insert_many(db, [reports.NewRow(payload=b"report-%d" % i) for i in range(3)])
    done = tmp_path / "done.txt"

    def lines() -> list[str]:
        return done.read_text(encoding="utf-8").splitlines() if done.exists() else []

    def wait_for(line: str) -> None:
        deadline = time.monotonic() + 15
        while line not in lines() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert line in lines(), (line, lines())

    proc = _cli(tmp_path, "myqueues:make_worker")
    try:
        wait_for("report-2")
        # Jobs enqueued while it runs are served too; SIGTERM comes while "slow" is in work.
        reports.insert(db, reports.NewRow(payload=b"late"))
        wait_for("late")
        reports.insert(db, reports.NewRow(payload=b"slow"))
        wait_for("slow-start")
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert lines() == ["report-0", "report-1", "report-2", "late", "slow-start", "slow"]
    assert "stopped" in err
    assert sqlite_rows(tmp_path / "queue.db", "SELECT count(*) FROM report_jobs") == [(0,)]


@pytest.mark.parametrize("target", ["myqueues:NOT_A_WORKER", "myqueues:make_nothing"])
def test_cli_worker_target_that_is_not_a_worker_exits_2(tmp_path: Path, target: str) -> None:
    (tmp_path / "myqueues.py").write_text(textwrap.dedent(CLI_MODULE), encoding="utf-8")
    proc = _cli(tmp_path, target)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2, (out, err)
    assert f"{target} is not an inboxgen Worker" in err
    assert "Traceback" not in err


def test_cli_worker_whose_table_is_missing_exits_1_naming_the_statement(tmp_path: Path) -> None:
    (tmp_path / "myqueues.py").write_text(textwrap.dedent(CLI_MODULE), encoding="utf-8")
    sqlite3.connect(tmp_path / "empty.db").close()  # a database file without the table
    proc = _cli(tmp_path, "myqueues:make_unprepared_worker")
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 1, (out, err)
    assert "SchemaError" in err and "report_jobs" in err and "statement CLAIM" in err
    assert "Traceback" not in err
