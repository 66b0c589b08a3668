"""A table with a `result` column keeps what each handler returned: the ack writes it (alone
where the module batches acks), state() returns it parsed; a value JSON cannot hold fails the
delivery, not the worker; on every claim form and dialect."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from dbcases import CLAIM_FORMS, Layout, MakeQueue
from semantics_util import fake_clock, serve_until

from inboxgen import Job, Worker, drop

pytestmark = pytest.mark.usefixtures("log_inboxgen")

JSON = {"postgres": "JSONB", "mysql": "JSON", "sqlite": "TEXT"}


def enqueue(q: Any, payloads: list[str]) -> list[Any]:
    """One job a payload, committed; their ids."""
    with q.db.transaction() as conn:
        return [q.mod.insert(conn, q.mod.NewRow(
            priority=0, retry_after=dt.datetime.now(dt.UTC), account=p, payload=p))
            for p in payloads]


def states_of(q: Any, ids: list[Any], now: dt.datetime) -> list[Any]:
    """state() of each job."""
    with q.db.transaction() as conn:
        return [q.mod.state(conn, id=i, now=now) for i in ids]


@pytest.mark.parametrize("batch", [1, 16])
@pytest.mark.parametrize(("dialect", "form"), CLAIM_FORMS)
def test_each_job_keeps_what_its_handler_returned(dialect: str, form: str, batch: int,
                                                  queue: MakeQueue) -> None:
    q = queue(dialect, Layout(form=form, result=JSON[dialect]))
    payloads = [f"job-{n}" for n in range(20)] + ["nothing", "dropped"]
    ids = enqueue(q, payloads)
    clock = fake_clock()

    def handle(job: Job[str]) -> Any:
        if job.payload == "nothing":
            return None
        if job.payload == "dropped":
            return drop()
        n = int(job.payload.split("-")[1])
        return {"sent": job.payload, "n": n, "tags": ["a", "é"], "ok": n % 2 == 0}

    worker = Worker(q.mod.DESCRIPTOR, handle, database=q.database, clock=clock, batch=batch)
    serve_until(worker, clock, lambda: worker.stats.acked + worker.stats.dropped == 22,
                max_seconds=60)
    states = states_of(q, ids, clock.now())
    assert [s.state for s in states] == ["finished"] * 22
    assert [s.result for s in states[:20]] == [
        {"sent": f"job-{n}", "n": n, "tags": ["a", "é"], "ok": n % 2 == 0} for n in range(20)]
    assert (states[20].result, states[21].result) == (None, None)
    assert worker.stats.retried == 0


@pytest.mark.parametrize("dialect", ["postgres", "mysql", "sqlite"])
def test_a_result_json_cannot_hold_fails_the_delivery_and_says_why(dialect: str,
                                                                   queue: MakeQueue) -> None:
    q = queue(dialect, Layout(result=JSON[dialect], error="TEXT"))
    (job_id,) = enqueue(q, ["ada"])
    clock = fake_clock()
    calls: list[int] = []

    def handle(job: Job[str]) -> Any:
        calls.append(1)
        return {"at": object()} if len(calls) == 1 else ["fine"]

    worker = Worker(q.mod.DESCRIPTOR, handle, database=q.database, clock=clock)
    serve_until(worker, clock, lambda: worker.stats.acked == 1, max_seconds=600)
    assert (worker.stats.retried, worker.stats.acked) == (1, 1)
    (done,) = states_of(q, [job_id], clock.now())
    assert (done.state, done.result) == ("finished", ["fine"])
    assert done.error.startswith("TypeError: the handler's result {'at': <object object at")
    assert "is not JSON" in done.error.splitlines()[0]


@pytest.mark.parametrize("dialect", ["postgres", "sqlite"])
def test_a_table_without_a_result_column_retries_a_handler_that_returns_a_value(
        dialect: str, queue: MakeQueue, caplog: pytest.LogCaptureFixture) -> None:
    q = queue(dialect, Layout(error="TEXT"))
    (job_id,) = enqueue(q, ["ada"])
    clock = fake_clock()
    calls: list[int] = []

    def handle(job: Job[str]) -> Any:
        calls.append(1)
        return 42 if len(calls) == 1 else None

    worker = Worker(q.mod.DESCRIPTOR, handle, database=q.database, clock=clock)
    serve_until(worker, clock, lambda: worker.stats.acked == 1, max_seconds=600)
    (done,) = states_of(q, [job_id], clock.now())
    assert done.error.splitlines()[0] == ("TypeError: the handler returned 42, not an outcome "
                                          "(the table has no result column to keep a value in)")


@pytest.mark.parametrize(("dialect", "column"), [
    ("postgres", "JSON"), ("postgres", "TEXT"), ("mysql", "LONGTEXT"), ("sqlite", "JSON")])
def test_a_result_column_of_any_type_the_role_takes_round_trips(dialect: str, column: str,
                                                                 queue: MakeQueue) -> None:
    q = queue(dialect, Layout(result=column, error="CHAR(200)"))
    ids = enqueue(q, ["ada", "bob"])
    clock = fake_clock()
    calls: list[str] = []

    def handle(job: Job[str]) -> Any:
        calls.append(job.payload)
        if job.payload == "bob" and calls.count("bob") == 1:
            raise ValueError("bob once")
        return {"to": job.payload, "n": [1, 2.5, None], "s": "ü \" '"}

    worker = Worker(q.mod.DESCRIPTOR, handle, database=q.database, clock=clock, batch=16)
    serve_until(worker, clock, lambda: worker.stats.acked == 2, max_seconds=600)
    ada, bob = states_of(q, ids, clock.now())
    assert ada.result == {"to": "ada", "n": [1, 2.5, None], "s": "ü \" '"}
    assert bob.result == {"to": "bob", "n": [1, 2.5, None], "s": "ü \" '"}
    assert ada.error is None and bob.error.startswith("ValueError: bob once")
