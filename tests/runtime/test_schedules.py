"""Service schedules: each occurrence of a periodic job is enqueued once, however many service
processes keep the schedule, through restarts and a SIGKILL; the next one is always in the
table."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from dbcases import Layout, MakeQueue, Queue

from inboxgen import Service, WorkerConfigError
from inboxgen.runtime.schedules import Schedule

REPO = Path(__file__).resolve().parents[2]
EVERY = 1.0  # seconds between occurrences


def test_occurrences_are_the_same_instants_for_every_process() -> None:
    hourly = Schedule("hourly", lambda at: None, every=dt.timedelta(hours=1))
    at = dt.datetime(2026, 12, 2, 11, 59, 59, tzinfo=dt.UTC)
    assert hourly.after(at) == dt.datetime(2026, 12, 2, 12, tzinfo=dt.UTC)
    assert hourly.after(hourly.after(at)) == dt.datetime(2026, 12, 2, 13, tzinfo=dt.UTC)
    nightly = Schedule("nightly", lambda at: None, cron="30 3 * * *")
    assert nightly.after(at) == dt.datetime(2026, 12, 3, 3, 30, tzinfo=dt.UTC)
    with pytest.raises(WorkerConfigError, match="not a cron expression"):
        Schedule("bad", lambda at: None, cron="every day")
    with pytest.raises(WorkerConfigError, match="one of them"):
        Schedule("both", lambda at: None)


def test_a_schedule_needs_a_unique_key_and_a_queue(queue: MakeQueue) -> None:
    plain = queue("postgres", Layout(form="lease"))
    service = Service(plain.target)
    with pytest.raises(WorkerConfigError, match="no insert_unique"):
        service.schedule("tick", plain.mod.DESCRIPTOR, lambda at: None,
                         every=dt.timedelta(seconds=1))
    keyed = queue("postgres", Layout(form="lease", unique=True))
    service = Service(keyed.target)
    service.queue(plain.mod.DESCRIPTOR, lambda job: None, database=plain.target)
    service.schedule("tick", keyed.mod.DESCRIPTOR, lambda at: None, every=dt.timedelta(seconds=1))
    with pytest.raises(WorkerConfigError, match="no queue of the service runs"):
        asyncio.run(service.start())


CHILD = """
    import datetime as dt, importlib.util, os, sys
    from inboxgen import Service

    spec = importlib.util.spec_from_file_location("jobs_module", {module!r})
    mod = importlib.util.module_from_spec(spec)
    sys.modules["jobs_module"] = mod
    spec.loader.exec_module(mod)

    def tick(at):
        return mod.NewRow(priority=0, retry_after=at, account=f"tick:{{at:%H:%M:%S.%f}}",
                          payload="tick")

    service = Service(os.environ["QUEUE_DSN"], shutdown_timeout=2)
    service.queue(mod.DESCRIPTOR, lambda job: None, workers=1)
    service.schedule("tick", mod.DESCRIPTOR, tick, every=dt.timedelta(seconds={every}))
    service.run()
"""


def _start(q: Queue, folder: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(folder / "service.py")], cwd=folder, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
        env={**os.environ, "QUEUE_DSN": q.target,
             "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])})


def _occurrences(q: Queue) -> list[tuple[str, dt.datetime, bool]]:
    """(key, due, finished) of every occurrence in the table, in due order."""
    return sorted(((r["account"], r["retry_after"], r["processed_at"] is not None)
                   for r in q.rows()), key=lambda o: o[1])


def test_two_processes_keep_each_occurrence_once_through_restarts_and_a_sigkill(
        queue: MakeQueue, tmp_path: Path) -> None:
    q = queue("postgres", Layout(form="lease", unique=True))
    (tmp_path / "service.py").write_text(textwrap.dedent(CHILD.format(
        module=q.mod.__file__, every=EVERY)))
    first, second = _start(q, tmp_path), _start(q, tmp_path)
    procs = [first, second]
    try:
        time.sleep(4)
        first.kill()  # SIGKILL: no shutdown at all
        first.wait(timeout=10)
        time.sleep(2)
        procs.append(third := _start(q, tmp_path))  # the killed one, back
        time.sleep(4)
        began = dt.datetime.now(dt.UTC)
        for p in (second, third):
            p.send_signal(signal.SIGTERM)
        for p in (second, third):
            _, err = p.communicate(timeout=30)
            assert p.returncode == 0, err
            assert "Traceback" not in err
        ended = dt.datetime.now(dt.UTC)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    seen = _occurrences(q)
    dues = [due for _, due, _ in seen]
    keys = [key for key, _, _ in seen]
    assert len(set(keys)) == len(keys) == len(set(dues))  # each occurrence once
    # Every instant from the first to the last is there: none was skipped, not even while a
    # process was killed or starting again.
    step = dt.timedelta(seconds=EVERY)
    assert dues == [dues[0] + i * step for i in range(len(dues))]
    assert len(dues) >= 9
    # The past ones ran; the next one was waiting when the services stopped.
    pending = [due for _, due, done in seen if not done]
    assert pending and all(due > began - step for due in pending)
    assert len([due for due in dues if due > ended]) <= 1
