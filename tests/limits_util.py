"""Claims of a [flow] limited queue as the runtime runs them, and rows to claim, for the tests
of limits and fair shares."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dbcases import Queue

UTC = dt.UTC
WORKER_SCRIPT = Path(__file__).resolve().parent / "process_worker.py"
REPO = Path(__file__).resolve().parents[1]


def claim(q: Queue, conn: Any, limit: int, lease: float = 30.0, **how: Any) -> list[Any]:
    """One claim of up to `limit` rows, committed, as the runtime runs it (MySQL: between the
    claim turn and its end); `how`: claim()'s other arguments (by_key=True)."""
    now = dt.datetime.now(UTC)
    until = now + dt.timedelta(seconds=lease)
    turned = hasattr(q.mod, "claim_turn")
    if turned:
        assert q.mod.claim_turn(conn) is True
        conn.commit()
    rows = q.mod.claim(conn, now=now, locked_until=until, limit=limit, **how)
    conn.commit()
    if turned:
        q.mod.claim_turn_end(conn)
        conn.commit()
    return list(rows)


def add(q: Queue, accounts: list[str]) -> list[int]:
    due = dt.datetime.now(UTC) - dt.timedelta(seconds=60)
    conn = q.connect()
    try:
        ids = [q.add(conn, retry_after=due, account=a) for a in accounts]
        conn.commit()
        return ids
    finally:
        conn.close()


def run_until(worker: Any, done: Callable[[], bool], timeout: float,
              say: Callable[[], object] = lambda: "") -> None:
    """Start `worker` (in this process), wait until `done()`, failing with `say()` after
    `timeout` seconds, and shut it down."""

    async def main() -> None:
        await worker.start()
        try:
            deadline = time.monotonic() + timeout
            while not done():
                assert time.monotonic() < deadline, say()
                await asyncio.sleep(0.02)
        finally:
            await worker.shutdown()

    asyncio.run(main())


# -- worker processes and their handlers' stamps -------------------------------------------


def intervals(logs: list[Path]) -> dict[str, tuple[float, float]]:
    """Each job's handler run, (start, done), on the machine's monotonic clock."""
    start: dict[str, float] = {}
    done: dict[str, float] = {}
    for log in logs:
        for line in log.read_text().splitlines():
            kind, *rest = line.split()
            if kind == "start":
                assert rest[0] not in start, f"job {rest[0]} started twice"
                start[rest[0]] = float(rest[2])
            elif kind == "done":
                done[rest[0]] = float(rest[1])
    return {job: (t, done.get(job, float("inf"))) for job, t in start.items()}


def most_at_once(runs: list[tuple[float, float]]) -> int:
    """The most runs in progress at any instant (a run ending as another starts is not two)."""
    events = sorted([(a, 1) for a, _ in runs] + [(b, -1) for _, b in runs],
                    key=lambda e: (e[0], e[1]))
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


def start_workers(q: Queue, logs: list[Path], mode: str,
                  *extra: str) -> list[subprocess.Popen[bytes]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    return [subprocess.Popen(
        [sys.executable, str(WORKER_SCRIPT), q.mod.__file__, q.database, mode, "--log", str(log),
         "--stamps", *extra],
        cwd=REPO, env=env, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for log in logs]


def stop_workers(children: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each worker process, and check that each stopped cleanly."""
    for child in children:
        child.send_signal(signal.SIGTERM)
    for child in children:
        _, err = child.communicate(timeout=60)
        assert child.returncode == 0, err.decode()[-2000:]


def settle(check: Any, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def runs_per_account(q: Queue, logs: list[Path], accounts: list[str], job_seconds: float,
                     *extra: str
                     ) -> tuple[list[tuple[float, float]], dict[str, list[tuple[float, float]]]]:
    """Enqueue a job of each of `accounts`, drain them with a worker process of ten slots per
    log (`extra`: more of its arguments), and return every job's handler run and the runs of
    each account."""
    ids = add(q, accounts)
    account_of = {str(i): a for i, a in zip(ids, accounts, strict=True)}
    children = start_workers(q, logs, "run", "--workers", "10", "--job-seconds",
                             str(job_seconds), "--no-listen", "--poll-interval", "0.02",
                             *extra)
    try:
        settle(lambda: all(log.exists() for log in logs)
               and sum(1 for log in logs for line in log.read_text().splitlines()
                       if line.startswith("done ")) >= len(ids))
    finally:
        stop_workers(children)
    runs = intervals(logs)
    assert sorted(runs) == sorted(account_of)
    per_account: dict[str, list[tuple[float, float]]] = {}
    for job, run in runs.items():
        per_account.setdefault(account_of[job], []).append(run)
    return list(runs.values()), per_account
