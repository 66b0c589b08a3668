"""Limits on row-lock and advisory tables ([flow] concurrency, and key and key_concurrency on the
advisory form), held by seats: session locks that a job in work holds. Worker processes of ten
slots never pass them; a holder that dies gives its seat up with its session, at once; a seat
taken outside the queue's workers holds a job back like one of theirs."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest
from dbcases import Layout, MakeQueue
from limits_util import (
    add,
    intervals,
    most_at_once,
    runs_per_account,
    settle,
    start_workers,
    stop_workers,
)

# (form, dialect, count_crashes): SQLite has no row lock, and serves an advisory table from one
# process. (MySQL's counted row lock unlocks every session lock of a round at once.)
SHAPES = [("row_lock", "postgres", False), ("row_lock", "postgres", True),
          ("row_lock", "mysql+pymysql", False), ("row_lock", "mysql+pymysql", True),
          ("advisory", "postgres", False), ("advisory", "mysql+pymysql", False),
          ("advisory", "sqlite", False)]


def layout(form: str, *, concurrency: int | None, key_concurrency: int | None = None,
           count_crashes: bool = False) -> Layout:
    # Every advisory job its own key: the limits, not the key, hold jobs of an account back.
    return Layout(form=form, processed=False, key="job-{id}", concurrency=concurrency,
                  key_concurrency=key_concurrency, count_crashes=count_crashes)


@pytest.mark.parametrize(("form", "dialect", "count_crashes"), SHAPES)
def test_worker_processes_never_pass_the_seats(queue: MakeQueue, tmp_path: Path, form: str,
                                               dialect: str, count_crashes: bool) -> None:
    """Forty slots (ten on SQLite) over five accounts, a queue limit of six (and two per
    account on the advisory form): at no instant are more than six jobs in work, or more than
    two of one account, and each limit is reached. Every job runs exactly once."""
    keyed = form == "advisory"
    q = queue(dialect, layout(form, concurrency=6, key_concurrency=2 if keyed else None,
                              count_crashes=count_crashes))
    logs = [tmp_path / f"w{n}.log" for n in range(1 if dialect == "sqlite" else 4)]
    # Jobs of 0.1 s: long beside a seat's round trips, so the slots' jobs overlap up to the
    # limits.
    runs, per_account = runs_per_account(q, logs, [f"acct-{n % 5}" for n in range(150)], 0.1)
    assert most_at_once(runs) == 6
    if keyed:
        assert max(most_at_once(r) for r in per_account.values()) == 2
    assert q.ids() == []


@pytest.mark.parametrize(("dialect", "count_crashes"), [
    ("postgres", False), ("postgres", True), ("mysql+pymysql", False), ("mysql+pymysql", True)])
def test_a_row_lock_batch_runs_under_one_seat(queue: MakeQueue, tmp_path: Path, dialect: str,
                                              count_crashes: bool) -> None:
    """Ten slots claiming batches of four under a queue limit of four: a slot's rows run one
    after another, so it holds one seat, and four jobs run at once (a slot holding a seat for
    each row of its batch would run the queue one job at a time)."""
    q = queue(dialect, layout("row_lock", concurrency=4, count_crashes=count_crashes))
    runs, _ = runs_per_account(q, [tmp_path / "w.log"], ["a"] * 80, 0.1, "--batch", "4")
    assert most_at_once(runs) == 4
    assert q.ids() == []


@pytest.mark.parametrize("dialect", ["postgres", "mysql+pymysql", "sqlite"])
def test_a_key_limit_holds_across_processes(queue: MakeQueue, tmp_path: Path,
                                            dialect: str) -> None:
    """An advisory table limited to two jobs of an account, three accounts, forty slots (ten
    on SQLite): the key's seats are the only limit, so six run at once, never three of one
    account."""
    q = queue(dialect, layout("advisory", concurrency=None, key_concurrency=2))
    logs = [tmp_path / f"w{n}.log" for n in range(1 if dialect == "sqlite" else 4)]
    runs, per_account = runs_per_account(q, logs, [f"acct-{n % 3}" for n in range(90)], 0.1)
    assert [most_at_once(r) for _, r in sorted(per_account.items())] == [2, 2, 2]
    assert most_at_once(runs) == 6


@pytest.mark.parametrize(("form", "dialect", "count_crashes"), [
    ("row_lock", "postgres", False), ("row_lock", "postgres", True),
    ("row_lock", "mysql+pymysql", True), ("advisory", "postgres", False),
    ("advisory", "mysql+pymysql", False)])
def test_a_killed_holder_gives_its_seat_up_at_once(queue: MakeQueue, tmp_path: Path, form: str,
                                                   dialect: str, count_crashes: bool) -> None:
    """A queue limited to one job in work: its holder is SIGKILLed mid-job; its session ends,
    so another process starts a job within a few polls, and runs every one, one at a time."""
    q = queue(dialect, layout(form, concurrency=1, count_crashes=count_crashes))
    ids = add(q, ["a", "b", "c"])
    (holder_log, other_log) = (tmp_path / "holder.log", tmp_path / "other.log")
    (holder,) = start_workers(q, [holder_log], "crash", "--no-listen")
    try:
        settle(lambda: holder_log.exists() and "start " in holder_log.read_text())
        (other,) = start_workers(q, [other_log], "run", "--no-listen", "--poll-interval",
                                 "0.05", "--workers", "4")
        try:
            settle(lambda: other_log.exists() and "ready " in other_log.read_text())
            time.sleep(1.0)  # the holder holds the seat: nothing starts
            assert "start " not in other_log.read_text()
            holder.send_signal(signal.SIGKILL)
            holder.wait(timeout=30)
            killed = time.monotonic()
            settle(lambda: other_log.read_text().count("done ") >= len(ids))
        finally:
            other.send_signal(signal.SIGTERM)
            _, err = other.communicate(timeout=60)
            assert other.returncode == 0, err.decode()[-2000:]
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    runs = intervals([other_log])
    assert len(runs) == len(ids)  # the killed job too: its row returned with the session
    assert min(start for start, _ in runs.values()) <= killed + 2.0
    assert most_at_once(list(runs.values())) == 1


@pytest.mark.parametrize(("form", "dialect", "count_crashes"), [
    ("row_lock", "postgres", False), ("row_lock", "postgres", True),
    ("row_lock", "mysql+pymysql", False), ("row_lock", "mysql+pymysql", True),
    ("advisory", "postgres", False), ("advisory", "mysql+pymysql", False)])
def test_processes_started_later_get_seats_a_busy_one_holds(
        queue: MakeQueue, tmp_path: Path, form: str, dialect: str, count_crashes: bool) -> None:
    """A process of ten slots holds all six seats of the queue, its claims full, when two more
    start (all polling once a second). A busy slot keeps its seat across its rounds, but gives
    it up to a process that holds two fewer or less: each of the later processes runs a fair
    part of the jobs, where they used to find every seat held at each poll and run none. (The
    drain lasts long enough, about 20 s, that the later processes' start, which takes seconds
    on a busy machine, is a small part of it: at 1,200 jobs one ran 98 once.)"""
    q = queue(dialect, layout(form, concurrency=6, count_crashes=count_crashes))
    ids = add(q, ["a"] * 2400)
    logs = [tmp_path / f"w{n}.log" for n in range(3)]
    args = ("run", "--workers", "10", "--job-seconds", "0.05", "--poll-interval", "1")
    children = start_workers(q, logs[:1], *args)
    try:
        settle(lambda: logs[0].exists() and logs[0].read_text().count("done ") >= 30)
        children += start_workers(q, logs[1:], *args)
        settle(lambda: sum(log.read_text().count("done ") for log in logs if log.exists())
               >= len(ids))
    finally:
        stop_workers(children)
    runs = [intervals([log]) for log in logs]
    assert sum(len(r) for r in runs) == len(ids)
    assert min(len(r) for r in runs[1:]) >= len(ids) // 12, [len(r) for r in runs]
    assert most_at_once([run for r in runs for run in r.values()]) <= 6
    assert q.ids() == []


@pytest.mark.parametrize("form", ["row_lock", "advisory"])
def test_an_idle_worker_holds_no_seat(queue: MakeQueue, form: str) -> None:
    """A slot keeps its seats across its rounds while they come back full (PostgreSQL), and
    gives them up when the queue runs dry: a worker left idle after its jobs holds none, so
    another process's job can start at once."""
    import asyncio

    import psycopg

    from inboxgen import Worker

    q = queue("postgres", layout(form, concurrency=1, count_crashes=form == "row_lock"))
    ids = add(q, ["a"] * 20)
    ran: list[Any] = []

    async def handler(job: Any) -> None:
        ran.append(job.id)

    worker = Worker(q.mod.DESCRIPTOR, handler, database=q.target, workers=2, poll_interval=0.05,
                    name="idle")
    seat = f"inboxgen seat:{q.mod.TABLE}#0"

    async def main() -> bool:
        await worker.start()
        try:
            deadline = time.monotonic() + 30
            while len(ran) < len(ids):
                assert time.monotonic() < deadline, len(ran)
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.5)  # idle, polling
            with psycopg.connect(q.target, autocommit=True) as other:
                (free,) = other.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))",
                                        (seat,)).fetchone()
            return bool(free)
        finally:
            await worker.shutdown()

    assert asyncio.run(main()), "the idle worker still holds the queue's seat"
