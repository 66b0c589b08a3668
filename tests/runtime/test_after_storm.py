"""Jobs that wait for other jobs (`after`) under a SIGKILL storm: four worker processes, one of
them killed and started again every STORM_EVERY seconds while a batch of 1,000 jobs (and its
callback) and 33 three-level chains drain. Every handler writes its start and end, stamped with
the machine's monotonic clock, to its process's log (tests/process_worker.py).

What must hold: no job of a chain starts before the last end of the job it waits for (or, where
that one died, it is dead-lettered without starting), and the callback starts after the last
end of every job of its batch and reads each finished or dead. A killed delivery runs again
(the lease runs out, or the row lock's transaction rolls back), so a job may start more than
once, and one in work at three kills spends its attempts and dies; the callback is one row,
and its run is the last of them."""

from __future__ import annotations

import datetime as dt
import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from dbcases import Layout, MakeQueue

REPO = Path(__file__).resolve().parents[2]
WORKER_SCRIPT = REPO / "tests" / "process_worker.py"
PROCESSES = 4
STORM_EVERY = 0.25  # seconds between two kills
LEASE = 2  # seconds: a killed lease holder's jobs come back this soon
BATCH_SIZE = 1000
CHAINS = 33  # three jobs each: 99, with the batch's callback 1,100 jobs


def spawn(q: Any, folder: Path, n: int, form: str) -> subprocess.Popen[bytes]:
    log = folder / f"worker{n}.log"
    cmd = [sys.executable, str(WORKER_SCRIPT), str(q.mod.__file__), q.database, "run",
           "--log", str(log), "--group", "g", "--workers", "4", "--batch", "8",
           "--poll-interval", "0.05", "--job-seconds", "0.02", "--stamps", "--no-listen"]
    if form == "lease":
        cmd += ["--lease", str(LEASE)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "tests"), str(REPO),
                                         *filter(None, [env.get("PYTHONPATH")])])
    with open(folder / f"worker{n}.err", "ab") as err:
        return subprocess.Popen(cmd, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=err,
                                stderr=err)


def events(folder: Path) -> list[list[str]]:
    out = []
    for log in folder.glob("worker*.log"):
        out += [line.split() for line in log.read_text().splitlines() if line]
    return out


@pytest.mark.parametrize(("dialect", "form"), [("postgres", "lease"), ("postgres", "row_lock"),
                                               ("mysql", "lease"), ("mysql", "row_lock")])
def test_chains_and_a_batch_callback_hold_their_order_under_a_sigkill_storm(
        dialect: str, form: str, queue: MakeQueue, tmp_path: Path) -> None:
    q = queue(dialect, Layout(form=form, dead="table", after=True, group=True, processed=False))

    def new(name: str) -> Any:
        return q.mod.NewRow(grp="g", priority=0, retry_after=dt.datetime.now(dt.UTC),
                            account=name, payload=name)

    with q.db.transaction() as conn:
        batch, callback = q.mod.insert_batch(conn, [new(f"b{n}") for n in range(BATCH_SIZE)],
                                             then=new("callback"))
        chains = []
        for c in range(CHAINS):
            first = q.mod.insert(conn, new(f"c{c}-1"))
            second = q.mod.insert_after(conn, new(f"c{c}-2"), after=[first])
            chains.append((first, second, q.mod.insert_after(conn, new(f"c{c}-3"),
                                                             after=[second])))
    procs = [spawn(q, tmp_path, n, form) for n in range(PROCESSES)]
    spawned, kills = PROCESSES, 0
    rng = random.Random(7)
    deadline = time.monotonic() + 240
    try:
        while q.ids() and time.monotonic() < deadline:
            time.sleep(STORM_EVERY)
            n = rng.randrange(PROCESSES)
            procs[n].send_signal(signal.SIGKILL)
            procs[n].wait(10)
            kills += 1
            procs[n] = spawn(q, tmp_path, spawned, form)
            spawned += 1
        assert q.ids() == [], "the queue did not drain within 240 s"
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
    assert kills >= 4, kills  # the storm hit the drain
    starts: dict[str, list[float]] = defaultdict(list)
    ends: dict[str, list[float]] = defaultdict(list)
    read: list[list[str]] = []
    for e in events(tmp_path):
        if e[0] == "start":
            starts[e[1]].append(float(e[3]))
        elif e[0] == "done":
            ends[e[1]].append(float(e[2]))
        elif e[0] == "after":
            read.append(e[1:])
    # A job in work at three kills spent its attempts (max_attempts = 3): it is a dead letter,
    # and so is every job of its chain after it, without running.
    dead = set(q.ids("jobs_dead"))
    every = [*batch, callback, *(i for chain in chains for i in chain)]
    assert all(ends[str(i)] for i in every if i not in dead), "a job has no end"
    for chain in chains:
        for parent, child in zip(chain, chain[1:], strict=False):
            if parent in dead:
                assert child in dead and not starts[str(child)], (parent, child)
            elif starts[str(child)]:
                assert min(starts[str(child)]) > max(ends[str(parent)]), (parent, child)
    assert callback not in dead
    # (A dead one may never have started: claimed three times by processes killed before it.)
    last_of_batch = max(max(ends[str(i)] or starts[str(i)] or [0.0]) for i in batch)
    assert min(starts[str(callback)]) > last_of_batch
    # The callback read the whole batch settled, at each of its deliveries.
    died = len(dead & set(batch))
    assert [r for r in read if r[0] == str(callback)] and all(
        r[1:] == [str(BATCH_SIZE - died), str(died)] for r in read if r[0] == str(callback))
    with q.db.transaction() as conn:
        state = q.mod.after_state(conn, id=callback)
    assert len(state.finished) == BATCH_SIZE - died and len(state.dead) == died
    assert not state.waiting
