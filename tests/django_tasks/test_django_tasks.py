"""Django's task framework on an inboxgen table, in a real Django 6 project (tests/django_tasks/
project, the task shop) on real PostgreSQL, MariaDB and SQLite: tasks enqueued inside atomic()
commit and roll back with the request's writes, `manage.py inboxgen_serve` runs them, and
get_result() reads what became of each."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

PROJECT = Path(__file__).resolve().parent / "project"
DIALECTS = ["postgres", "mysql", "sqlite"]
ENGINES = {"postgres": "postgresql", "mysql": "mysql", "sqlite": "sqlite3"}
PRELUDE = """\
import json
from django.db import connection, transaction
from taskshop.models import Note
from taskshop.tasks import *
out = {}
"""


class Shop:
    """The task shop on one database; `shell(code)` runs code in `manage.py shell` and returns
    what it put in `out`."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env

    def manage(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "manage.py", *args], cwd=PROJECT, env=self.env,
                              capture_output=True, text=True, timeout=timeout, check=False)

    def shell(self, code: str) -> Any:
        done = self.manage("shell", "-v", "0", "-c",
                           PRELUDE + textwrap.dedent(code) + "\nprint(json.dumps(out))")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    def serve(self) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "manage.py", "inboxgen_serve"], cwd=PROJECT,
                                env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)

    def statuses(self, ids: dict[str, str]) -> dict[str, str]:
        return self.shell(f"""
            for name, id in {ids!r}.items():
                out[name] = write_note.get_backend().get_result(id).status
            """)

    def notes(self) -> list[str]:
        return sorted(self.shell("out['notes'] = list(Note.objects.values_list('text', "
                                 "flat=True))")["notes"])


def wait_for(check: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def stop(server: subprocess.Popen[str]) -> str:
    server.send_signal(signal.SIGTERM)
    out, _ = server.communicate(timeout=60)
    assert server.returncode == 0, out
    return out


@pytest.fixture(params=DIALECTS)
def shop(request: pytest.FixtureRequest, fresh_database: Callable[[str], str]) -> Shop:
    dialect = request.param
    target = fresh_database(dialect)
    env = {**os.environ, "TASKSHOP_ENGINE": ENGINES[dialect], "PYTHONPATH": str(PROJECT)}
    if dialect == "postgres":
        info = psycopg.conninfo.conninfo_to_dict(target)
        env.update(TASKSHOP_NAME=str(info["dbname"]), TASKSHOP_HOST=str(info["host"]),
                   TASKSHOP_PORT=str(info["port"]), TASKSHOP_USER=str(info["user"]))
    elif dialect == "mysql":
        url = urlsplit(target)
        env.update(TASKSHOP_NAME=url.path.lstrip("/"), TASKSHOP_HOST=str(url.hostname),
                   TASKSHOP_PORT=str(url.port), TASKSHOP_USER=str(url.username))
    else:
        env.update(TASKSHOP_NAME=target)
    s = Shop(env)
    migrated = s.manage("migrate", "-v", "0")
    assert migrated.returncode == 0, migrated.stderr
    return s


def test_a_task_commits_with_the_request_and_vanishes_with_its_rollback(shop: Shop) -> None:
    made = shop.shell("""
        with transaction.atomic():
            Note.objects.create(text="order 1")
            out["kept"] = write_note.enqueue("task of order 1").id
        try:
            with transaction.atomic():
                Note.objects.create(text="order 2")
                out["rolled_back"] = write_note.enqueue("task of order 2").id
                raise RuntimeError("the request failed")
        except RuntimeError:
            pass
        out["status"] = write_note.get_result(out["kept"]).status
        try:
            write_note.get_result(out["rolled_back"])
        except Exception as err:
            out["missing"] = type(err).__name__
        """)
    assert made["status"] == "READY"
    assert made["missing"] == "TaskResultDoesNotExist"
    server = shop.serve()
    try:
        wait_for(lambda: shop.statuses({"kept": made["kept"]})["kept"] == "SUCCESSFUL",
                 "the committed task")
    finally:
        stop(server)
    assert shop.notes() == ["order 1", "task of order 1"]
    # What the task returned, kept by the table's result column.
    assert shop.shell(f"out['value'] = write_note.get_result({made['kept']!r}).return_value"
                      ) == {"value": "task of order 1"}


def test_the_worker_runs_every_kind_of_task_and_dead_letters_a_failing_one(shop: Shop) -> None:
    ids = shop.shell("""
        import datetime as dt
        from django.utils import timezone
        out["urgent"] = write_urgent_note.enqueue("refund").id
        out["context"] = write_attempt.enqueue("receipt").id
        out["async"] = write_note_async.enqueue("invoice").id
        out["fails"] = explode.enqueue().id
        later = timezone.now() + dt.timedelta(hours=1)
        out["later"] = write_note.using(run_after=later).enqueue("tomorrow").id
        """)
    server = shop.serve()
    try:
        def settled() -> bool:
            return all(s in ("SUCCESSFUL", "FAILED") for name, s in shop.statuses(ids).items()
                       if name != "later")

        wait_for(settled, "every due task to finish or fail")
        statuses = shop.statuses(ids)
    finally:
        log = stop(server)
    assert statuses == {"urgent": "SUCCESSFUL", "context": "SUCCESSFUL", "async": "SUCCESSFUL",
                        "fails": "FAILED", "later": "READY"}
    # The attempt a task's context reports is the worker's: the first delivery reads 1.
    assert shop.notes() == ["async: invoice", "receipt on attempt 1", "urgent: refund"]
    assert "its last attempt failed: moved to the dead letters" in log
    assert "SIGTERM: stopping" in log


def test_arguments_that_json_would_change_are_refused_at_enqueue(shop: Shop) -> None:
    refused = shop.shell("""
        for name, args in {"int_keys": [{1: "a"}], "nan": [float("nan")]}.items():
            try:
                write_note.enqueue(*args)
            except ValueError as err:
                out[name] = str(err)
        out["tuple"] = write_note.enqueue(("a", "b")).args  # a tuple is JSON's list
        try:
            write_note.using(queue_name="nowhere").enqueue("x")
        except Exception as err:
            out["queue"] = type(err).__name__
        """)
    assert refused["int_keys"] == ("task taskshop.tasks.write_note: argument 1 does not survive "
                                   "a JSON round trip ({1: 'a'})")
    assert "argument 1 does not survive a JSON round trip (nan)" in refused["nan"]
    assert refused["tuple"] == [["a", "b"]]
    assert refused["queue"] == "InvalidTask"


@pytest.mark.parametrize("shop", ["sqlite"], indirect=True)
def test_a_backend_that_names_no_module_fails_the_system_checks(shop: Shop) -> None:
    shop.env["TASKSHOP_MODULE"] = "taskshop.queues.nowhere"
    failed = shop.manage("inboxgen_serve", timeout=60)
    assert failed.returncode == 1
    assert "Traceback" not in failed.stderr
    assert ("?: (inboxgen.E001) TASKS['default']: cannot import 'taskshop.queues.nowhere': No "
            "module named 'taskshop.queues.nowhere'") in failed.stderr.splitlines()


# What `manage.py check` says of a wrong setting of the backend, one line each: (OPTIONS given
# over the project's, the line after "?: (inboxgen.E001) TASKS['default']: ").
WRONG_OPTIONS = [
    ({"MODULE": "taskshop.queues.nowhere"},
     "cannot import 'taskshop.queues.nowhere': No module named 'taskshop.queues.nowhere'"),
    ({"MODULE": "taskshop.queues"},  # the package, not the table's module in it
     "'taskshop.queues' is not a module inboxgen built (or was built before state()): run "
     "inboxgen build"),
    ({"MODULE": "taskshop.broken"},
     "cannot import 'taskshop.broken': ZeroDivisionError: division by zero"),
    ({"DATABASE": "replica"}, "OPTIONS['DATABASE'] names 'replica', which is not in DATABASES"),
    ({"WORKERS": 0}, "OPTIONS['WORKERS'] must be a whole number of 1 or more"),
    ({"TIMEOUT": 5}, "unknown OPTIONS TIMEOUT (it takes DATABASE, MODULE, WORKERS)"),
]


@pytest.mark.parametrize("shop", ["sqlite"], indirect=True)
def test_manage_py_check_reports_a_wrong_backend_setting_in_one_line(shop: Shop) -> None:
    """`manage.py check` imports OPTIONS["MODULE"] and checks it and the other OPTIONS: a
    mistake is inboxgen.E001, one line naming the backend, and the command fails without a
    traceback; the project's own settings pass."""
    checked = shop.manage("check")
    assert checked.returncode == 0, checked.stderr
    assert "System check identified no issues" in checked.stdout, checked.stdout
    for options, line in WRONG_OPTIONS:
        shop.env["TASKSHOP_OPTIONS"] = json.dumps(options)
        checked = shop.manage("check")
        assert checked.returncode == 1, (options, checked.stdout, checked.stderr)
        assert "Traceback" not in checked.stderr, checked.stderr
        errors = [e for e in checked.stderr.splitlines() if "inboxgen.E001" in e]
        assert errors == [f"?: (inboxgen.E001) TASKS['default']: {line}"], checked.stderr


def serve_until(shop: Shop, seen: Callable[[list[str]], bool], what: str,
                timeout: float = 60) -> list[str]:
    """`manage.py inboxgen_serve` until its output's lines satisfy `seen`, then SIGTERM: the
    lines it printed."""
    server = shop.serve()
    lines: list[str] = []

    def read() -> None:
        assert server.stdout is not None
        for line in server.stdout:
            lines.append(line.rstrip("\n"))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        wait_for(lambda: seen(lines), what, timeout)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
        reader.join(timeout=10)
    assert server.returncode == 0, "\n".join(lines)
    return lines


def about(lines: list[str], task_id: str) -> list[str]:
    """The lines that name task (row) `task_id`: Django's and the worker's."""
    return [line for line in lines
            if f"Task id={task_id} " in line or f"on row {task_id} " in line]


def failures(shop: Shop, task_id: str) -> list[list[str]]:
    """get_result(task_id).errors: each error's class path, the first line of its text, and
    the file of its last frame."""
    return shop.shell(f"""
        out = [[e.exception_class_path, e.traceback.splitlines()[0],
                e.traceback.splitlines()[-2].split('"')[1].rsplit("/", 1)[-1]]
               for e in write_note.get_backend().get_result({task_id!r}).errors]
        assert all(issubclass(e.exception_class, RuntimeError)
                   for e in write_note.get_backend().get_result({task_id!r}).errors)
    """)


@pytest.mark.parametrize("shop", ["sqlite"], indirect=True)
def test_a_failing_task_logs_a_line_per_attempt_and_reads_ready_until_its_last(
        shop: Shop) -> None:
    """With DEBUG on (Django's own lines shown, as in development), a task that fails on each
    of its 2 attempts: its first failure is one line (the worker's, saying it is retried), no
    traceback, and Django neither logs nor signals it FAILED: get_result() reads READY, since
    it will run again. Its last failure: Django's FAILED line and the worker's, with the one
    traceback, and get_result() reads FAILED."""
    shop.env["TASKSHOP_DEBUG"] = "1"
    made = shop.shell("out['id'] = explode.enqueue().id")
    task = made["id"]

    def failed(lines: list[str]) -> bool:
        return any("handler failed" in line for line in lines)

    first = serve_until(shop, failed, "the first attempt to fail")
    # The row waits for its second attempt: READY, as Django names a task to be run again,
    # with its failure (the table keeps it in last_error).
    assert shop.statuses({"task": task}) == {"task": "READY"}
    assert failures(shop, task) == [["builtins.RuntimeError", "RuntimeError: this task always "
                                     "fails", "tasks.py"]]
    mine = about(first, task)
    assert [line.split(" ", 3)[-1] if "handler failed" in line else line for line in mine] == [
        f"Task id={task} path=taskshop.tasks.explode state=RUNNING",
        f"default:default: handler failed on row {task} (attempt 1 of 2): "
        f"RuntimeError('this task always fails'); " + mine[-1].split("; ", 1)[1]], first
    assert "retrying in" in mine[-1], mine
    assert not any("Traceback" in line or "state=FAILED" in line for line in first), first

    def dead(lines: list[str]) -> bool:
        return any("dead letters" in line for line in lines)

    last = serve_until(shop, dead, "the last attempt to fail")
    assert shop.statuses({"task": task}) == {"task": "FAILED"}
    assert failures(shop, task)[0][:2] == ["builtins.RuntimeError",
                                           "RuntimeError: this task always fails"]
    mine = about(last, task)
    assert mine[:2] == [f"Task id={task} path=taskshop.tasks.explode state=RUNNING",
                        f"Task id={task} path=taskshop.tasks.explode state=FAILED"], last
    assert len(mine) == 3 and mine[2].endswith(
        f"ERROR default:default: handler failed on row {task} (attempt 2 of 2): "
        f"RuntimeError('this task always fails'); its last attempt failed: moved to the dead "
        f"letters (table task_jobs_dead)"), last
    assert sum("Traceback" in line for line in last) == 1, last
    # The traceback follows the worker's line and ends with the task's error.
    start = last.index(mine[2]) + 1
    assert last[start] == "Traceback (most recent call last):", last
    assert "RuntimeError: this task always fails" in last[start:], last


def test_the_projects_task_modules_are_built_from_its_specs() -> None:
    verified = subprocess.run([sys.executable, "-m", "inboxgen", "verify"], cwd=PROJECT,
                              capture_output=True, text=True, timeout=120, check=False)
    assert verified.returncode == 0, verified.stdout + verified.stderr


@pytest.mark.parametrize("shop", ["sqlite"], indirect=True)
def test_get_result_of_a_row_whose_payload_cannot_be_read(shop: Shop, tmp_path: Path) -> None:
    """A task row whose payload does not decode (text that is not JSON), or that names no task,
    has no task to give a result of: get_result() raises TaskResultDoesNotExist saying why, as
    for an id without a row, never the decoder's error; the other tasks read as usual."""
    from inboxgen.generate.build import generate, write
    from inboxgen.generate.config import Project

    # The task table's module as inboxgen builds it now, beside the committed one.
    project = Project(PROJECT, PROJECT / "specs", tmp_path / "fresh_queues")
    built = generate(project, [PROJECT / "specs" / "tasks_sqlite.toml"])
    assert built.ok, [d.format() for d in built.diagnostics]
    write(built)
    shop.env.update(PYTHONPATH=f"{PROJECT}{os.pathsep}{tmp_path}",
                    TASKSHOP_MODULE="fresh_queues.tasks_sqlite")
    found = shop.shell("""
        from django.tasks.exceptions import TaskResultDoesNotExist
        ids = {name: write_note.enqueue(name).id for name in ("good", "garbled", "no_task")}
        with connection.cursor() as cur:
            cur.execute("UPDATE task_jobs SET payload = %s WHERE id = %s",
                        ["not json {", ids["garbled"]])
            cur.execute("UPDATE task_jobs SET payload = %s WHERE id = %s",
                        ['{"task": 5, "args": []}', ids["no_task"]])
        out["good"] = write_note.get_result(ids["good"]).status
        for name in ("garbled", "no_task"):
            try:
                write_note.get_result(ids[name])
            except TaskResultDoesNotExist as err:
                out[name] = str(err)
        """)
    assert found["good"] == "READY"
    assert found["garbled"].endswith(": its payload does not decode (DecodeError: JSON is "
                                     "malformed: invalid character (byte 4))"), found
    assert found["no_task"].endswith(": its payload names no task"), found
