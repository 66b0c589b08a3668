"""A lease table with a `progress` column keeps what each handler reports with job.progress():
the next renewal of the job's lease writes it (no round trip of its own), state() returns it
while the job runs and after; requeue clears it; job.progress() on a table without the column
fails the delivery, saying why; on every dialect."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import pytest
from dbcases import Layout, MakeQueue
from semantics_util import fake_clock, serve_until

from inboxgen import Job, ProgressNotKept, Worker
from inboxgen.testing import run_until_idle

pytestmark = pytest.mark.usefixtures("log_inboxgen")

JSON = {"postgres": "JSONB", "mysql": "JSON", "sqlite": "TEXT"}


def _enqueue(q: Any, payloads: list[str]) -> list[Any]:
    with q.db.transaction() as conn:
        return [q.mod.insert(conn, q.mod.NewRow(
            priority=0, retry_after=dt.datetime.now(dt.UTC), account=p, payload=p))
            for p in payloads]


def _state(q: Any, job_id: Any, now: dt.datetime) -> Any:
    with q.db.transaction() as conn:
        return q.mod.state(conn, id=job_id, now=now)


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("dialect", ["postgres", "mysql", "sqlite"])
def test_progress_is_written_with_the_next_renewal_and_read_by_state(
        dialect: str, batch: int, queue: MakeQueue) -> None:
    q = queue(dialect, Layout(progress=JSON[dialect]))
    ids = _enqueue(q, ["a", "b", "c"])
    clock = fake_clock()
    seen: dict[str, list[Any]] = {}

    async def handle(job: Job[str]) -> None:
        job.progress(0.25, f"{job.payload}: a quarter")
        before = _state(q, job.id, clock.now())
        await clock.sleep(12)  # a 10 s lease: renewed at 5 s and 10 s
        during = _state(q, job.id, clock.now())
        job.progress(0.5)  # not written: no renewal comes before the ack
        seen[job.payload] = [before.progress, during.state, during.progress]

    worker = Worker(q.mod.DESCRIPTOR, handle, database=q.database, clock=clock, lease=10,
                    batch=batch, workers=3)
    asyncio.run(run_until_idle(worker, timeout=60))
    assert worker.stats.acked == 3 and worker.stats.renewed >= 3
    for p in "abc":
        # Nothing before the first renewal; then what the handler had reported.
        assert seen[p] == [None, "in_work", {"fraction": 0.25, "note": f"{p}: a quarter"}]
    done = [_state(q, i, clock.now()) for i in ids]
    assert [(s.state, s.progress["fraction"]) for s in done] == [("finished", 0.25)] * 3


@pytest.mark.parametrize("dialect", ["postgres", "sqlite"])
def test_progress_on_a_table_without_the_column_fails_the_delivery_saying_why(
        dialect: str, queue: MakeQueue) -> None:
    q = queue(dialect, Layout(error="TEXT"))
    (job_id,) = _enqueue(q, ["a"])
    clock = fake_clock()
    calls: list[int] = []

    def handle(job: Job[str]) -> None:
        calls.append(1)
        if len(calls) == 1:
            job.progress(0.5, "half")

    worker = Worker(q.mod.DESCRIPTOR, handle, database=q.database, clock=clock)
    serve_until(worker, clock, lambda: worker.stats.acked == 1, max_seconds=600)
    assert (worker.stats.retried, worker.stats.acked) == (1, 1)
    first = _state(q, job_id, clock.now()).error.splitlines()[0]
    assert first == ("inboxgen.errors.ProgressNotKept: job.progress() needs a table with a "
                     "progress column (role progress, on a lease): this one keeps none")


def test_a_fraction_outside_0_to_1_is_refused() -> None:
    job: Job[None] = Job(payload=None, id=1, attempt=1, row=None, group=None, headers={},
                         connection=None, worker="w", on_progress=lambda p: None)
    with pytest.raises(ValueError, match="progress is a fraction from 0 to 1, not 1.5"):
        job.progress(1.5)
    with pytest.raises(ProgressNotKept):
        Job(payload=None, id=1, attempt=1, row=None, group=None, headers={}, connection=None,
            worker="w").progress(0.5)
