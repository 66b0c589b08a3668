"""The advisory form on PostgreSQL runs its rounds on a session in autocommit: each read, lock,
take, settlement and unlock is one statement and one round trip, with no COMMIT of its own.
What users see must not change: every outcome lands, rows of one key never run at once, a
worker that ran dry holds no key, and a round that fails gives no key back to the pool."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
import time
from typing import Any

from dbcases import Layout, MakeQueue, keys_left_once_dry, pg_advisory_locks

from inboxgen import Job, Worker, retry_after
from inboxgen.runtime.forms.advisory import AutocommitAdvisory

JOBS = 60
ACCOUNTS = 4


def test_an_advisory_worker_settles_every_job_one_per_key_and_keeps_no_key(
        queue: MakeQueue) -> None:
    q = queue("postgres", Layout("advisory", group=True, dead="group"))
    conn = q.connect()
    due = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    q.mod.insert_many(conn, [q.new(account=f"a{i % ACCOUNTS}", retry_after=due)
                             for i in range(JOBS)])
    conn.commit()
    running: dict[str, int] = {}
    most = 0
    seen: list[Any] = []
    lock = threading.Lock()
    retried = q.ids()[0]

    def handler(job: Job[Any]) -> Any:
        nonlocal most
        account = job.row.account
        with lock:
            running[account] = running.get(account, 0) + 1
            most = max(most, running[account])
        time.sleep(0.002)
        with lock:
            running[account] -= 1
            seen.append(job.id)
        if job.id == retried and job.attempt == 1:
            return retry_after(0.05)
        return None

    worker = Worker(q.mod.DESCRIPTOR, handler, database=q.target, group="g", workers=4,
                    listen=False, poll_interval=0.05)
    assert isinstance(worker.form, AutocommitAdvisory)

    def settled(rows: list[dict[str, Any]]) -> bool:
        return all(r["processed_at"] is not None for r in rows)

    left = asyncio.run(keys_left_once_dry(worker, q.rows, settled,
                                          lambda: pg_advisory_locks(q.target)))
    assert left == 0  # running dry, the worker holds no key
    assert most == 1  # one job of an account at a time
    assert sorted(seen) == sorted([*q.ids(), retried])  # each once, the retried one twice
    assert worker.stats.acked == JOBS and worker.stats.retried == 1
