"""SQLite workers with many slots and short leases: they drain the queue and shut down within
their timeout, transactional or not (real SQLite files, the real clock); advisory workers keep
every slot busy while due rows exist; and a worker that starts while another process holds the
file's lock waits for it, as the busy timeout says, instead of failing its start."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import gc
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from dbcases import Layout, MakeQueue, Queue

from inboxgen import Worker
from inboxgen.errors import ConnectFailed
from inboxgen.runtime.backends import SqliteBackend
from inboxgen.runtime.backends.base import Wakes
from inboxgen.runtime.connecting import reach
from inboxgen.runtime.watcher import watch

JOBS = 400


def fill(q: Queue, jobs: int) -> None:
    conn = q.connect()
    due = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    q.mod.insert_many(conn, [q.new(retry_after=due) for _ in range(jobs)])
    conn.commit()


def unfinished(q: Queue) -> int:
    return sum(1 for r in q.rows() if r["processed_at"] is None)


@pytest.mark.parametrize("transactional", [False, True], ids=["plain", "transactional"])
@pytest.mark.parametrize("slots", [1, 8, 32])
def test_many_slots_and_a_short_lease_drain_the_queue(queue: MakeQueue, slots: int,
                                                      transactional: bool) -> None:
    q = queue("sqlite", Layout("lease"))
    fill(q, JOBS)

    async def handler(job: Any) -> None:
        if job.connection is not None:  # a write of its own, committed with the ack
            await asyncio.to_thread(job.connection.execute, "SELECT 1")
        await asyncio.sleep(0.002)

    async def run() -> float:
        worker = Worker(q.mod.DESCRIPTOR, handler, database=q.target, workers=slots, lease=1,
                        poll_interval=0.05, transactional=transactional, shutdown_timeout=2)
        started = time.monotonic()
        await worker.start()
        try:
            while unfinished(q) and time.monotonic() - started < 60:
                await asyncio.sleep(0.1)
            return time.monotonic() - started
        finally:
            await worker.shutdown()

    took = asyncio.run(run())
    assert unfinished(q) == 0, f"{unfinished(q)} of {JOBS} jobs left after {took:.1f} s"
    q.close()


@pytest.mark.parametrize("transactional", [False, True], ids=["plain", "transactional"])
def test_shutdown_under_load_ends_within_its_timeout(queue: MakeQueue, transactional: bool) -> None:
    q = queue("sqlite", Layout("lease"))
    fill(q, JOBS)
    release = threading.Event()

    def slow(job: Any) -> None:  # a plain handler, in a thread, that outlives the timeout
        release.wait(5)

    async def run() -> float:
        worker = Worker(q.mod.DESCRIPTOR, slow, database=q.target, workers=16, lease=1,
                        transactional=transactional, shutdown_timeout=1)
        await worker.start()
        await asyncio.sleep(1.5)  # slots in work, renewals due, claims waiting to write
        started = time.monotonic()
        await worker.shutdown()
        took = time.monotonic() - started
        release.set()
        return took

    took = asyncio.run(run())
    assert took < 4, f"shutdown took {took:.1f} s against a 1 s timeout"
    q.close()


def test_advisory_slots_all_get_rows_while_due_rows_exist(queue: MakeQueue) -> None:
    q = queue("sqlite", Layout("advisory"))
    fill(q, 160)
    running = 0
    most = 0

    async def handler(job: Any) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.25)  # long beside a claim, so that every slot's rows overlap
        running -= 1

    async def run() -> None:
        # Two workers on one file share its advisory keys (one process): each must read past
        # the rows the other holds.
        workers = [Worker(q.mod.DESCRIPTOR, handler, database=q.target, workers=8,
                          poll_interval=0.05, shutdown_timeout=2, name=f"w{i}")
                   for i in range(2)]
        for w in workers:
            await w.start()
        try:
            started = time.monotonic()
            while unfinished(q) and time.monotonic() - started < 60:
                await asyncio.sleep(0.1)
        finally:
            for w in workers:
                await w.shutdown()

    asyncio.run(run())
    assert unfinished(q) == 0
    assert most >= 14, f"at most {most} of 16 slots ran at once"
    q.close()


CHILD = """
import asyncio, importlib.util, sys
spec = importlib.util.spec_from_file_location("queue_module", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
from inboxgen import Worker

async def main():
    async def handler(job):
        return None
    worker = Worker(mod.DESCRIPTOR, handler, database=sys.argv[2], poll_interval=0.05)
    await worker.start()
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    await worker.shutdown()

asyncio.run(main())
"""


def test_a_second_process_serving_advisory_rows_of_the_file_is_refused(queue: MakeQueue) -> None:
    import subprocess
    import sys

    from inboxgen.errors import WorkerConfigError

    q = queue("sqlite", Layout("advisory"))
    child = subprocess.Popen([sys.executable, "-c", CHILD, q.mod.__file__, q.target],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"

        async def start() -> None:
            async def handler(job: Any) -> None:
                return None
            worker = Worker(q.mod.DESCRIPTOR, handler, database=q.target)
            await worker.start()
            await worker.shutdown()

        with pytest.raises(WorkerConfigError, match="another process serves advisory rows"):
            asyncio.run(start())
        assert child.stdin is not None
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.wait(timeout=30) == 0
        asyncio.run(start())  # the file is free again once that process stopped serving
    finally:
        child.kill()
        child.wait(timeout=30)
        q.close()


def test_shutdown_leaves_a_connection_to_the_plain_handler_still_using_it(queue: MakeQueue) -> None:
    """A transactional plain handler runs in a thread that cancellation cannot stop: its
    connection is neither rolled back, nor handed out again, nor closed under it; once the
    handler is done its transaction goes (the job stays leased, as any cut-off delivery)."""
    q = queue("sqlite", Layout("lease"))
    fill(q, 4)
    inside = threading.Event()
    release = threading.Event()
    wrote: list[str] = []

    def handler(job: Any) -> None:
        inside.set()
        release.wait(10)
        job.connection.execute("SELECT 1")  # still usable: nobody closed it meanwhile
        wrote.append("ok")

    async def run() -> None:
        worker = Worker(q.mod.DESCRIPTOR, handler, database=q.target, workers=2, lease=30,
                        transactional=True, shutdown_timeout=0.5)
        await worker.start()
        await asyncio.to_thread(inside.wait, 10)
        started = time.monotonic()
        await worker.shutdown()
        assert time.monotonic() - started < 3
        release.set()
        await asyncio.sleep(0.5)

    asyncio.run(run())
    assert wrote == ["ok"]
    conn = q.connect()  # the handler's transaction is gone: the file takes writes again
    q.mod.insert(conn, q.new(retry_after=dt.datetime.now(dt.UTC)))
    conn.commit()
    q.close()


@pytest.mark.parametrize("listen", [True, False], ids=["watching", "polling"])
def test_a_job_enqueued_on_an_idle_worker_starts_without_waiting_for_the_poll(
        queue: MakeQueue, listen: bool) -> None:
    """With the file watched (listen=True, the default), a commit by another connection wakes a
    waiting slot; without, the job waits for the next poll, 120 s away.

    The bounds are against the poll, not a latency: a loaded machine may take seconds to run the
    wake-up, and any start well before the poll was a wake-up. A test that passes waits no
    longer than the pickup took (the polling case: 3 s)."""
    q = queue("sqlite", Layout("lease"))
    started: list[float] = []

    async def run() -> float | None:
        worker = Worker(q.mod.DESCRIPTOR, lambda job: started.append(time.monotonic()),
                        database=q.target, workers=4, poll_interval=120, listen=listen)
        await worker.start()
        try:
            await asyncio.sleep(0.5)  # every slot has claimed nothing and waits
            enqueued = time.monotonic()
            await asyncio.to_thread(fill, q, 1)
            while not started and time.monotonic() - enqueued < (30 if listen else 3):
                await asyncio.sleep(0.01)
            return started[0] - enqueued if started else None
        finally:
            await worker.shutdown()

    pickup = asyncio.run(run())
    if listen:
        assert pickup is not None and pickup < 30, pickup  # not the 120 s poll
    else:
        assert pickup is None


# -- starting while another process holds the file's lock -----------------------------------------

# Another process: takes the lock (BEGIN IMMEDIATE: the write lock; BEGIN EXCLUSIVE: readers
# kept out too, on a file not in WAL mode), says so, holds it for a while, and lets go.
HOLDER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN " + sys.argv[2])
conn.execute("SELECT count(*) FROM sqlite_master").fetchall()
print("held", flush=True)
time.sleep(float(sys.argv[3]))
conn.execute("ROLLBACK")
print("released", flush=True)
"""


@contextlib.contextmanager
def held(path: str, how: str, seconds: float) -> Iterator[float]:
    """Another process holds `path`'s lock (BEGIN `how`) for `seconds` from the moment this
    yields (when the lock is held; yields time.monotonic() then)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, path, how, str(seconds)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "held"
        yield time.monotonic()
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def journal_mode(path: str, mode: str | None = None) -> str:
    """The file's journal mode (set to `mode` first, when given: leaving WAL mode needs every
    other connection closed, and the one the tables were made on is closed by the collector)."""
    gc.collect()
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        if mode is not None:
            conn.execute(f"PRAGMA journal_mode={mode}")
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0])
    finally:
        conn.close()


@pytest.mark.parametrize("how", ["IMMEDIATE", "EXCLUSIVE"])
def test_a_worker_waits_for_the_lock_another_process_holds_on_a_file_not_yet_in_wal_mode(
        queue: MakeQueue, how: str) -> None:
    # Changing the journal mode needs the file to itself, and SQLite answers "database is
    # locked" at once there, without its busy handler: the worker must wait out the holder
    # (a writer, IMMEDIATE; or one that keeps readers out too, EXCLUSIVE).
    q = queue("sqlite", Layout("lease"))
    assert journal_mode(q.target, "DELETE") == "delete"  # a file as a migration tool leaves it
    fill(q, 5)

    async def handler(job: Any) -> None:
        pass

    async def run(since: float) -> float:
        worker = Worker(q.mod.DESCRIPTOR, handler, database=q.target, workers=2, lease=30,
                        poll_interval=0.05, shutdown_timeout=2)
        await worker.start()
        waited = time.monotonic() - since
        try:
            started = time.monotonic()
            while unfinished(q) and time.monotonic() - started < 30:
                await asyncio.sleep(0.05)
        finally:
            await worker.shutdown()
        return waited

    with held(q.target, how, 1.0) as since:
        waited = asyncio.run(run(since))
    assert waited >= 0.8, f"started {waited:.2f} s after the lock was taken, before its release"
    assert unfinished(q) == 0
    assert journal_mode(q.target) == "wal"
    q.close()


@pytest.mark.parametrize("how", ["IMMEDIATE", "EXCLUSIVE"])
def test_a_lock_held_past_the_busy_timeout_fails_the_start_in_one_line(queue: MakeQueue,
                                                                       how: str) -> None:
    q = queue("sqlite", Layout("lease"))
    journal_mode(q.target, "DELETE")
    backend = SqliteBackend(q.mod.DESCRIPTOR, q.target, busy_timeout=0.5)

    async def start() -> None:
        await reach(backend, timeout=30, stopping=asyncio.Event(),
                    where={"worker": "w", "table": "jobs"})

    with held(q.target, how, 4.0) as since:
        with pytest.raises(ConnectFailed) as failed:
            asyncio.run(start())
        took = time.monotonic() - since
    assert 0.5 <= took < 3.5, f"failed after {took:.2f} s, against a busy timeout of 0.5 s"
    assert str(failed.value).splitlines() == [
        f"cannot connect to SQLite file {q.target}: database is locked (worker w, table jobs)"]
    assert journal_mode(q.target) == "delete"  # nothing changed
    q.close()


def test_a_worker_on_a_wal_file_does_not_wait_for_a_writer(queue: MakeQueue) -> None:
    # In WAL mode (kept in the file) there is nothing to change: a writer of another process
    # does not hold the start up.
    q = queue("sqlite", Layout("lease"))
    assert journal_mode(q.target) == "wal"
    backend = SqliteBackend(q.mod.DESCRIPTOR, q.target, busy_timeout=5)
    with held(q.target, "IMMEDIATE", 3.0) as since:
        asyncio.run(backend.probe())
        took = time.monotonic() - since
    assert took < 1.0, f"the connection waited {took:.2f} s for the writer"
    q.close()


def test_the_commit_watch_outlasts_a_first_read_the_lock_holder_refuses(
        queue: MakeQueue) -> None:
    # The watch reads without waiting (timeout 0): a read refused at its start is tried again on
    # the next tick, as every later one is, instead of ending the watch for good.
    q = queue("sqlite", Layout("lease"))
    journal_mode(q.target, "DELETE")  # readers are kept out while a writer commits
    woken = threading.Event()

    def wake_waiting() -> bool:
        woken.set()
        return True

    wakes = Wakes("w", None, lambda: None, lambda: None, wake_waiting,
                  lambda err, where: False, lambda pid: None)

    async def run(released: float) -> bool:
        watching = asyncio.create_task(watch(q.target, wakes))
        try:
            await asyncio.sleep(0.3)  # the watch's first reads, refused
            assert not watching.done(), watching.exception()
            while time.monotonic() < released:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)  # released: the watch has read the version again
            fill(q, 1)  # another connection commits
            for _ in range(100):
                if woken.is_set():
                    return True
                await asyncio.sleep(0.02)
            return False
        finally:
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)

    with held(q.target, "EXCLUSIVE", 1.0) as since:
        assert asyncio.run(run(since + 1.0)), "the commit woke no slot"
    q.close()
