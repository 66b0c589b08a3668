"""Row lock on PostgreSQL without count_crashes runs pipelined: each slot keeps one connection
in pipeline mode, and a round's settlements and COMMIT travel with the next claim. What users
see must not change: every outcome of a batch lands, a broken round returns its rows, and a
drained queue's last batch is committed at once, not at the next claim."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from typing import Any

import psycopg
import pytest
from dbcases import MakeQueue, spec_toml
from semantics_util import fake_clock, messages, serve_until

from inboxgen import Job, Outcome, Worker, ack, drop, retry, retry_after
from inboxgen.runtime.forms.row_lock import PipelinedRowLock

DDL = """
CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    name TEXT NOT NULL DEFAULT 'work',
    attempt INTEGER NOT NULL DEFAULT 1,  -- row lock: the delivery's number
    retry_after TIMESTAMPTZ NOT NULL DEFAULT now(),
    payload JSONB NOT NULL
);
"""
SPEC = spec_toml("jobs", {"id": "id generated", "name": "group", "attempt": "attempt generated",
                          "retry_after": "retry_after", "payload": "payload"},
                 count_crashes=False, dead_letter={"group": "dead"}, runtime={"max_attempts": 3})


def _queue(queue: MakeQueue, kinds: list[str]) -> tuple[Any, str]:
    """The module and the database of a queue holding a job of each kind, in order."""
    q = queue("postgres", spec=SPEC, ddl=DDL)
    with psycopg.connect(q.target) as conn:
        q.mod.insert_many(conn, [q.mod.NewRow(name="work", payload={"kind": k, "n": i})
                                 for i, k in enumerate(kinds)])
    return q.mod, q.target


def _rows(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT id, name, attempt, payload->>'kind' FROM jobs "
                            "ORDER BY id").fetchall()


async def _serve_until_empty(worker: Worker, dsn: str) -> list[tuple[Any, ...]]:
    await worker.start()
    try:
        deadline = time.monotonic() + 20
        while (rows := await asyncio.to_thread(_rows, dsn)) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return rows
    finally:
        await worker.shutdown()


def test_the_worker_pipelines_row_lock_rounds(queue: MakeQueue) -> None:
    module, dsn = _queue(queue, ["ack"])
    assert isinstance(Worker(module.DESCRIPTOR, lambda job: None, database=dsn,
                             group="work").form, PipelinedRowLock)
    assert not isinstance(Worker(module.DESCRIPTOR, lambda job: None, database=dsn,
                                 group="work", transactional=True).form, PipelinedRowLock)


def test_every_outcome_of_one_batch_lands(queue: MakeQueue) -> None:
    kinds = ["ack", "drop", "retry", "later", "raise", "spent", "ack", "ack"]
    module, dsn = _queue(queue, kinds)
    clock = fake_clock()
    seen: list[tuple[str, int | None]] = []

    async def handler(job: Job[Any]) -> Outcome | None:
        kind = job.payload["kind"]
        seen.append((kind, job.attempt))
        if kind == "drop":
            return drop()
        if kind == "retry" and job.attempt == 1:
            return retry()
        if kind == "later" and job.attempt == 1:
            return retry_after(dt.timedelta(minutes=10))
        if kind == "raise" and job.attempt == 1:
            raise RuntimeError("flaky")
        if kind == "spent":
            raise RuntimeError("never works")
        return ack()

    worker = Worker(module.DESCRIPTOR, handler, database=dsn, group="work", batch=8,
                    workers=1, clock=clock, listen=False)

    # Fake minutes pass until the delayed retries have run
    serve_until(worker, clock, lambda: len(seen) >= 13, max_seconds=3600, step=30)

    # The first round held all eight rows; each outcome landed with the next round trip.
    assert seen[:8] == [(k, 1) for k in kinds]
    assert sorted(seen[8:]) == sorted([("later", 2), ("raise", 2), ("retry", 2),
                                       ("spent", 2), ("spent", 3)])
    # Finished rows are deleted; the spent one is in the dead-letter group with 3 attempts.
    assert _rows(dsn) == [(6, "dead", 3, "spent")]
    assert (worker.stats.acked, worker.stats.dropped, worker.stats.dead_lettered) == (6, 1, 1)


def test_a_round_lost_with_its_connection_returns_its_rows(
        queue: MakeQueue, caplog: pytest.LogCaptureFixture) -> None:
    module, dsn = _queue(queue, ["ack"] * 12)
    delivered: list[int] = []
    killed = False

    def handler(job: Job[Any]) -> None:
        nonlocal killed
        delivered.append(job.payload["n"])
        if len(delivered) == 4 and not killed:
            # The worker's session goes, with the round whose settlements are queued: the one
            # holding the claim's row locks (SELECT ... FOR UPDATE takes RowShareLock).
            killed = True
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("SELECT pg_terminate_backend(pid) FROM pg_locks WHERE relation = "
                             "'jobs'::regclass AND mode = 'RowShareLock' "
                             "AND pid <> pg_backend_pid()")

    worker = Worker(module.DESCRIPTOR, handler, database=dsn, group="work", batch=4,
                    workers=1, listen=False, poll_interval=0.05)
    with caplog.at_level(logging.WARNING, logger="inboxgen"):
        assert asyncio.run(_serve_until_empty(worker, dsn)) == []  # nothing lost

    # The broken round's four rows were not settled: they ran again; the rest ran once.
    assert sorted(delivered) == sorted([*range(12), *delivered[:4]])
    # One line for the lost connection, with the settlements it took along.
    assert sum("was lost" in m and "new ones work" in m
               for m in messages(caplog.records)) == 1


def test_a_drained_queue_commits_its_last_batch_at_once(queue: MakeQueue) -> None:
    module, dsn = _queue(queue, ["ack"] * 3)
    done = 0

    async def handler(job: Job[Any]) -> None:
        nonlocal done
        done += 1

    async def main() -> list[tuple[Any, ...]]:
        # An hour's poll interval: the next claim is an hour away, the commit must not be.
        worker = Worker(module.DESCRIPTOR, handler, database=dsn, group="work", batch=16,
                        workers=1, listen=False, poll_interval=3600)
        await worker.start()
        try:
            deadline = time.monotonic() + 10
            rows = _rows(dsn)
            while (done < 3 or rows) and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
                rows = await asyncio.to_thread(_rows, dsn)
            return rows
        finally:
            await worker.shutdown()

    assert asyncio.run(main()) == []
    assert done == 3


def _deletes_reported(dsn: str) -> int:
    """The table's deletes as the statistics autovacuum reads show them."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT n_tup_del FROM pg_stat_user_tables "
                           "WHERE relid = 'jobs'::regclass").fetchone()
    return int(row[0]) if row else 0


@pytest.mark.parametrize("count_crashes", [False, True])
def test_a_busy_worker_reports_its_deletes_for_autovacuum(
        queue: MakeQueue, count_crashes: bool) -> None:
    """PostgreSQL reports a session's table statistics, which autovacuum decides on, only while
    the session is idle outside a transaction. A pipelined round's COMMIT is followed by the
    next BEGIN, so a worker that never ran out of jobs never reported a finished row, autovacuum
    never ran, and claims slowed as they read past ever more dead index entries."""
    spec = SPEC.replace("count_crashes = false", f"count_crashes = {str(count_crashes).lower()}")
    q = queue("postgres", spec=spec, ddl=DDL)
    total = 3000
    with psycopg.connect(q.target) as conn:
        q.mod.insert_many(conn, [q.mod.NewRow(name="work", payload={"kind": "ack", "n": i})
                                 for i in range(total)])

    def handler(job: Job[Any]) -> None:
        time.sleep(0.002)  # a drain of a few seconds

    worker = Worker(q.mod.DESCRIPTOR, handler, database=q.target, group="work", workers=2,
                    listen=False)

    async def watch() -> tuple[int, int]:
        """(deletes reported, jobs left) once a report came or the queue was nearly empty."""
        await worker.start()
        try:
            while True:
                left = len(await asyncio.to_thread(_rows, q.target))
                reported = await asyncio.to_thread(_deletes_reported, q.target)
                if reported or left < total // 10:
                    return reported, left
                await asyncio.sleep(0.1)
        finally:
            await worker.shutdown()

    reported, left = asyncio.run(watch())
    assert reported > 0, f"no delete reported with {left} of {total} jobs left"
    assert left >= total // 10
