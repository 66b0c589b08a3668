"""Attempt counting: each claim counts its delivery once; with count_crashes the row-lock claim
counts in a transaction of its own, and keeps the rows it counted from other claims (PostgreSQL:
their keys' session locks; MySQL: it relocks them)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from dbcases import DIALECTS, SERVERS, T0, Layout, MakeQueue, Queue, at


def inboxgen_bug(reason: str) -> pytest.MarkDecorator:
    """A case that fails because of the generated SQL or functions: strict, so it turns red
    once inboxgen is fixed."""
    return pytest.mark.xfail(strict=True, reason=f"inboxgen bug: {reason}")


# Bugs the MySQL cases show (on MariaDB 10.11).
MYSQL_RELOCK_KEEPS_THE_ROW_LOCKED = inboxgen_bug(
    "MySQL RELOCK (SELECT ... WHERE id = %(id)s AND attempt = %(attempt)s + 1 FOR UPDATE SKIP "
    "LOCKED) whose attempt moved on returns nothing but keeps the row locked for the rest of "
    "the transaction (a const primary-key read: 'Impossible WHERE noticed after reading const "
    "tables'), so the claim that counted the row since cannot relock it until then; the worker "
    "holds the table's claim turn from the count to the relock, so no other claim counts the "
    "row in between")


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


# Row lock with count_crashes: CLAIM counts the attempt and is committed at once. On PostgreSQL
# the claim locks each counted row's key for the session, which keeps the row from other claims
# until RELEASE; on MySQL RELOCK (guarded by the attempt) locks the row again for the handler's
# transaction.


def counted_claim(q: Queue, conn: Any) -> Any:
    """CLAIM one row and commit, as the first step of a count_crashes claim."""
    (row,) = q.mod.claim(conn, group="g", now=T0)
    conn.commit()
    return row


def end_session(conn: Any, other: Any) -> None:
    """Close `conn` and wait until its server session has ended (the server lets go of its
    locks a moment after the client hangs up), as `other` sees."""
    pid = conn.info.backend_pid
    conn.close()
    deadline = time.monotonic() + 10
    while other.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchall():
        other.rollback()
        assert time.monotonic() < deadline, "the closed session never ended"
        time.sleep(0.01)
    other.rollback()


def hold(q: Queue, conn: Any, job: Any, row: Any) -> None:
    """What keeps a counted row the claimer's while its job runs: its key, still locked after
    the count's commit (PostgreSQL), or RELOCK (MySQL)."""
    if not hasattr(q.mod, "release"):
        assert q.mod.relock(conn, id=job, attempt=row.attempt) is not None


@pytest.mark.parametrize("dialect", SERVERS)
def test_count_crashes_claim_spends_the_attempt_even_when_the_handler_crashes(
        queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout("row_lock", group=True, count_crashes=True))
    conn = q.connect()
    job = q.add(conn)
    row = counted_claim(q, conn)
    assert (row.attempt, stored_attempt(q, job)) == (1, 2)
    hold(q, conn, job, row)
    # The handler took its process down: its transaction rolls back and its session ends.
    conn.rollback()
    other = q.connect()
    if hasattr(q.mod, "release"):
        end_session(conn, other)
    assert stored_attempt(q, job) == 2
    assert counted_claim(q, other).attempt == 2


@pytest.mark.parametrize("dialect", SERVERS)
def test_count_crashes_counted_row_is_skipped_by_other_claims(
        queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout("row_lock", group=True, count_crashes=True))
    holder, other = q.connect(), q.connect()
    job = q.add(holder)
    row = counted_claim(q, holder)
    hold(q, holder, job, row)
    assert q.mod.claim(other, group="g", now=T0, limit=10) == []
    other.rollback()
    assert q.mod.finish(holder, id=job, now=at(1))
    holder.commit()
    assert stored_attempt(q, job) == 2


def test_count_crashes_released_row_is_claimed_by_others_counted_once_more(
        queue: MakeQueue) -> None:
    q = queue("postgres", Layout("row_lock", group=True, count_crashes=True))
    holder, other = q.connect(), q.connect()
    job = q.add(holder)
    counted_claim(q, holder)
    # A retry leaves the row due; its key stays locked until RELEASE, after the commit.
    assert q.mod.claim(other, group="g", now=T0) == []
    other.rollback()
    q.mod.release(holder, id=[job])
    holder.commit()
    (again,) = q.mod.claim(other, group="g", now=T0)
    other.commit()
    assert (again.attempt, stored_attempt(q, job)) == (2, 3)


def test_count_crashes_claims_pass_over_counted_rows_to_the_free_ones(
        queue: MakeQueue) -> None:
    # Another claim does not come back empty while rows it cannot have lie ahead: it reads on.
    q = queue("postgres", Layout("row_lock", group=True, count_crashes=True))
    holder, other = q.connect(), q.connect()
    jobs = [q.add(holder) for _ in range(5)]
    held = q.mod.claim(holder, group="g", now=T0, limit=3)
    holder.commit()
    rest = q.mod.claim(other, group="g", now=T0, limit=3)
    other.commit()
    assert sorted(q.id_of(r) for r in held + rest) == sorted(jobs)


def test_count_crashes_closing_the_session_frees_its_counted_rows(queue: MakeQueue) -> None:
    q = queue("postgres", Layout("row_lock", group=True, count_crashes=True))
    holder, other = q.connect(), q.connect()
    job = q.add(holder)
    counted_claim(q, holder)
    end_session(holder, other)
    (again,) = q.mod.claim(other, group="g", now=T0)
    assert q.id_of(again) == job


@pytest.mark.parametrize("dialect", [
    pytest.param("mysql", marks=MYSQL_RELOCK_KEEPS_THE_ROW_LOCKED)])
def test_count_crashes_relock_fails_once_another_claim_counted_the_row_again(
        queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout("row_lock", group=True, count_crashes=True))
    slow, fast = q.connect(), q.connect()
    job = q.add(slow)
    first = counted_claim(q, slow)
    second = counted_claim(q, fast)  # before slow relocked: the row was free to count again
    assert (first.attempt, second.attempt) == (1, 2)
    assert q.mod.relock(slow, id=job, attempt=first.attempt) is None
    assert q.mod.relock(fast, id=job, attempt=second.attempt) is not None
    slow.rollback()
    fast.rollback()


@pytest.mark.parametrize("dialect", SERVERS)
def test_count_crashes_dead_letter_keeps_the_delivered_attempt(
        queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout("row_lock", group=True, count_crashes=True, dead="group"))
    conn = q.connect()
    job = q.add(conn)
    row = q.claim_one(conn)
    assert q.mod.retry_after(conn, id=job, retry_after=at(-1))
    conn.commit()
    row = q.claim_one(conn)
    assert row.attempt == 2
    assert q.mod.dead_letter(conn, id=job, attempt=row.attempt)
    conn.commit()
    stored = q.row(job)
    assert stored is not None and (stored["grp"], stored["attempt"]) == ("dead", 2)


def test_count_crashes_relock_reports_the_attempt_as_the_claim_did(queue: MakeQueue) -> None:
    q = queue("mysql", Layout("row_lock", group=True, count_crashes=True))
    conn = q.connect()
    job = q.add(conn)
    row = counted_claim(q, conn)
    relocked = q.mod.relock(conn, id=job, attempt=row.attempt)
    assert relocked == row
