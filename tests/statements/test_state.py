"""state(conn, id=..., now=...): what became of one job, as its row says at `now`: ready,
scheduled, in work (under a live lease), finished (kept by processed_at) or dead (in the
dead-letter group or table), with its payload; None for a job the table does not keep."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from dbcases import LEASE, T0, Layout, MakeQueue, Queue, at, call

DIALECTS = ["postgres", "mysql", "sqlite"]


def state(q: Queue, conn: Any, row_id: int, now: dt.datetime = T0) -> Any:
    found = call(q.mod.state, conn, id=row_id, now=now)
    conn.commit()
    return found


def claimed(q: Queue, conn: Any, row_id: int) -> Any:
    row = q.claim_one(conn)
    conn.commit()
    assert q.id_of(row) == row_id
    return row


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_leased_job_is_seen_through_every_state(queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout(form="lease", processed=True, dead="table"))
    conn = q.connect()
    later = q.add(conn, retry_after=at(60), payload="later")
    assert (state(q, conn, later).state, state(q, conn, later).payload) == ("scheduled", "later")
    assert state(q, conn, later, now=at(61)).state == "ready"

    row_id = q.add(conn, retry_after=at(-10), payload="now")
    assert state(q, conn, row_id).state == "ready"
    row = claimed(q, conn, row_id)
    assert state(q, conn, row_id).state == "in_work"
    # The lease ran out: the job is ready again for any worker.
    assert state(q, conn, row_id, now=T0 + dt.timedelta(seconds=LEASE + 1)).state == "ready"
    assert q.settle("finish", conn, row)
    conn.commit()
    done = state(q, conn, row_id)
    assert (done.state, done.attempt, done.payload) == ("finished", 2, "now")
    assert done.finished_at is not None and done.due == at(-10)

    spent = q.add(conn, retry_after=at(-5))
    assert q.settle("dead_letter", conn, claimed(q, conn, spent))
    conn.commit()
    assert state(q, conn, spent).state == "dead"  # read from jobs_dead, which keeps the id
    assert state(q, conn, 10_000) is None
    listed = q.mod.dead_letters(conn, limit=10)
    conn.commit()
    assert [(d.id, d.state, d.due) for d in listed] == [(spent, "dead", at(-5))]


@pytest.mark.parametrize("dialect", ["postgres", "mysql"])
def test_a_row_locked_job_in_a_dead_letter_group(queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout(form="row_lock", group=True, processed=False, dead="group"))
    conn = q.connect()
    row_id = q.add(conn, retry_after=at(-10))
    row = q.claim_one(conn)
    # The row lock's holder is invisible to others: its job reads as ready until settled.
    other = q.connect()
    assert state(q, other, row_id).state == "ready"
    assert q.settle("dead_letter", conn, row)
    conn.commit()
    assert state(q, other, row_id).state == "dead"
    second = q.add(conn, retry_after=at(-5))
    assert q.settle("dead_letter", conn, q.claim_one(conn))
    conn.commit()
    # The newest first, and no more than asked for.
    assert [d.id for d in q.mod.dead_letters(other, limit=5)] == [second, row_id]
    assert [d.id for d in q.mod.dead_letters(other, limit=1)] == [second]
    other.commit()

    finished = q.add(conn, retry_after=at(-10))
    assert q.settle("finish", conn, q.claim_one(conn))
    conn.commit()
    assert state(q, other, finished) is None  # finishing deleted it: nothing is kept
