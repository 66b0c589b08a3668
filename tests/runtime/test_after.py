"""Jobs that wait for other jobs (`after`): insert_after() keeps a job out of every claim until
each job it waits for has finished; one that failed (a dead letter, or cancelled) dead-letters
it without running, or, enqueued with on_failure="run", it runs and reads what happened in
job.after; insert_batch() enqueues a batch and a callback that runs once, after all of it. On
the lease and row-lock forms of every dialect, dead letters to a group or a table."""

from __future__ import annotations

import datetime as dt
import inspect
import threading
from typing import Any

import pytest
from dbcases import Layout, MakeQueue
from semantics_util import fake_clock, serve_until

from inboxgen import Job, Worker, drop

pytestmark = pytest.mark.usefixtures("log_inboxgen")

FORMS = [pytest.param(d, f, dead, id=f"{d}-{f}-{dead}")
         for d, f in (("postgres", "lease"), ("postgres", "row_lock"), ("sqlite", "lease"),
                      ("mysql", "lease"), ("mysql", "row_lock"))
         for dead in ("group", "table")]


def layout(form: str, dead: str, **extra: Any) -> Layout:
    return Layout(form=form, dead=dead, after=True, error="TEXT", processed=dead == "group",
                  group=True, **extra)


def new(q: Any, name: str) -> Any:
    return q.mod.NewRow(grp="g", priority=0, retry_after=dt.datetime.now(dt.UTC), account=name,
                        payload=name)


class Ledger:
    """Each handler's start and end, in the order they happened (threads may share it)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.after: dict[str, Any] = {}
        self.lock = threading.Lock()

    def note(self, what: str, name: str) -> None:
        with self.lock:
            self.events.append((what, name))

    def at(self, what: str, name: str) -> int:
        return self.events.index((what, name))

    def ran(self) -> list[str]:
        return [name for what, name in self.events if what == "start"]


@pytest.mark.parametrize(("dialect", "form", "dead"), FORMS)
def test_a_chain_runs_in_order_and_other_jobs_do_not_wait(dialect: str, form: str, dead: str,
                                                          queue: MakeQueue) -> None:
    q = queue(dialect, layout(form, dead))
    ledger = Ledger()
    with q.db.transaction() as conn:
        # Three levels, enqueued children first in claim order: the claims must pass over them.
        first = q.mod.insert(conn, new(q, "a"))
        second = q.mod.insert_after(conn, new(q, "b"), after=[first])
        third = q.mod.insert_after(conn, new(q, "c"), after=[second, first, second])
        q.mod.insert_after(conn, new(q, "d"), after=[first])
        for n in range(8):
            q.mod.insert(conn, new(q, f"free-{n}"))

    with q.db.transaction() as conn:
        (counts,) = q.mod.status(conn, now=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=2))
    assert (counts.ready, counts.scheduled) == (9, 3)  # the three that wait count as scheduled

    def handle(job: Job[str]) -> None:
        ledger.note("start", job.payload)
        ledger.note("end", job.payload)

    clock = fake_clock()
    worker = Worker(q.mod.DESCRIPTOR, handle, database=q.database, clock=clock, group="g", batch=4,
                    workers=4)
    serve_until(worker, clock, lambda: len(ledger.ran()) == 12, max_seconds=120)
    assert sorted(ledger.ran()) == sorted(["a", "b", "c", "d", *(f"free-{n}" for n in range(8))])
    assert ledger.at("end", "a") < ledger.at("start", "b") < ledger.at("end", "b") \
        < ledger.at("start", "c")
    assert ledger.at("end", "a") < ledger.at("start", "d")
    assert worker.stats.acked == 12 and worker.stats.dead_lettered == 0
    with q.db.transaction() as conn:
        state = q.mod.after_state(conn, id=third)  # c waited for b and a, once each
    assert sorted(state.finished) == [first, second] and state.done and not state.dead


@pytest.mark.parametrize(("dialect", "form", "dead"), FORMS)
def test_a_failed_job_dead_letters_the_jobs_after_it_or_lets_them_run(
        dialect: str, form: str, dead: str, queue: MakeQueue) -> None:
    q = queue(dialect, layout(form, dead))
    ledger = Ledger()
    with q.db.transaction() as conn:
        bad = q.mod.insert(conn, new(q, "bad"))
        child = q.mod.insert_after(conn, new(q, "child"), after=[bad])
        q.mod.insert_after(conn, new(q, "grandchild"), after=[child])
        q.mod.insert_after(conn, new(q, "anyway"), after=[bad], on_failure="run")
        with pytest.raises(ValueError, match="on_failure"):
            q.mod.insert_after(conn, new(q, "typo"), after=[bad], on_failure="retry")

    def handle(job: Job[str]) -> None:
        ledger.note("start", job.payload)
        ledger.after[job.payload] = job.after
        if job.payload == "bad":
            raise RuntimeError("no such mailbox")

    clock = fake_clock()
    worker = Worker(q.mod.DESCRIPTOR, handle, database=q.database, clock=clock, group="g", batch=2,
                    workers=2)
    serve_until(worker, clock, lambda: worker.stats.dead_lettered == 3
                and "anyway" in ledger.ran(), max_seconds=3600)
    # "bad" ran its three attempts; the two after it never ran, "anyway" did, once.
    assert sorted(ledger.ran()) == ["anyway", "bad", "bad", "bad"]
    assert ledger.after["anyway"].dead == (bad,) and ledger.after["anyway"].blocking == ()
    assert ledger.after["bad"] is None  # it waited for nothing
    now = clock.now()
    with q.db.transaction() as conn:
        states = {name: q.mod.state(conn, id=bad + i, now=now)
                  for i, name in enumerate(("bad", "child", "grandchild", "anyway"))}
    finished = "finished" if dead == "group" else None  # kept as processed, or deleted
    assert {n: s.state if s is not None else None for n, s in states.items()} == {
        "bad": "dead", "child": "dead", "grandchild": "dead", "anyway": finished}
    assert states["child"].error == f"job {bad}, which it waits for, failed (a dead letter, " \
                                    f"or cancelled)"
    assert states["grandchild"].error == f"job {child}, which it waits for, failed (a dead " \
                                         f"letter, or cancelled)"


@pytest.mark.parametrize(("dialect", "form", "dead"), FORMS)
def test_a_batch_callback_runs_once_after_the_batch_and_reads_how_it_went(
        dialect: str, form: str, dead: str, queue: MakeQueue) -> None:
    q = queue(dialect, layout(form, dead))
    ledger = Ledger()
    with q.db.transaction() as conn:
        ids, callback = q.mod.insert_batch(conn, [new(q, f"part-{n}") for n in range(12)],
                                           then=new(q, "callback"))
        waiting = q.mod.after_state(conn, id=callback)
    assert waiting.waiting == tuple(sorted(ids)) and not waiting.done
    now = dt.datetime.now(dt.UTC)
    with q.db.transaction() as conn:
        kwargs = {"now": now} if "now" in inspect.signature(q.mod.cancel).parameters else {}
        assert q.mod.cancel(conn, id=ids[5], **kwargs)  # a cancelled part counts as dead
    with q.db.transaction() as conn:
        assert q.mod.state(conn, id=ids[5], now=now).state == "dead"

    def handle(job: Job[str]) -> Any:
        ledger.note("start", job.payload)
        if job.payload == "callback":
            ledger.after["callback"] = job.after
        if job.payload == "part-7":
            return drop()  # finished, as an ack
        if job.payload == "part-3":
            raise RuntimeError("bounced")
        return None

    clock = fake_clock()
    worker = Worker(q.mod.DESCRIPTOR, handle, database=q.database, clock=clock, group="g", batch=4,
                    workers=3)
    serve_until(worker, clock, lambda: "callback" in ledger.ran(), max_seconds=3600)
    ran = ledger.ran()
    assert ran.count("callback") == 1
    assert ran.index("callback") == len(ran) - 1  # after every part's last delivery
    state = ledger.after["callback"]
    assert sorted(state.dead) == sorted([ids[3], ids[5]])
    assert sorted(state.finished) == sorted(set(ids) - {ids[3], ids[5]})
    assert state.waiting == () and state.blocking == ()


@pytest.mark.parametrize(("dialect", "form", "dead"), FORMS)
def test_waiting_jobs_claimed_together_read_what_they_wait_for_together(
        dialect: str, form: str, dead: str, queue: MakeQueue) -> None:
    q = queue(dialect, layout(form, dead))
    ledger = Ledger()
    with q.db.transaction() as conn:
        good = q.mod.insert(conn, new(q, "good"))
        bad = q.mod.insert(conn, new(q, "bad"))
        stopped = [q.mod.insert_after(conn, new(q, f"stopped-{n}"), after=[good, bad])
                   for n in range(3)]
        anyway = [q.mod.insert_after(conn, new(q, f"anyway-{n}"), after=[bad, good],
                                     on_failure="run") for n in range(3)]

    def handle(job: Job[str]) -> None:
        ledger.note("start", job.payload)
        ledger.after[job.payload] = job.after
        if job.payload == "bad":
            raise RuntimeError("no such mailbox")

    clock = fake_clock()
    # One slot of eight: once "bad" is dead the six that wait are claimed in one batch.
    worker = Worker(q.mod.DESCRIPTOR, handle, database=q.database, clock=clock, group="g", batch=8,
                    workers=1)
    serve_until(worker, clock, lambda: worker.stats.dead_lettered == 4
                and all(f"anyway-{n}" in ledger.ran() for n in range(3)), max_seconds=3600)
    assert sorted(ledger.ran()) == sorted(["good", "bad", "bad", "bad",
                                           *(f"anyway-{n}" for n in range(3))])
    for n in range(3):
        after = ledger.after[f"anyway-{n}"]
        assert (after.finished, after.dead, after.waiting, after.blocking) == \
            ((good,), (bad,), (), ())
    now = clock.now()
    with q.db.transaction() as conn:
        for job in stopped:
            st = q.mod.state(conn, id=job, now=now)
            assert st.state == "dead" and st.error.startswith(f"job {bad}, which it waits for")
        # after_states() reads several jobs' at once, as after_state() reads each one's.
        ids = [*stopped, *anyway, good]
        assert q.mod.after_states(conn, ids=ids) == {
            i: q.mod.after_state(conn, id=i) for i in ids}
        assert q.mod.after_states(conn, ids=[]) == {}
