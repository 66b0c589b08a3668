"""Attempt counting: each claim counts its delivery once; with count_crashes the row-lock claim
counts in a transaction of its own, and keeps the rows it counted from other claims with a
session lock on each row's key (PostgreSQL's advisory locks, MySQL's GET_LOCK)."""

from __future__ import annotations

import time
from typing import Any

import pymysql
import pytest
from dbcases import DIALECTS, SERVERS, T0, Layout, MakeQueue, Queue, at, call


def stored_attempt(q: Queue, id: int) -> int:
    row = q.row(id)
    assert row is not None
    attempt: int = row["attempt"]
    return attempt


@pytest.mark.parametrize("dialect", SERVERS)
def test_row_lock_claim_does_not_count_the_attempt(queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout(form="row_lock"))
    conn = q.connect()
    job = q.add(conn)
    assert q.claim_one(conn).attempt == 1
    conn.rollback()  # the worker crashed
    assert stored_attempt(q, job) == 1
    assert q.claim_one(conn).attempt == 1


@pytest.mark.parametrize("dialect", SERVERS)
def test_row_lock_retry_and_retry_after_count_the_attempt(
        queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout(form="row_lock"))
    conn = q.connect()
    job = q.add(conn)
    row = q.claim_one(conn)
    assert q.settle("retry", conn, row)
    conn.commit()
    assert stored_attempt(q, job) == 2
    row = q.claim_one(conn)
    assert row.attempt == 2
    assert q.settle("retry_after", conn, row, retry_after=at(-1))
    conn.commit()
    assert stored_attempt(q, job) == 3
    assert q.claim_one(conn).attempt == 3


@pytest.mark.parametrize("dialect", DIALECTS)
def test_lease_claim_counts_the_attempt_and_reports_it_as_before_the_claim(
        queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout(form="lease"))
    conn = q.connect()
    job = q.add(conn)
    assert stored_attempt(q, job) == 1
    row = q.claim_one(conn)
    conn.commit()
    assert (row.attempt, stored_attempt(q, job)) == (1, 2)
    assert q.settle("retry", conn, row)  # retry does not count again
    conn.commit()
    assert stored_attempt(q, job) == 2
    row = q.claim_one(conn)
    conn.commit()
    assert (row.attempt, stored_attempt(q, job)) == (2, 3)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_advisory_take_counts_the_attempt_and_candidates_do_not(
        queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout(form="advisory"))
    conn = q.connect()
    job = q.add(conn)
    (cand,) = q.mod.candidates(conn, now=T0)
    assert (cand.attempt, stored_attempt(q, job)) == (1, 1)
    row = q.mod.take(conn, id=job, now=T0)
    conn.commit()
    assert (row.attempt, stored_attempt(q, job)) == (1, 2)
    assert q.mod.retry_after(conn, id=job, retry_after=at(-1))
    conn.commit()
    assert stored_attempt(q, job) == 2
    row = q.mod.take(conn, id=job, now=T0)
    conn.commit()
    assert (row.attempt, stored_attempt(q, job)) == (2, 3)


# Row lock with count_crashes: CLAIM counts the attempt and is committed at once; it locks each
# counted row's key for the session, which keeps the row from other claims until RELEASE.


def counted_claim(q: Queue, conn: Any) -> Any:
    """CLAIM one row and commit, as the first step of a count_crashes claim."""
    (row,) = q.mod.claim(conn, group="g", now=T0)
    conn.commit()
    return row


def end_session(conn: Any, other: Any) -> None:
    """Close `conn` and wait until its server session has ended (the server lets go of its
    locks a moment after the client hangs up), as `other` sees."""
    if isinstance(conn, pymysql.connections.Connection):
        session = conn.thread_id()
        sql = "SELECT 1 FROM information_schema.PROCESSLIST WHERE ID = %s"
    else:
        sql, session = "SELECT 1 FROM pg_stat_activity WHERE pid = %s", conn.info.backend_pid
    conn.close()
    deadline = time.monotonic() + 10
    while True:
        with other.cursor() as cur:
            cur.execute(sql, (session,))
            if not cur.fetchall():
                break
        other.rollback()
        assert time.monotonic() < deadline, "the closed session never ended"
        time.sleep(0.01)
    other.rollback()


@pytest.mark.parametrize("dialect", SERVERS)
def test_count_crashes_claim_spends_the_attempt_even_when_the_handler_crashes(
        queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout("row_lock", group=True, count_crashes=True))
    conn = q.connect()
    job = q.add(conn)
    row = counted_claim(q, conn)
    assert (row.attempt, stored_attempt(q, job)) == (1, 2)
    # The handler took its process down: its transaction rolls back and its session ends.
    conn.rollback()
    other = q.connect()
    end_session(conn, other)
    assert stored_attempt(q, job) == 2
    assert counted_claim(q, other).attempt == 2


@pytest.mark.parametrize("dialect", SERVERS)
def test_count_crashes_counted_row_is_skipped_by_other_claims(
        queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout("row_lock", group=True, count_crashes=True))
    holder, other = q.connect(), q.connect()
    job = q.add(holder)
    counted_claim(q, holder)
    assert q.mod.claim(other, group="g", now=T0, limit=10) == []
    other.rollback()
    assert q.mod.finish(holder, id=job, now=at(1))
    holder.commit()
    assert stored_attempt(q, job) == 2


@pytest.mark.parametrize("dialect", SERVERS)
def test_count_crashes_released_row_is_claimed_by_others_counted_once_more(
        queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout("row_lock", group=True, count_crashes=True))
    holder, other = q.connect(), q.connect()
    job = q.add(holder)
    counted_claim(q, holder)
    # A retry leaves the row due; its key stays locked until RELEASE, after the commit.
    assert q.mod.claim(other, group="g", now=T0) == []
    other.rollback()
    call(q.mod.release, holder, id=[job])
    holder.commit()
    (again,) = q.mod.claim(other, group="g", now=T0)
    other.commit()
    assert (again.attempt, stored_attempt(q, job)) == (2, 3)


@pytest.mark.parametrize("dialect", SERVERS)
def test_count_crashes_claims_pass_over_counted_rows_to_the_free_ones(
        queue: MakeQueue, dialect: str) -> None:
    # Another claim does not come back empty while rows it cannot have lie ahead: it reads on.
    q = queue(dialect, Layout("row_lock", group=True, count_crashes=True))
    holder, other = q.connect(), q.connect()
    jobs = [q.add(holder) for _ in range(5)]
    held = q.mod.claim(holder, group="g", now=T0, limit=3)
    holder.commit()
    rest = q.mod.claim(other, group="g", now=T0, limit=3)
    other.commit()
    assert sorted(q.id_of(r) for r in held + rest) == sorted(jobs)


@pytest.mark.parametrize("dialect", SERVERS)
def test_count_crashes_closing_the_session_frees_its_counted_rows(
        queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout("row_lock", group=True, count_crashes=True))
    holder, other = q.connect(), q.connect()
    job = q.add(holder)
    counted_claim(q, holder)
    end_session(holder, other)
    (again,) = q.mod.claim(other, group="g", now=T0)
    assert q.id_of(again) == job


@pytest.mark.parametrize("dialect", SERVERS)
def test_count_crashes_dead_letter_keeps_the_delivered_attempt(
        queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout("row_lock", group=True, count_crashes=True, dead="group"))
    conn = q.connect()
    job = q.add(conn)
    row = q.claim_one(conn)
    assert q.mod.retry_after(conn, id=job, retry_after=at(-1))
    conn.commit()
    call(q.mod.release, conn, id=[job])  # as the runtime does once the settlement committed
    row = q.claim_one(conn)
    assert row.attempt == 2
    assert q.mod.dead_letter(conn, id=job, attempt=row.attempt)
    conn.commit()
    stored = q.row(job)
    assert stored is not None and (stored["grp"], stored["attempt"]) == ("dead", 2)
