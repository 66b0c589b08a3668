"""A table with an `error` column keeps why its jobs failed: each failed attempt writes the
exception's type, message and last frames in the statement that settles it, the dead letter
carries it, state() and dead_letters() return it, a retry the handler asks for keeps it, and
requeue clears it; on every claim form and dialect."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from dbcases import CLAIM_FORMS, Layout, MakeQueue, spec_toml, typed
from semantics_util import fake_clock, serve_until

from inboxgen import Job, Worker, retry_after

pytestmark = pytest.mark.usefixtures("log_inboxgen")

def _enqueue(q: Any, *accounts: str) -> list[Any]:
    ids = []
    with q.db.transaction() as conn:
        for account in accounts:
            ids.append(q.mod.insert(conn, q.mod.NewRow(
                priority=0, retry_after=dt.datetime.now(dt.UTC), account=account,
                payload=account)))
    return ids


def _state(q: Any, job_id: Any, now: dt.datetime) -> Any:
    with q.db.transaction() as conn:
        return q.mod.state(conn, id=job_id, now=now)


class AddressError(Exception):
    pass


@pytest.mark.parametrize(("dialect", "form"), CLAIM_FORMS)
def test_a_failed_attempt_is_written_down_and_kept_after_the_job_succeeds(
        dialect: str, form: str, queue: MakeQueue) -> None:
    q = queue(dialect, Layout(form=form, error="TEXT", processed=form != "advisory"))
    (job_id,) = _enqueue(q, "ada")
    clock = fake_clock()
    seen: list[Any] = []

    def send(job: Job[str]) -> None:
        seen.append(job.attempt)
        if len(seen) == 1:
            raise AddressError(f"no mailbox for {job.payload}")

    worker = Worker(q.mod.DESCRIPTOR, send, database=q.database, clock=clock)
    serve_until(worker, clock, lambda: len(seen) == 1, max_seconds=60)
    failed = _state(q, job_id, clock.now() + dt.timedelta(hours=1))
    assert failed is not None and failed.state == "ready"
    first, *frames = failed.error.splitlines()
    # The type and message first, then where it was raised: the handler's own line.
    assert first.endswith("test_errors.AddressError: no mailbox for ada")
    assert any("test_errors.py" in f and "in send" in f for f in frames), failed.error
    assert not any("inboxgen/runtime" in f for f in frames), failed.error

    worker = Worker(q.mod.DESCRIPTOR, send, database=q.database, clock=clock)
    serve_until(worker, clock, lambda: len(seen) == 2, max_seconds=600)
    done = _state(q, job_id, clock.now())
    if form == "advisory":  # finished rows are deleted there
        assert done is None
    else:
        assert done.state == "finished"
        assert done.error.splitlines()[0] == first


@pytest.mark.parametrize("dead", ["group", "table"])
@pytest.mark.parametrize(("dialect", "form"), CLAIM_FORMS)
def test_a_dead_letter_says_why_it_died_and_requeue_clears_it(
        dialect: str, form: str, dead: str, queue: MakeQueue) -> None:
    q = queue(dialect, Layout(form=form, error="TEXT", dead=dead, group=dead == "group"))
    group = {"group": "mail"} if dead == "group" else {}
    with q.db.transaction() as conn:
        job_id = q.mod.insert(conn, q.mod.NewRow(
            **({q.group_attr: "mail"} if dead == "group" else {}), priority=0,
            retry_after=dt.datetime.now(dt.UTC), account="ada", payload="ada"))
    clock = fake_clock()
    attempts: list[Any] = []

    def send(job: Job[str]) -> None:
        attempts.append(job.attempt)
        raise ConnectionError(f"smtp down ({len(attempts)})")

    worker = Worker(q.mod.DESCRIPTOR, send, database=q.database, clock=clock, max_attempts=3,
                    **group)
    serve_until(worker, clock, lambda: worker.stats.dead_lettered == 1, max_seconds=3600)
    assert len(attempts) == 3
    dead_job = _state(q, job_id, clock.now())
    assert dead_job.state == "dead"
    assert dead_job.error.splitlines()[0] == "ConnectionError: smtp down (3)"
    with q.db.transaction() as conn:
        listed = q.mod.dead_letters(conn, limit=10)
    assert [(j.id, j.error.splitlines()[0]) for j in listed] == [
        (job_id, "ConnectionError: smtp down (3)")]

    with q.db.transaction() as conn:
        args: dict[str, Any] = {"to_group": "mail"} if dead == "group" else {}
        assert q.mod.requeue(conn, now=clock.now(), reset_attempt=True, **args) == 1
    back = _state(q, job_id, clock.now())
    assert (back.state, back.error) == ("ready", None)


@pytest.mark.parametrize("dialect", ["postgres", "mysql", "sqlite"])
def test_a_retry_the_handler_asks_for_keeps_the_last_failure(dialect: str,
                                                             queue: MakeQueue) -> None:
    q = queue(dialect, Layout(error="TEXT"))
    (job_id,) = _enqueue(q, "ada")
    clock = fake_clock()
    calls: list[int] = []

    def send(job: Job[str]) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("first try failed")
        return retry_after(30)  # not a failure: the row keeps the last one's error

    worker = Worker(q.mod.DESCRIPTOR, send, database=q.database, clock=clock)
    serve_until(worker, clock, lambda: len(calls) == 2, max_seconds=600)
    assert _state(q, job_id, clock.now()).error.startswith("ValueError: first try failed")


@pytest.mark.parametrize(("dialect", "column", "keeps"), [
    ("postgres", "VARCHAR(120)", 120), ("mysql", "VARCHAR(120)", 120),
    ("mysql", "TINYTEXT", 63), ("sqlite", "TEXT", 2000), ("postgres", "TEXT", 2000)])
def test_a_long_failure_is_cut_to_what_the_column_holds(dialect: str, column: str, keeps: int,
                                                         queue: MakeQueue) -> None:
    q = queue(dialect, Layout(error=column, dead="table"))
    (job_id,) = _enqueue(q, "ada")
    clock = fake_clock()

    def send(job: Job[str]) -> None:
        raise RuntimeError("a NUL \x00 then " + "x" * 5000)

    worker = Worker(q.mod.DESCRIPTOR, send, database=q.database, clock=clock, max_attempts=1)
    serve_until(worker, clock, lambda: worker.stats.dead_lettered == 1, max_seconds=60)
    error = _state(q, job_id, clock.now()).error
    assert error.startswith("RuntimeError: a NUL \\x00 then xxx")  # PostgreSQL's text has no NUL
    if keeps < 2000:  # the column's length cuts the message
        assert len(error) == keeps and error.endswith("...")
    else:  # the message gives way to the frames
        first, *frames = error.splitlines()
        assert len(first) == 1000 and first.endswith("...")
        assert "in send" in frames[0] and len(error) < keeps


_POISON_SPEC = spec_toml("jobs", {"id": "id generated", "attempt": "attempt generated",
                                  "locked_until": "locked_until", "last_error": "error",
                                  "payload": "payload json"},
                         runtime={"max_attempts": 3}, dead_letter={"table": "jobs_dead"})
_POISON_DDL = """
    CREATE TABLE jobs (id {id}, attempt INTEGER NOT NULL DEFAULT 1, locked_until {lease},
                       last_error TEXT, payload TEXT NOT NULL);
    CREATE TABLE jobs_dead (id BIGINT PRIMARY KEY, attempt INTEGER NOT NULL,
                            locked_until {lease}, last_error TEXT, payload TEXT NOT NULL);
"""


@pytest.mark.parametrize("dialect", ["postgres", "mysql", "sqlite"])
def test_a_payload_that_does_not_decode_says_so_in_its_dead_letter(dialect: str,
                                                                   queue: MakeQueue) -> None:
    q = queue(dialect, spec=_POISON_SPEC, ddl=typed(_POISON_DDL, dialect))
    with q.db.transaction() as conn:
        q.db.execute(conn, f"INSERT INTO jobs (payload) VALUES ({q.db.p})", ("{not json",))
    clock = fake_clock()
    worker = Worker(q.mod.DESCRIPTOR, lambda job: None, database=q.database, clock=clock)
    serve_until(worker, clock, lambda: worker.stats.dead_lettered == 1, max_seconds=60)
    (dead,) = q.db.rows("SELECT last_error FROM jobs_dead")
    assert dead[0].startswith("the payload does not decode: "), dead
