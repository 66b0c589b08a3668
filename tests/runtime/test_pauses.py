"""Pausing a running queue ([flow] pauses): a worker claims nothing while its queue (or group)
is paused, a job in work when the pause commits finishes, and resume() has the worker claim at
once. worker.pauses (pause, resume, paused) and the Service's are the API; errors name what
is missing."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from dbcases import Layout, MakeQueue, Queue

from inboxgen import Job, Service, Worker
from inboxgen.errors import WorkerConfigError

UTC = dt.UTC
POLL = 0.1
QUIET = 1.0  # seconds a paused worker is watched claiming nothing (ten poll intervals)

CASES = [
    pytest.param("postgres", Layout(form="row_lock", pauses=True), id="postgres-row_lock"),
    pytest.param("postgres", Layout(form="row_lock", count_crashes=True, dead="table",
                                    pauses=True), id="postgres-row_lock-counted"),
    pytest.param("postgres", Layout(form="lease", pauses=True), id="postgres-lease"),
    pytest.param("mysql", Layout(form="row_lock", pauses=True), id="mysql-row_lock"),
    pytest.param("mysql+pymysql", Layout(form="lease", pauses=True), id="mysql-pymysql-lease"),
    pytest.param("sqlite", Layout(form="lease", pauses=True), id="sqlite-lease"),
    pytest.param("sqlite", Layout(form="advisory", pauses=True), id="sqlite-advisory"),
]


def add_jobs(q: Queue, n: int, **fields: Any) -> list[int]:
    due = dt.datetime.now(UTC) - dt.timedelta(seconds=60)
    conn = q.connect()
    try:
        return [q.add(conn, retry_after=due, **fields) for _ in range(n)]
    finally:
        conn.close()


async def wait_for(condition: Any, timeout: float = 15.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


@pytest.mark.parametrize(("dialect", "layout"), CASES)
def test_a_paused_worker_claims_nothing_until_resumed(queue: MakeQueue, dialect: str,
                                                       layout: Layout) -> None:
    q = queue(dialect, layout)
    first, *others = add_jobs(q, 6)
    ran: list[int] = []
    gate = asyncio.Event()

    async def handler(job: Job[Any]) -> None:
        if job.id == first:
            await gate.wait()  # in work while the queue is paused
        ran.append(job.id)

    worker = Worker(q.mod.DESCRIPTOR, handler, database=q.target, workers=1,
                    poll_interval=POLL, listen=False)

    async def main() -> None:
        await worker.start()
        try:
            await wait_for(lambda: worker.in_flight == 1)
            await worker.pauses.pause()
            assert await worker.pauses.paused() == [None]
            gate.set()
            await wait_for(lambda: ran == [first])  # the job in work finished
            await asyncio.sleep(QUIET)
            assert ran == [first]
            assert await worker.pauses.resume() is True
            await wait_for(lambda: len(ran) == 6)
            assert sorted(ran) == sorted([first, *others])
            assert await worker.pauses.paused() == []
        finally:
            await worker.shutdown()

    asyncio.run(main())
    assert q.ids() == [] or layout.processed  # settled: deleted, or kept as processed


@pytest.mark.parametrize(("dialect", "form"), [("postgres", "row_lock"), ("mysql", "lease"),
                                               ("sqlite", "lease")])
def test_a_paused_group_stops_its_workers_alone(queue: MakeQueue, dialect: str,
                                                form: str) -> None:
    q = queue(dialect, Layout(form=form, group=True, pauses=True))
    in_g = add_jobs(q, 3)
    in_h = add_jobs(q, 3, **{q.group_attr: "h"})
    ran: dict[str, list[int]] = {"g": [], "h": []}

    def recorder(group: str) -> Any:
        async def handler(job: Job[Any]) -> None:
            ran[group].append(job.id)
        return handler

    service = Service(q.target)
    for group in ("g", "h"):
        service.queue(q.mod.DESCRIPTOR, recorder(group), group=group, name=group, workers=1,
                      poll_interval=POLL, listen=False)

    async def main() -> None:
        conn = q.connect()
        q.mod.pause(conn, group="g")  # before the service starts: a pause outlives processes
        conn.commit()
        conn.close()
        await service.start()
        try:
            await wait_for(lambda: len(ran["h"]) == 3)
            await asyncio.sleep(QUIET)
            assert ran["g"] == []
            assert await service.paused(q.mod.DESCRIPTOR) == ["g"]
            assert await service.resume(q.mod.DESCRIPTOR) is False  # the queue was not paused
            assert await service.resume(q.mod.DESCRIPTOR, group="g") is True
            await wait_for(lambda: len(ran["g"]) == 3)
        finally:
            await service.shutdown()

    asyncio.run(main())
    assert sorted(ran["g"]) == in_g and sorted(ran["h"]) == in_h


def test_pausing_needs_a_pause_table_and_a_started_worker(queue: MakeQueue) -> None:
    plain = queue("sqlite", Layout(form="lease"))
    paused = queue("sqlite", Layout(form="lease", pauses=True))

    async def main() -> None:
        worker = Worker(plain.mod.DESCRIPTOR, lambda job: None, database=plain.target)
        with pytest.raises(WorkerConfigError, match=r"\[flow\] pauses"):
            await worker.pauses.pause()
        idle = Worker(paused.mod.DESCRIPTOR, lambda job: None, database=paused.target)
        with pytest.raises(Exception, match="start the worker"):
            await idle.pauses.pause()
        with pytest.raises(WorkerConfigError, match="no groups"):
            await idle.pauses.pause(group="g")

    asyncio.run(main())


# -- four processes of ten slots ------------------------------------------------------------------

WORKER_SCRIPT = Path(__file__).resolve().parents[1] / "process_worker.py"
REPO = Path(__file__).resolve().parents[2]
PROCESSES, SLOTS, JOBS = 4, 10, 240


def events(logs: list[Path], kind: str) -> list[str]:
    """The job ids of every `kind` event (start, done) the children logged."""
    return [line.split()[1] for log in logs for line in log.read_text().splitlines()
            if line.startswith(kind + " ")]


def settle(check: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.mark.parametrize(("dialect", "form"), [("postgres", "row_lock"), ("mysql", "lease"),
                                               ("sqlite", "lease")])
def test_a_pause_holds_across_four_processes_of_ten_slots(
        queue: MakeQueue, tmp_path: Path, dialect: str, form: str) -> None:
    """Four worker processes of ten slots drain a queue; it is paused mid-drain: once the claims
    in flight at the pause's commit have returned, no handler starts in any process for 2 s,
    and every job in work finishes; resumed, the rest drains. Every job starts exactly once."""
    q = queue(dialect, Layout(form=form, processed=False, pauses=True))
    due = dt.datetime.now(UTC) - dt.timedelta(seconds=60)
    conn = q.connect()
    q.mod.insert_many(conn, [q.new(retry_after=due) for _ in range(JOBS)])
    conn.commit()
    logs = [tmp_path / f"w{n}.log" for n in range(PROCESSES)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    children = [subprocess.Popen(
        [sys.executable, str(WORKER_SCRIPT), q.mod.__file__, q.target, "run", "--log", str(log),
         "--workers", str(SLOTS), "--job-seconds", "0.05", "--no-listen"],
        cwd=REPO, env=env, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for log in logs]
    try:
        settle(lambda: all(log.exists() for log in logs)
               and len(events(logs, "start")) >= JOBS // 4)
        q.mod.pause(conn)
        conn.commit()
        time.sleep(0.5)  # the claims in flight at the commit return their rows
        started = events(logs, "start")
        time.sleep(2.0)
        assert events(logs, "start") == started  # nothing started while paused
        settle(lambda: sorted(events(logs, "done")) == sorted(started))  # in work: finished
        assert len(started) < JOBS
        assert q.mod.resume(conn) is True
        conn.commit()
        settle(lambda: len(events(logs, "done")) >= JOBS)
        assert len(events(logs, "start")) == len(set(events(logs, "start"))) == JOBS
    finally:
        for child in children:
            child.send_signal(signal.SIGTERM)
        for child in children:
            _, err = child.communicate(timeout=60)
            assert child.returncode == 0, err.decode()[-2000:]
    assert q.ids() == []
