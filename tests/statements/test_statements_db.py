"""Every generated statement, run on real databases: PostgreSQL (psycopg 3), MariaDB (PyMySQL) and
SQLite files.

The tests drive the generated functions the way a worker does (claim, settle, commit) and look at
the table from a fresh connection, as another process would. Time is explicit (`now` is T0 plus
some seconds); nothing waits for the clock. Helpers live in dbcases.py.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pymysql
import pymysql.cursors
import pytest
from dbcases import (
    LEASE,
    T0,
    Layout,
    MakeQueue,
    Queue,
    at,
    call,
    executed,
    sent,
    tour,
)

from inboxgen.errors import CheckFailed


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
CLAIM_FORMS = [
    pytest.param("postgres", "row_lock", id="postgres-row_lock"),
    pytest.param("postgres", "lease", id="postgres-lease"),
    pytest.param("sqlite", "lease", id="sqlite-lease"),
    pytest.param("postgres", "advisory", id="postgres-advisory"),
    pytest.param("sqlite", "advisory", id="sqlite-advisory"),
    pytest.param("mysql", "row_lock", id="mysql-row_lock"),
    pytest.param("mysql", "lease", id="mysql-lease"),
    pytest.param("mysql", "advisory", id="mysql-advisory"),
]
DIALECTS = ["postgres", "sqlite", "mysql"]
SERVERS = ["postgres", "mysql"]  # row locks and session locks (SQLite has neither)
FIFO_FORMS = [
    pytest.param("postgres", "lease", id="postgres-lease"),
    pytest.param("sqlite", "lease", id="sqlite-lease"),
    pytest.param("postgres", "row_lock", id="postgres-row_lock"),
    pytest.param("mysql", "lease", id="mysql-lease"),
    pytest.param("mysql", "row_lock", id="mysql-row_lock"),
]


LEDGERS = ["postgres", "mysql"]  # the ledger example on PostgreSQL, its twin on MySQL


def json_value(value: Any) -> Any:
    """A JSON column as read: PostgreSQL's jsonb is decoded already, MySQL's JSON is text."""
    return json.loads(value) if isinstance(value, str) else value


def commit_claim(q: Queue, conn: Any) -> None:
    """Lease and advisory claims are committed at once; a row lock claim stays open."""
    if q.form != "row_lock":
        conn.commit()


def finish(q: Queue, conn: Any, row: Any) -> None:
    """Ack a claimed row and commit (releasing an advisory key afterwards)."""
    assert q.settle("finish", conn, row)
    conn.commit()
    q.release(conn, row)


# -- 1. Claim order and filters ------------------------------------------------------------------

ORDER_ROWS = [  # payload, priority, due (seconds from T0); inserted in this order
    ("p1-due-10", 1, -10),
    ("p0-due-5-first", 0, -5),
    ("p0-due-20", 0, -20),
    ("p1-due-20", 1, -20),
    ("p0-due-5-second", 0, -5),
]
CLAIM_ORDER = ["p0-due-20", "p0-due-5-first", "p0-due-5-second", "p1-due-20", "p1-due-10"]


def add_order_rows(q: Queue, conn: Any) -> None:
    for payload, priority, due in ORDER_ROWS:
        q.add(conn, payload=payload, priority=priority, retry_after=at(due))


@pytest.mark.parametrize(("dialect", "form"), CLAIM_FORMS)
def test_claims_one_at_a_time_follow_priority_then_retry_after_then_id(
        queue: MakeQueue, dialect: str, form: str) -> None:
    q = queue(dialect, Layout(form=form))
    conn = q.connect()
    add_order_rows(q, conn)
    order = []
    while rows := q.claim(conn, limit=1):
        order.append(rows[0].payload)
        commit_claim(q, conn)
        finish(q, conn, rows[0])
    assert order == CLAIM_ORDER


@pytest.mark.parametrize(("dialect", "form"), CLAIM_FORMS)
def test_batch_claim_takes_the_first_rows_in_claim_order(
        queue: MakeQueue, dialect: str, form: str) -> None:
    q = queue(dialect, Layout(form=form))
    conn = q.connect()
    add_order_rows(q, conn)
    rows = q.claim(conn, limit=3)
    assert [r.payload for r in rows] == CLAIM_ORDER[:3]


@pytest.mark.parametrize(("dialect", "form"), CLAIM_FORMS)
def test_claim_skips_rows_not_yet_due_until_their_time(
        queue: MakeQueue, dialect: str, form: str) -> None:
    q = queue(dialect, Layout(form=form))
    conn = q.connect()
    later = q.add(conn, retry_after=at(60), priority=0)
    due = q.add(conn, retry_after=at(-1), priority=5)
    rows = q.claim(conn, now=T0, limit=10)
    assert [q.id_of(r) for r in rows] == [due]
    commit_claim(q, conn)
    finish(q, conn, rows[0])
    assert q.claim(conn, now=at(59), limit=10) == []
    conn.rollback()
    assert [q.id_of(r) for r in q.claim(conn, now=at(60), limit=10)] == [later]


@pytest.mark.parametrize(("dialect", "form"), CLAIM_FORMS)
def test_claim_skips_processed_rows_which_are_kept(
        queue: MakeQueue, dialect: str, form: str) -> None:
    q = queue(dialect, Layout(form=form, processed=True))
    conn = q.connect()
    first = q.add(conn)
    second = q.add(conn)
    row = q.claim_one(conn)
    commit_claim(q, conn)
    assert q.settle("finish", conn, row, now=at(5))
    conn.commit()
    q.release(conn, row)

    assert [q.id_of(r) for r in q.claim(conn, now=at(10), limit=10)] == [second]
    kept = q.row(first)
    assert kept is not None and kept["processed_at"] == at(5)


@pytest.mark.parametrize(("dialect", "form"), CLAIM_FORMS)
def test_finish_deletes_the_row_when_there_is_no_processed_at(
        queue: MakeQueue, dialect: str, form: str) -> None:
    q = queue(dialect, Layout(form=form, processed=False))
    conn = q.connect()
    first = q.add(conn)
    second = q.add(conn)
    row = q.claim_one(conn)
    assert q.id_of(row) == first
    commit_claim(q, conn)
    finish(q, conn, row)
    assert q.ids() == [second]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_lease_claim_skips_a_live_lease_and_takes_an_expired_one(
        queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout(form="lease"))
    conn = q.connect()
    job = q.add(conn)
    q.claim_one(conn, now=T0, until=at(30))
    conn.commit()
    assert q.claim(conn, now=at(29), limit=10) == []
    conn.commit()
    again = q.claim_one(conn, now=at(30), until=at(60))
    assert (q.id_of(again), again.attempt, again.locked_until) == (job, 2, at(60))


def test_reports_example_returns_the_row_whose_lease_ran_out_not_the_live_one(
        queue: MakeQueue) -> None:
    q = queue("sqlite", "reports")
    m = q.mod
    conn = q.connect()
    m.insert_many(conn, [m.NewRow(payload=b"stale"), m.NewRow(payload=b"live")])
    conn.commit()
    (stale,) = m.claim(conn, now=T0, locked_until=at(60))
    (live,) = m.claim(conn, now=at(50), locked_until=at(110))
    conn.commit()
    back = m.claim(conn, now=at(60), locked_until=at(120), limit=10)
    assert [r.payload for r in back] == [b"stale"]
    assert back[0].id == stale.id != live.id


def plan_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The nodes of an EXPLAIN (FORMAT JSON) plan, leaving out InitPlans (run once, before)."""
    yield plan
    for child in plan.get("Plans", ()):
        if child.get("Parent Relationship") != "InitPlan":
            yield from plan_nodes(child)


@pytest.mark.parametrize("layout", [
    pytest.param(Layout(form="lease"), id="lease"),
    pytest.param(Layout(form="row_lock", count_crashes=True), id="row_lock-count_crashes"),
])
def test_postgres_claim_of_many_rows_finds_them_by_index_not_by_reading_the_whole_table(
        queue: MakeQueue, layout: Layout) -> None:
    """A lease worker claims for all of its slots in one statement. As `id IN (subquery)` the
    planner made that a hash join over a scan of the whole table once the LIMIT was large
    against the table (7 ms for 160 rows of 40,000 here); the picked ids as an array are each
    found by index, however many."""
    q = queue("postgres", layout)
    conn = q.connect()
    q.mod.insert_many(conn, [q.new() for _ in range(5000)])
    conn.execute(f"ANALYZE {q.table_sql()}")
    conn.commit()
    args = {"now": T0, "limit": 500, "locked_until": T0 + dt.timedelta(seconds=LEASE)}
    cur = conn.execute("EXPLAIN (FORMAT JSON) " + q.mod.CLAIM,
                       {k: args.get(k) for k in q.mod.DESCRIPTOR.statement_params["CLAIM"]})
    ((explained,),) = cur.fetchall()
    scans = [n for n in plan_nodes(explained[0]["Plan"]) if n["Node Type"] == "Seq Scan"]
    assert scans == []
    assert len(q.claim(conn, limit=500)) == 500


# -- 2. Concurrency ------------------------------------------------------------------------------


@pytest.mark.parametrize("dialect", [
    "postgres", "mysql"])
def test_row_lock_claim_skips_rows_held_by_another_open_transaction(
        queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout(form="row_lock"))
    first, second = q.connect(), q.connect()
    ids = [q.add(first) for _ in range(4)]
    held = q.claim(first, limit=2)
    assert [q.id_of(r) for r in held] == ids[:2]

    assert [q.id_of(r) for r in q.claim(second, limit=10)] == ids[2:]
    second.rollback()
    first.rollback()  # the holder dies: its rows are free again
    assert [q.id_of(r) for r in q.claim(second, limit=10)] == ids


@pytest.mark.parametrize("dialect", DIALECTS)
def test_lease_claim_skips_rows_leased_by_another_connection(
        queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout(form="lease"))
    first, second = q.connect(), q.connect()
    ids = [q.add(first) for _ in range(4)]
    assert [q.id_of(r) for r in q.claim(first, limit=2)] == ids[:2]
    first.commit()
    assert [q.id_of(r) for r in q.claim(second, limit=10)] == ids[2:]
    second.commit()
    assert q.claim(first, limit=10) == []


@pytest.mark.parametrize("dialect", [
    "postgres", "mysql"])
def test_lease_claim_skips_rows_of_an_uncommitted_claim_without_waiting(
        queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout(form="lease"))
    first, second = q.connect(), q.connect()
    ids = [q.add(first) for _ in range(4)]
    assert [q.id_of(r) for r in q.claim(first, limit=2)] == ids[:2]  # not committed yet
    # A claim that waited for first's row locks would fail (lock_timeout /
    # innodb_lock_wait_timeout of 5 s) or at least take that long.
    started = time.monotonic()
    assert [q.id_of(r) for r in q.claim(second, limit=10)] == ids[2:]
    assert time.monotonic() - started < 2.5
    first.commit()
    second.commit()


STRESS_FORMS = [
    pytest.param("postgres", "row_lock", id="postgres-row_lock"),
    pytest.param("postgres", "lease", id="postgres-lease"),
    pytest.param("sqlite", "lease", id="sqlite-lease"),
    pytest.param("postgres", "advisory", id="postgres-advisory"),
    pytest.param("mysql", "row_lock", id="mysql-row_lock"),
    pytest.param("mysql", "lease", id="mysql-lease"),
    pytest.param("mysql", "advisory", id="mysql-advisory"),
]


def run_workers(conns: list[Any], work: Callable[[Any], None]) -> None:
    """Run work(conn) on one thread per connection, all starting together; re-raise failures."""
    barrier = threading.Barrier(len(conns))

    def start(conn: Any) -> None:
        barrier.wait()
        work(conn)

    with ThreadPoolExecutor(len(conns)) as pool:
        for future in [pool.submit(start, c) for c in conns]:
            future.result()


@pytest.mark.parametrize(("dialect", "form"), STRESS_FORMS)
def test_concurrent_workers_claim_every_row_exactly_once(
        queue: MakeQueue, dialect: str, form: str) -> None:
    q = queue(dialect, Layout(form=form))
    conn = q.connect()
    q.mod.insert_many(conn, [q.new() for _ in range(200)])
    conn.commit()
    claimed: list[int] = []
    batches: list[int] = []

    def work(c: Any) -> None:
        while rows := q.claim(c, limit=3):
            commit_claim(q, c)
            batches.append(len(rows))
            claimed.extend(q.id_of(r) for r in rows)
            for r in rows:
                assert q.settle("finish", c, r)
            c.commit()
            for r in rows:
                q.release(c, r)
        c.rollback()  # the empty claim's transaction (on SQLite it holds the write lock)

    run_workers([q.connect() for _ in range(8)], work)
    assert max(batches) <= 3
    assert sorted(claimed) == q.ids() == list(range(1, 201))


# -- 3. Lease tokens -----------------------------------------------------------------------------

SETTLEMENTS = [  # settlement, dead-letter destination of the table
    pytest.param("finish", "group", id="finish"),
    pytest.param("retry", "group", id="retry"),
    pytest.param("retry_after", "group", id="retry_after"),
    pytest.param("renew", "group", id="renew"),
    pytest.param("dead_letter", "group", id="dead_letter-to-group"),
    pytest.param("dead_letter", "table", id="dead_letter-to-table"),
]
SETTLE_ARGS = {"now": at(5), "retry_after": at(60), "new_locked_until": at(90)}


def leased_row(q: Queue, conn: Any) -> Any:
    """One committed row claimed at T0 under a lease ending at T0 + 30 s."""
    q.add(conn)
    row = q.claim_one(conn, now=T0, until=at(30))
    conn.commit()
    assert (row.attempt, row.locked_until) == (1, at(30))
    return row


def end_transaction(conn: Any, settled: bool, name: str) -> None:
    # A dead letter to a table that returned False must be rolled back (its contract).
    if not settled and name == "dead_letter":
        conn.rollback()
    else:
        conn.commit()


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize(("name", "dead"), SETTLEMENTS)
def test_lease_settlement_with_a_wrong_expiry_returns_false_and_changes_nothing(
        queue: MakeQueue, dialect: str, name: str, dead: str) -> None:
    q = queue(dialect, Layout(form="lease", group=True, dead=dead))
    conn = q.connect()
    row = leased_row(q, conn)
    before = q.snapshot()
    settled = q.settle(name, conn, row, locked_until=at(31), **SETTLE_ARGS)
    end_transaction(conn, settled, name)
    assert settled is False
    assert q.snapshot() == before


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize(("name", "dead"), SETTLEMENTS)
def test_lease_settlement_with_a_wrong_attempt_returns_false_and_changes_nothing(
        queue: MakeQueue, dialect: str, name: str, dead: str) -> None:
    q = queue(dialect, Layout(form="lease", group=True, dead=dead))
    conn = q.connect()
    row = leased_row(q, conn)
    before = q.snapshot()
    for wrong in (row.attempt - 1, row.attempt + 1):
        settled = q.settle(name, conn, row, attempt=wrong, **SETTLE_ARGS)
        end_transaction(conn, settled, name)
        assert settled is False, wrong
    assert q.snapshot() == before


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize(("name", "dead"), SETTLEMENTS)
def test_lease_settlement_with_the_held_token_returns_true_and_changes_the_row(
        queue: MakeQueue, dialect: str, name: str, dead: str) -> None:
    q = queue(dialect, Layout(form="lease", group=True, dead=dead))
    conn = q.connect()
    row = leased_row(q, conn)
    before = q.snapshot()
    assert q.settle(name, conn, row, **SETTLE_ARGS) is True
    conn.commit()
    assert q.snapshot() != before


@pytest.mark.parametrize("dialect", DIALECTS)
def test_lease_finish_marks_the_row_processed_and_clears_the_lease(
        queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout(form="lease"))
    conn = q.connect()
    row = leased_row(q, conn)
    assert q.settle("finish", conn, row, now=at(5))
    conn.commit()
    stored = q.row(q.id_of(row))
    assert stored is not None
    assert (stored["processed_at"], stored["locked_until"]) == (at(5), None)
    assert q.claim(conn, now=at(100), limit=10) == []


@pytest.mark.parametrize("dialect", DIALECTS)
def test_lease_retry_returns_the_row_at_once(queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout(form="lease"))
    conn = q.connect()
    row = leased_row(q, conn)
    assert q.settle("retry", conn, row)
    conn.commit()
    stored = q.row(q.id_of(row))
    assert stored is not None and stored["locked_until"] is None
    again = q.claim_one(conn, now=at(1))
    assert (q.id_of(again), again.attempt) == (q.id_of(row), 2)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_lease_retry_after_makes_the_row_due_later(queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout(form="lease"))
    conn = q.connect()
    row = leased_row(q, conn)
    assert q.settle("retry_after", conn, row, retry_after=at(60))
    conn.commit()
    stored = q.row(q.id_of(row))
    assert stored is not None
    assert (stored["retry_after"], stored["locked_until"]) == (at(60), None)
    assert q.claim(conn, now=at(59), limit=10) == []
    assert [q.id_of(r) for r in q.claim(conn, now=at(60), limit=10)] == [q.id_of(row)]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_renew_extends_the_lease_and_the_new_expiry_becomes_the_token(
        queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout(form="lease"))
    conn = q.connect()
    row = leased_row(q, conn)
    assert q.settle("renew", conn, row, new_locked_until=at(90))
    conn.commit()
    stored = q.row(q.id_of(row))
    assert stored is not None and stored["locked_until"] == at(90)
    assert q.claim(conn, now=at(30), limit=10) == []  # the old expiry no longer frees it
    conn.commit()
    assert q.settle("finish", conn, row) is False  # the old token
    assert q.settle("finish", conn, row, locked_until=at(90)) is True
    conn.commit()


@pytest.mark.parametrize("dialect", DIALECTS)
def test_holder_of_an_expired_lease_cannot_finish_once_another_claim_took_the_row(
        queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout(form="lease"))
    late, other = q.connect(), q.connect()
    mine = leased_row(q, late)
    theirs = q.claim_one(other, now=at(31), until=at(61))
    other.commit()
    assert q.id_of(theirs) == q.id_of(mine)

    assert q.settle("finish", late, mine) is False
    late.commit()
    stored = q.row(q.id_of(mine))
    assert stored is not None and stored["processed_at"] is None
    assert q.settle("finish", other, theirs) is True
    other.commit()


@pytest.mark.parametrize("dialect", DIALECTS)
def test_attempt_in_the_token_fences_a_holder_whose_expiry_was_handed_out_again(
        queue: MakeQueue, dialect: str) -> None:
    # A retries its row and B claims it again in the same second: both leases end at T0 + 30.
    q = queue(dialect, Layout(form="lease"))
    a, b = q.connect(), q.connect()
    first = leased_row(q, a)
    assert q.settle("retry", a, first)
    a.commit()
    second = q.claim_one(b, now=T0, until=at(30))
    b.commit()
    assert second.locked_until == first.locked_until
    assert q.settle("finish", a, first) is False  # A's late ack must not finish B's delivery
    a.commit()
    assert q.settle("finish", b, second) is True
    b.commit()


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("form", ["lease", "advisory"])
def test_settlement_that_leaves_every_value_as_it_was_still_finds_the_row(
        queue: MakeQueue, dialect: str, form: str) -> None:
    """Renewing a lease to the expiry it has, or rescheduling an advisory row to the due time it
    has, settles a held row: True, like any settlement that finds its row (MySQL: on a
    connection with CLIENT.FOUND_ROWS, as the worker's)."""
    q = queue(dialect, Layout(form=form))
    conn = q.connect()
    q.add(conn)
    row = q.claim_one(conn, now=T0, until=at(30))
    conn.commit()
    if form == "lease":
        assert q.settle("renew", conn, row, new_locked_until=row.locked_until) is True
    else:
        assert q.settle("retry_after", conn, row, retry_after=row.retry_after) is True
    conn.commit()
    q.release(conn, row)


# -- 4. Attempt counting -------------------------------------------------------------------------


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


# Row lock with count_crashes: CLAIM counts the attempt and is committed at once; RELOCK (guarded by
# the attempt) then locks the row for the handler's transaction.


def counted_claim(q: Queue, conn: Any) -> Any:
    """CLAIM one row and commit, as the first step of a count_crashes claim."""
    (row,) = q.mod.claim(conn, group="g", now=T0)
    conn.commit()
    return row


@pytest.mark.parametrize("dialect", SERVERS)
def test_count_crashes_claim_spends_the_attempt_even_when_the_handler_crashes(
        queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout("row_lock", group=True, count_crashes=True))
    conn = q.connect()
    job = q.add(conn)
    row = counted_claim(q, conn)
    assert (row.attempt, stored_attempt(q, job)) == (1, 2)
    assert q.mod.relock(conn, id=job, attempt=row.attempt) is not None
    conn.rollback()  # the handler took its process down
    assert stored_attempt(q, job) == 2
    assert counted_claim(q, conn).attempt == 2


@pytest.mark.parametrize("dialect", SERVERS)
def test_count_crashes_relocked_row_is_skipped_by_other_claims(
        queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout("row_lock", group=True, count_crashes=True))
    holder, other = q.connect(), q.connect()
    job = q.add(holder)
    row = counted_claim(q, holder)
    assert q.mod.relock(holder, id=job, attempt=row.attempt) is not None
    assert q.mod.claim(other, group="g", now=T0, limit=10) == []
    other.rollback()
    assert q.mod.finish(holder, id=job, now=at(1))
    holder.commit()
    assert stored_attempt(q, job) == 2


@pytest.mark.parametrize("dialect", [
    "postgres", pytest.param("mysql", marks=MYSQL_RELOCK_KEEPS_THE_ROW_LOCKED)])
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


@pytest.mark.parametrize("dialect", SERVERS)
def test_count_crashes_relock_reports_the_attempt_as_the_claim_did(
        queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout("row_lock", group=True, count_crashes=True))
    conn = q.connect()
    job = q.add(conn)
    row = counted_claim(q, conn)
    relocked = q.mod.relock(conn, id=job, attempt=row.attempt)
    assert relocked == row


# -- 5. Dead letters -----------------------------------------------------------------------------


MAILERS = [pytest.param("postgres", "mailer", id="postgres-mailer"),
           pytest.param("mysql", "mailer_mariadb", id="mysql-mailer_mariadb")]


@pytest.mark.parametrize(("dialect", "example"), MAILERS)
def test_mailer_dead_letter_moves_the_row_to_the_dead_group_keeping_its_attempt(
        queue: MakeQueue, dialect: str, example: str) -> None:
    q = queue(dialect, example)
    m = q.mod
    conn = q.connect()
    m.insert(conn, m.NewRow(name="emails", payload=b"hello"))
    conn.commit()
    # The mailer counts every claim (count_crashes, its default with max_attempts): a delivery
    # that never settles, as a crash, still spends its attempt.
    q.claim_one(conn, group="emails")
    conn.rollback()
    row = q.claim_one(conn, group="emails")
    assert row.attempt == 2
    assert q.settle("dead_letter", conn, row)
    conn.commit()

    stored = q.row(row.job_id)
    assert stored is not None
    assert (stored["name"], stored["attempt"], stored["payload"]) == ("emails.dead", 2, b"hello")
    assert m.claim(conn, group="emails") == []
    assert [r.job_id for r in m.claim(conn, group="emails.dead")] == [row.job_id]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_lease_dead_letter_to_a_group_keeps_the_attempt_and_drops_the_lease(
        queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout(form="lease", group=True, dead="group"))
    conn = q.connect()
    row = leased_row(q, conn)
    assert q.settle("retry", conn, row)
    conn.commit()
    row = q.claim_one(conn, until=at(30))
    conn.commit()
    assert row.attempt == 2
    assert q.settle("dead_letter", conn, row)
    conn.commit()

    stored = q.row(q.id_of(row))
    assert stored is not None
    assert (stored["grp"], stored["attempt"], stored["locked_until"]) == ("dead", 2, None)
    assert q.claim(conn, now=at(100), limit=10) == []


@pytest.mark.parametrize(("dialect", "form"), CLAIM_FORMS)
def test_dead_letter_to_a_table_moves_the_row_with_its_attempt_count(
        queue: MakeQueue, dialect: str, form: str) -> None:
    q = queue(dialect, Layout(form=form, dead="table"))
    conn = q.connect()
    keep = q.add(conn, priority=5)
    job = q.add(conn, priority=0)
    row = q.claim_one(conn)
    commit_claim(q, conn)
    assert q.settle("retry_after", conn, row, retry_after=at(-1))
    conn.commit()
    q.release(conn, row)
    row = q.claim_one(conn)
    commit_claim(q, conn)
    assert (q.id_of(row), row.attempt) == (job, 2)
    (source,) = [r for r in q.rows() if r["id"] == job]

    assert q.settle("dead_letter", conn, row)
    conn.commit()
    q.release(conn, row)
    expected = {**source, "attempt": 2}
    if form == "lease":
        expected["locked_until"] = None
    assert q.rows("jobs_dead") == [expected]
    assert q.ids() == [keep]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_dead_letter_to_a_table_rolls_back_with_the_callers_transaction(
        queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout(form="lease", dead="table"))
    conn = q.connect()
    row = leased_row(q, conn)
    before = q.snapshot()
    assert q.settle("dead_letter", conn, row)
    conn.rollback()
    assert q.snapshot() == before


@pytest.mark.parametrize("dialect", LEDGERS)
def test_ledger_advisory_dead_letter_keeps_the_taken_attempt(
        queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, "ledger")
    m = q.mod
    conn = q.connect()
    m.insert(conn, m.NewRow(account_id=7, payload={"amount": 5}, headers={"trace": "t1"}))
    conn.commit()
    now = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)
    (cand,) = m.candidates(conn, now=now)
    assert m.lock(conn, key=m.advisory_key(cand))
    row = m.take(conn, id=cand.id, now=now)
    conn.commit()
    assert row is not None and row.attempt == 1
    assert m.dead_letter(conn, id=row.id, attempt=row.attempt)
    conn.commit()
    assert m.unlock(conn, key=m.advisory_key(row))
    (dead,) = q.rows("ledger_jobs_dead")
    assert (dead["id"], dead["account_id"], dead["attempt"]) == (row.id, 7, 1)
    assert (json_value(dead["headers"]), json_value(dead["payload"])) == (
        {"trace": "t1"}, {"amount": 5})
    assert q.rows() == []


# -- 6. FIFO groups ------------------------------------------------------------------------------


def fifo_queue(queue: MakeQueue, dialect: str, form: str) -> Queue:
    return queue(dialect, Layout(form=form, group=True, fifo=True))


def take_head(q: Queue, conn: Any, group: str = "g", now: dt.datetime = T0) -> Any:
    """fifo_claim; a lease is committed at once, a row lock stays in the open transaction."""
    row = q.fifo_claim(conn, group=group, now=now)
    commit_claim(q, conn)
    return row


@pytest.mark.parametrize(("dialect", "form"), FIFO_FORMS)
def test_fifo_claim_returns_the_head_of_the_group(
        queue: MakeQueue, dialect: str, form: str) -> None:
    q = fifo_queue(queue, dialect, form)
    conn = q.connect()
    q.add(conn, grp="other")
    ids = [q.add(conn) for _ in range(3)]
    head = take_head(q, conn)
    assert (q.id_of(head), head.grp, head.attempt) == (ids[0], "g", 1)


@pytest.mark.parametrize(("dialect", "form"), FIFO_FORMS)
def test_fifo_claim_returns_none_for_an_empty_group_or_a_head_not_yet_due(
        queue: MakeQueue, dialect: str, form: str) -> None:
    q = fifo_queue(queue, dialect, form)
    conn = q.connect()
    job = q.add(conn, retry_after=at(60))
    assert q.fifo_claim(conn, group="empty") is None
    assert q.fifo_claim(conn, now=at(59)) is None
    conn.rollback()
    head = q.fifo_claim(conn, now=at(60))
    assert head is not None and q.id_of(head) == job


@pytest.mark.parametrize(("dialect", "form"), FIFO_FORMS)
def test_fifo_claim_returns_none_while_the_head_is_held_elsewhere(
        queue: MakeQueue, dialect: str, form: str) -> None:
    q = fifo_queue(queue, dialect, form)
    holder, other = q.connect(), q.connect()
    ids = [q.add(holder) for _ in range(3)]
    assert q.id_of(take_head(q, holder)) == ids[0]  # row lock: holder's transaction stays open
    # Without waiting (MySQL row lock: FOR UPDATE NOWAIT); a wait would end only with the
    # 5 s lock timeout.
    started = time.monotonic()
    assert q.fifo_claim(other, now=at(10)) is None
    assert time.monotonic() - started < 2.5
    other.rollback()
    assert q.ids() == ids


@pytest.mark.parametrize(("dialect", "form"), FIFO_FORMS)
def test_fifo_next_row_becomes_the_head_once_the_head_is_finished(
        queue: MakeQueue, dialect: str, form: str) -> None:
    q = fifo_queue(queue, dialect, form)
    holder, other = q.connect(), q.connect()
    ids = [q.add(holder) for _ in range(3)]
    head = take_head(q, holder)
    finish(q, holder, head)
    assert q.id_of(take_head(q, other, now=at(1))) == ids[1]


@pytest.mark.parametrize(("dialect", "form"), FIFO_FORMS)
def test_fifo_retry_keeps_the_head_in_place(
        queue: MakeQueue, dialect: str, form: str) -> None:
    q = fifo_queue(queue, dialect, form)
    conn = q.connect()
    ids = [q.add(conn) for _ in range(3)]
    head = take_head(q, conn)
    assert q.settle("retry", conn, head)
    conn.commit()
    again = take_head(q, conn, now=at(1))
    assert (q.id_of(again), again.attempt) == (ids[0], 2)


@pytest.mark.parametrize(("dialect", "form"), FIFO_FORMS)
def test_fifo_retry_after_moves_the_head_behind_rows_due_earlier(
        queue: MakeQueue, dialect: str, form: str) -> None:
    q = fifo_queue(queue, dialect, form)
    conn = q.connect()
    ids = [q.add(conn) for _ in range(3)]
    head = take_head(q, conn)
    assert q.settle("retry_after", conn, head, retry_after=at(60))
    conn.commit()
    order = []
    while (row := take_head(q, conn, now=at(1))) is not None:
        order.append(q.id_of(row))
        finish(q, conn, row)
    conn.rollback()
    assert order == ids[1:]
    assert q.id_of(take_head(q, conn, now=at(60))) == ids[0]


@pytest.mark.parametrize(("dialect", "form"), FIFO_FORMS)
def test_fifo_group_stays_blocked_while_a_row_that_is_no_longer_head_is_held(
        queue: MakeQueue, dialect: str, form: str) -> None:
    q = fifo_queue(queue, dialect, form)
    holder, other, producer = q.connect(), q.connect(), q.connect()
    q.add(producer)
    head = take_head(q, holder)
    urgent = q.add(producer, priority=-1)  # now first in claim order, but the group is busy
    assert q.fifo_claim(other, now=at(10)) is None
    other.rollback()
    finish(q, holder, head)
    assert q.id_of(take_head(q, other, now=at(10))) == urgent


@pytest.mark.parametrize(("dialect", "form"), FIFO_FORMS)
def test_fifo_other_groups_are_not_blocked(
        queue: MakeQueue, dialect: str, form: str) -> None:
    q = fifo_queue(queue, dialect, form)
    holder, other = q.connect(), q.connect()
    q.add(holder, grp="a")
    b_head = q.add(holder, grp="b")
    q.add(holder, grp="b")
    assert take_head(q, holder, group="a") is not None
    assert q.id_of(take_head(q, other, group="b")) == b_head


@pytest.mark.parametrize("dialect", DIALECTS)
def test_fifo_head_comes_back_when_its_lease_expires(queue: MakeQueue, dialect: str) -> None:
    q = fifo_queue(queue, dialect, "lease")
    conn = q.connect()
    ids = [q.add(conn) for _ in range(2)]
    take_head(q, conn)
    assert take_head(q, conn, now=at(LEASE - 1)) is None
    again = take_head(q, conn, now=at(LEASE))
    assert (q.id_of(again), again.attempt) == (ids[0], 2)


@pytest.mark.parametrize("dialect", SERVERS)
def test_fifo_row_lock_head_comes_back_when_its_holder_rolls_back(
        queue: MakeQueue, dialect: str) -> None:
    q = fifo_queue(queue, dialect, "row_lock")
    holder, other = q.connect(), q.connect()
    ids = [q.add(holder) for _ in range(2)]
    take_head(q, holder)
    holder.rollback()  # the worker died: no attempt spent
    again = take_head(q, other)
    assert (q.id_of(again), again.attempt) == (ids[0], 1)


@pytest.mark.parametrize(("dialect", "form"), FIFO_FORMS)
def test_concurrent_fifo_workers_take_a_group_one_row_at_a_time_in_order(
        queue: MakeQueue, dialect: str, form: str) -> None:
    q = fifo_queue(queue, dialect, form)
    conn = q.connect()
    q.mod.insert_many(conn, [q.new() for _ in range(30)])
    conn.commit()
    ids = q.ids()
    order: list[int] = []
    deadline = time.monotonic() + 30

    def work(c: Any) -> None:
        while len(order) < len(ids) and time.monotonic() < deadline:
            row = q.fifo_claim(c)
            if row is None:  # the head is in work elsewhere (or the group is done)
                c.rollback()
                time.sleep(0.001)
                continue
            commit_claim(q, c)
            order.append(q.id_of(row))  # before the finish: nobody can claim the next row yet
            finish(q, c, row)

    run_workers([q.connect() for _ in range(4)], work)
    assert order == ids


# -- 7. Inserts ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dialect", DIALECTS)
def test_insert_leaves_generated_columns_to_the_database(
        queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout(form="lease"))
    conn = q.connect()
    q.mod.insert(conn, q.new(account="x", payload="one", priority=3))
    q.mod.insert(conn, q.new(account="y", payload="two", priority=4))
    conn.commit()
    assert [(r["id"], r["attempt"], r["processed_at"], r["locked_until"], r["payload"])
            for r in q.rows()] == [(1, 1, None, None, "one"), (2, 1, None, None, "two")]


@pytest.mark.parametrize("dialect", LEDGERS)
def test_insert_fills_identity_and_defaulted_columns(queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, "ledger")
    m = q.mod
    conn = q.connect()
    before = dt.datetime.now(dt.UTC)
    m.insert(conn, m.NewRow(account_id=7, payload={"amount": 5}))
    m.insert(conn, m.NewRow(account_id=8, payload=[1, 2], headers={"trace": "t"}))
    conn.commit()
    rows = q.rows()
    assert [(r["id"], r["account_id"], r["attempt"], json_value(r["headers"]),
             json_value(r["payload"])) for r in rows] \
        == [(1, 7, 1, None, {"amount": 5}), (2, 8, 1, {"trace": "t"}, [1, 2])]
    assert all(before - dt.timedelta(minutes=1) < r["retry_after"]
               < dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1) for r in rows)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_insert_joins_the_callers_transaction(queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout(form="lease"))
    conn = q.connect()
    q.mod.insert(conn, q.new())
    q.mod.insert_many(conn, [q.new(), q.new()])
    conn.rollback()
    assert q.rows() == []


@pytest.mark.parametrize("dialect", DIALECTS)
def test_insert_many_writes_every_row(queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout(form="lease", group=True))
    conn = q.connect()
    q.mod.insert_many(conn, [q.new(grp=f"g{i % 3}", priority=i % 7, retry_after=at(-i),
                                   account=f"acct-{i}", payload=f"job-{i}")
                             for i in range(500)])
    conn.commit()
    rows = q.rows()
    assert len(rows) == 500
    assert [(r["grp"], r["priority"], r["retry_after"], r["account"], r["payload"], r["attempt"])
            for r in rows] == [(f"g{i % 3}", i % 7, at(-i), f"acct-{i}", f"job-{i}", 1)
                               for i in range(500)]


def com_insert(conn: Any) -> int:
    """The MySQL session's count of INSERT statements run so far."""
    with pymysql.cursors.Cursor(conn) as cur:
        cur.execute("SHOW SESSION STATUS LIKE 'Com_insert'")
        ((_, value),) = cur.fetchall()
    return int(value)


@pytest.mark.parametrize("dialect", SERVERS)
def test_insert_many_is_one_statement(queue: MakeQueue, dialect: str) -> None:
    """PostgreSQL: INSERT ... SELECT FROM unnest(...); MySQL: PyMySQL's executemany rewrites
    INSERT into one multi-row INSERT (one query on the wire, one Com_insert on the server)."""
    q = queue(dialect, Layout(form="row_lock"))
    conn = q.connect()
    rows = [q.new() for _ in range(500)]
    log = executed(conn)
    log.clear()
    if q.mysql:
        inserts_before = com_insert(conn)
        sent(conn).clear()
    q.mod.insert_many(conn, rows)
    if q.mysql:
        assert log == [q.mod.INSERT]
        assert len(sent(conn)) == 1 and sent(conn)[0].lstrip().startswith("INSERT INTO `jobs`")
        assert com_insert(conn) - inserts_before == 1
    else:
        assert log == [q.mod.INSERT_MANY]
    conn.commit()
    assert len(q.rows()) == 500


@pytest.mark.parametrize("dialect", LEDGERS)
def test_insert_many_keeps_json_columns_and_null_headers_per_row(
        queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, "ledger")
    m = q.mod
    conn = q.connect()
    m.insert_many(conn, [m.NewRow(account_id=i, payload={"n": i, "tags": ["a", str(i)]},
                                  headers=None if i % 2 else {"trace": f"t{i}"})
                         for i in range(500)])
    conn.commit()
    assert [(r["account_id"], json_value(r["payload"]), json_value(r["headers"]))
            for r in q.rows()] == [
        (i, {"n": i, "tags": ["a", str(i)]}, None if i % 2 else {"trace": f"t{i}"})
        for i in range(500)]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_insert_many_of_no_rows_inserts_nothing(queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout(form="lease"))
    conn = q.connect()
    q.mod.insert_many(conn, [])
    conn.commit()
    assert q.rows() == []


@pytest.mark.parametrize("dialect", DIALECTS)
def test_insert_unique_skips_a_row_whose_key_is_already_queued(
        queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout(form="lease", unique=True))
    conn = q.connect()
    assert q.mod.insert_unique(conn, q.new(account="order-1", payload="first")) is True
    assert q.mod.insert_unique(conn, q.new(account="order-1", payload="second")) is False
    assert q.mod.insert_unique(conn, q.new(account="order-2", payload="third")) is True
    conn.commit()
    assert [(r["account"], r["payload"]) for r in q.rows()] == [
        ("order-1", "first"), ("order-2", "third")]


def test_insert_unique_fails_on_a_value_its_column_cannot_hold_as_insert_does(
        queue: MakeQueue) -> None:
    # account is VARCHAR(191): a longer key is an error (strict mode), not a shorter key (as
    # INSERT IGNORE would make it, skipping a later key that shares the cut prefix).
    q = queue("mysql", Layout(form="lease", unique=True))
    conn = q.connect()
    too_long = "k" * 300
    with pytest.raises(pymysql.err.DataError):
        q.mod.insert(conn, q.new(account=too_long))
    conn.rollback()
    with pytest.raises(pymysql.err.DataError):
        q.mod.insert_unique(conn, q.new(account=too_long))
    conn.rollback()
    assert q.rows() == []


ARRAY_SPEC = """
table = "jobs"
dialect = "postgres"

[columns]
id = { role = "id", generated = true }
locked_until = "locked_until"
payload = { role = "payload", codec = "text" }
"""
ARRAY_DDL = """
CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    locked_until TIMESTAMPTZ,
    tags TEXT[] NOT NULL,
    payload TEXT NOT NULL
);
"""


def test_insert_writes_an_array_data_column(queue: MakeQueue) -> None:
    q = queue("postgres", spec=ARRAY_SPEC, ddl=ARRAY_DDL)
    conn = q.connect()
    q.mod.insert(conn, q.mod.NewRow(tags=["a", "b"], payload="one"))
    conn.commit()
    assert [(r["tags"], r["payload"]) for r in q.rows()] == [(["a", "b"], "one")]


def test_insert_many_writes_an_array_data_column_per_row(queue: MakeQueue) -> None:
    q = queue("postgres", spec=ARRAY_SPEC, ddl=ARRAY_DDL)
    conn = q.connect()
    q.mod.insert_many(conn, [q.mod.NewRow(tags=["a", "b"], payload="one"),
                             q.mod.NewRow(tags=["c", "d"], payload="two")])
    conn.commit()
    assert [(r["tags"], r["payload"]) for r in q.rows()] == [
        (["a", "b"], "one"), (["c", "d"], "two")]


# -- 8. Advisory locks on PostgreSQL and MySQL ---------------------------------------------------


@pytest.mark.parametrize("dialect", SERVERS)
def test_advisory_lock_excludes_other_sessions_until_unlocked(
        queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout(form="advisory"))
    m = q.mod
    first, second = q.connect(), q.connect()
    assert m.lock(first, key="account-1") is True
    assert m.lock(second, key="account-1") is False
    assert m.lock(second, key="account-2") is True
    first.commit()  # a session lock outlives the transaction
    assert m.lock(second, key="account-1") is False
    assert m.unlock(second, key="account-1") is False  # not second's to release
    assert m.unlock(first, key="account-1") is True
    assert m.lock(second, key="account-1") is True


# MySQL lock names end at 64 characters; the name is `<database>.<key>`, hashed when longer.
LONG_KEYS = ["account-" + "x" * 100, "ä" * 70, "k" * 50, "k" * 59, "k" * 60, "k" * 61]


@pytest.mark.parametrize("dialect", SERVERS)
def test_advisory_lock_takes_keys_longer_than_64_characters(
        queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout(form="advisory"))
    m = q.mod
    first, second = q.connect(), q.connect()
    for key in LONG_KEYS:
        assert m.lock(first, key=key) is True, key
        assert m.lock(first, key=key + "-2") is True, key  # differs past the 64th character
    for key in LONG_KEYS:
        assert m.lock(second, key=key) is False, key
        assert m.lock(second, key=key + "-2") is False, key
        assert m.unlock(first, key=key) is True, key
        assert m.lock(second, key=key) is True, key
        assert m.lock(second, key=key + "-2") is False, key


def test_advisory_locks_of_two_databases_on_one_server_do_not_collide(
        queue: MakeQueue) -> None:
    # GET_LOCK names are server-wide: the database prefix keeps two queues' keys apart.
    one = queue("mysql", Layout(form="advisory"))
    two = queue("mysql", Layout(form="advisory"))
    a, b, c = one.connect(), two.connect(), one.connect()
    for key in ("account-1", LONG_KEYS[0]):
        assert one.mod.lock(a, key=key) is True
        assert two.mod.lock(b, key=key) is True, key  # the same key in the other database
        assert one.mod.lock(c, key=key) is False, key  # but the same database excludes


@pytest.mark.parametrize("dialect", LEDGERS)
def test_advisory_jobs_sharing_a_key_run_one_at_a_time(queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, "ledger")
    m = q.mod
    # One connection per job in work, as the advisory form runs them.
    first, second, third = q.connect(), q.connect(), q.connect()
    m.insert_many(first, [m.NewRow(account_id=7, payload="a1"),
                          m.NewRow(account_id=7, payload="a2"),
                          m.NewRow(account_id=8, payload="b")])
    first.commit()
    now = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)
    (a1,) = q.claim(first, now=now)
    first.commit()
    assert m.decode_payload(a1.payload) == "a1"
    # a2 shares account 7 with a1, which is in work: the second worker gets b instead.
    assert [m.decode_payload(r.payload) for r in q.claim(second, now=now, limit=10)] == ["b"]
    second.commit()
    assert q.claim(third, now=now, limit=10) == []
    third.commit()
    finish(q, first, a1)
    assert [m.decode_payload(r.payload) for r in q.claim(third, now=now, limit=10)] == ["a2"]
    third.commit()


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("processed", [True, False], ids=["marked", "deleted"])
def test_advisory_take_returns_none_for_a_row_finished_meanwhile(
        queue: MakeQueue, dialect: str, processed: bool) -> None:
    q = queue(dialect, Layout(form="advisory", processed=processed))
    m = q.mod
    slow, fast = q.connect(), q.connect()
    job = q.add(slow)
    (cand,) = m.candidates(slow, now=T0)
    row = q.claim_one(fast)
    fast.commit()
    finish(q, fast, row)
    if q.locks:
        assert m.lock(slow, key=m.advisory_key(cand))
    assert m.take(slow, id=job, now=T0) is None
    slow.commit()


@pytest.mark.parametrize("dialect", DIALECTS)
def test_advisory_take_returns_none_for_a_row_rescheduled_meanwhile(
        queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout(form="advisory"))
    m = q.mod
    slow, fast = q.connect(), q.connect()
    job = q.add(slow)
    (cand,) = m.candidates(slow, now=T0)
    row = q.claim_one(fast)
    assert m.retry_after(fast, id=job, retry_after=at(60))
    fast.commit()
    q.release(fast, row)
    if q.locks:
        assert m.lock(slow, key=m.advisory_key(cand))
    assert m.take(slow, id=job, now=T0) is None
    assert m.take(slow, id=job, now=at(60)) is not None
    slow.commit()


# -- 9. NOTIFY -----------------------------------------------------------------------------------


def test_notify_reaches_a_listener_on_the_table_channel_with_the_group(
        queue: MakeQueue) -> None:
    q = queue("postgres", Layout(form="row_lock", group=True))
    listener = q.connect(autocommit=True)
    listener.execute('LISTEN "jobs"')
    conn = q.connect()
    q.mod.insert(conn, q.new(grp="emails"))
    q.mod.notify(conn, "emails")
    conn.commit()
    got = [(n.channel, n.payload) for n in listener.notifies(timeout=5, stop_after=1)]
    assert got == [("jobs", "emails")]


def test_notify_is_delivered_only_when_the_transaction_commits(queue: MakeQueue) -> None:
    q = queue("postgres", Layout(form="lease", group=True))
    listener = q.connect(autocommit=True)
    listener.execute('LISTEN "jobs"')
    conn = q.connect()
    q.mod.notify(conn, "g")
    assert list(listener.notifies(timeout=0.2, stop_after=1)) == []
    conn.rollback()
    assert list(listener.notifies(timeout=0.2, stop_after=1)) == []
    q.mod.notify(conn, "g")
    conn.commit()
    assert [n.payload for n in listener.notifies(timeout=5, stop_after=1)] == ["g"]


# -- 10. Async twins -----------------------------------------------------------------------------


def test_async_twins_insert_claim_and_finish_under_a_lease(queue: MakeQueue) -> None:
    q = queue("postgres", Layout(form="lease", group=True))
    m = q.mod

    async def run() -> list[str]:
        conn = await q.connect_async()
        try:
            await m.insert_async(conn, q.new(payload="one"))
            await m.insert_many_async(conn, [q.new(payload="two")])
            await conn.commit()
            rows = await m.claim_async(conn, group="g", now=T0, locked_until=at(30), limit=10)
            await conn.commit()
            assert [(r.payload, r.attempt) for r in rows] == [("one", 1), ("two", 1)]
            assert await m.renew_async(conn, id=rows[0].id, locked_until=at(30), attempt=1,
                                       new_locked_until=at(60))
            assert await m.finish_async(conn, id=rows[0].id, now=at(5), locked_until=at(60),
                                        attempt=1)
            assert not await m.finish_async(conn, id=rows[1].id, now=at(5),
                                            locked_until=at(31), attempt=1)
            await conn.commit()
            return executed(conn)
        finally:
            await conn.close()

    ran = asyncio.run(run())
    assert m.CLAIM in ran and m.FINISH in ran
    assert [(r["payload"], r["processed_at"], r["locked_until"]) for r in q.rows()] == [
        ("one", at(5), None), ("two", None, at(30))]


def test_async_twins_row_lock_claim_holds_the_row_until_commit(queue: MakeQueue) -> None:
    q = queue("postgres", Layout(form="row_lock", group=True))
    m = q.mod
    conn = q.connect()
    job = q.add(conn)

    async def run() -> None:
        first, second = await q.connect_async(), await q.connect_async()
        try:
            (row,) = await m.claim_async(first, group="g", now=T0)
            assert await m.claim_async(second, group="g", now=T0) == []
            await second.rollback()
            assert await m.finish_async(first, id=row.id, now=at(1))
            await first.commit()
        finally:
            await first.close()
            await second.close()

    asyncio.run(run())
    stored = q.row(job)
    assert stored is not None and stored["processed_at"] == at(1)


# -- 11. A schema-qualified, mixed-case table ----------------------------------------------------


def test_chat_example_schema_qualified_mixed_case_table_end_to_end(
        queue: MakeQueue) -> None:
    q = queue("postgres", "chat")
    m = q.mod
    listener = q.connect(autocommit=True)
    listener.execute('LISTEN "OutgoingMessages"')
    conn = q.connect()
    m.insert_many(conn, [m.NewRow(conversation="c1", retry_after=at(-60), body=f"hi {i}")
                         for i in range(3)])
    m.insert(conn, m.NewRow(conversation="c2", retry_after=at(-60), body="other"))
    m.notify(conn, "c1")
    conn.commit()
    assert [(n.channel, n.payload) for n in listener.notifies(timeout=5, stop_after=1)] == [
        ("OutgoingMessages", "c1")]

    head = m.fifo_claim(conn, group="c1", now=T0, locked_until=at(30))
    conn.commit()
    assert head is not None and (head.body, head.attempt) == ("hi 0", 1)
    assert m.fifo_claim(conn, group="c1", now=at(1), locked_until=at(31)) is None
    conn.commit()
    assert m.renew(conn, id=head.MessageId, locked_until=at(30), attempt=1,
                   new_locked_until=at(60))
    assert m.retry_after(conn, id=head.MessageId, locked_until=at(60), attempt=1,
                         retry_after=at(100))
    conn.commit()

    bodies = []
    while (row := m.fifo_claim(conn, group="c1", now=at(2), locked_until=at(32))) is not None:
        conn.commit()
        bodies.append(row.body)
        if row.body == "hi 1" and row.attempt == 1:
            assert m.retry(conn, id=row.MessageId, locked_until=at(32), attempt=row.attempt)
        else:
            assert m.finish(conn, id=row.MessageId, locked_until=at(32), attempt=row.attempt)
        conn.commit()
    assert bodies == ["hi 1", "hi 1", "hi 2"]

    (other,) = m.claim(conn, group="c2", now=at(3), locked_until=at(33))
    conn.commit()
    assert m.finish(conn, id=other.MessageId, locked_until=at(33), attempt=0) is False
    assert m.finish(conn, id=other.MessageId, locked_until=at(33), attempt=other.attempt)
    conn.commit()
    assert [(r["conversation"], r["body"], r["attempt"]) for r in q.rows()] == [
        ("c1", "hi 0", 2)]


# -- 12. Time columns without a time zone -------------------------------------------------------

# PostgreSQL: a TIMESTAMPTZ retry_after beside TIMESTAMP (without time zone) lease and processed
# columns, which hold UTC; the session runs in Europe/Berlin (UTC+1 in January).
MIXED_SPEC = """
table = "jobs"
dialect = "postgres"

[columns]
id = { role = "id", generated = true }
retry_after = "retry_after"
attempt = { role = "attempt", generated = true }
processed_at = "processed_at"
locked_until = "locked_until"
payload = { role = "payload", codec = "text" }
"""
MIXED_DDL = """
CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    retry_after TIMESTAMPTZ NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 1,
    processed_at TIMESTAMP,
    locked_until TIMESTAMP,
    payload TEXT NOT NULL
);
CREATE INDEX jobs_claim ON jobs (retry_after, id);
"""
NAIVE_DDL = MIXED_DDL.replace("TIMESTAMPTZ", "TIMESTAMP")


def test_naive_timestamp_lease_holds_in_a_non_utc_session(queue: MakeQueue) -> None:
    q = queue("postgres", spec=MIXED_SPEC, ddl=NAIVE_DDL)
    conn = q.connect(time_zone="Europe/Berlin")
    row = leased_row(q, conn)
    assert q.claim(conn, now=at(1), limit=10) == []
    conn.commit()
    assert q.settle("finish", conn, row, now=at(5))
    conn.commit()
    stored = q.row(q.id_of(row))
    assert stored is not None
    assert stored["processed_at"] == at(5).replace(tzinfo=None)  # UTC, as the column holds


def test_mixed_time_role_types_are_refused_at_build(queue: MakeQueue) -> None:
    # `now` is bound once per statement: a TIMESTAMPTZ beside TIMESTAMP time roles would be read
    # in the session's time zone, so the build refuses the mix.
    with pytest.raises(CheckFailed, match=r'"jobs.processed_at" is TIMESTAMP but '
                                          r'"jobs.retry_after" \(retry_after\) is TIMESTAMPTZ'):
        queue("postgres", spec=MIXED_SPEC, ddl=MIXED_DDL)


# -- Every statement of a module runs --------------------------------------------------------------

TOURS = [
    pytest.param("sqlite", "reports", None, id="example-reports"),
    pytest.param("sqlite", "shop_emails", None, id="example-shop_emails"),
    pytest.param("sqlite", "shop_checkout", None, id="example-shop_checkout"),
    pytest.param("sqlite", "thumbnails", None, id="example-thumbnails"),
    pytest.param("postgres", "mailer", None, id="example-mailer"),
    pytest.param("postgres", "ledger", None, id="example-ledger"),
    pytest.param("postgres", "chat", None, id="example-chat"),
    pytest.param("postgres", None, Layout("row_lock", group=True, fifo=True, dead="group"),
                 id="postgres-row_lock-fifo-dead_group"),
    pytest.param("postgres", None, Layout("row_lock", dead="table", unique=True),
                 id="postgres-row_lock-dead_table-unique"),
    pytest.param("postgres", None, Layout("row_lock", group=True, count_crashes=True,
                                          dead="group"),
                 id="postgres-row_lock-count_crashes-dead_group"),
    pytest.param("postgres", None, Layout("row_lock", count_crashes=True, dead="table"),
                 id="postgres-row_lock-count_crashes-dead_table"),
    pytest.param("postgres", None, Layout("lease", group=True, fifo=True, dead="group"),
                 id="postgres-lease-fifo-dead_group"),
    pytest.param("postgres", None, Layout("lease", dead="table", unique=True),
                 id="postgres-lease-dead_table-unique"),
    pytest.param("sqlite", None, Layout("lease", group=True, fifo=True, dead="group"),
                 id="sqlite-lease-fifo-dead_group"),
    pytest.param("sqlite", None, Layout("lease", dead="table", unique=True, processed=False),
                 id="sqlite-lease-dead_table-unique"),
    pytest.param("postgres", None, Layout("advisory", group=True, dead="group"),
                 id="postgres-advisory-dead_group"),
    pytest.param("postgres", None, Layout("advisory", dead="table", processed=False),
                 id="postgres-advisory-dead_table"),
    pytest.param("sqlite", None, Layout("advisory", group=True, dead="group"),
                 id="sqlite-advisory-dead_group"),
    pytest.param("sqlite", None, Layout("advisory", dead="table", unique=True),
                 id="sqlite-advisory-dead_table-unique"),
    pytest.param("mysql", "mailer_mariadb", None, id="example-mailer_mariadb"),
    pytest.param("mysql", None, Layout("row_lock", group=True, fifo=True, dead="group"),
                 id="mysql-row_lock-fifo-dead_group"),
    pytest.param("mysql", None, Layout("row_lock", dead="table", unique=True),
                 id="mysql-row_lock-dead_table-unique"),
    pytest.param("mysql", None, Layout("row_lock", group=True, count_crashes=True,
                                       dead="group"),
                 id="mysql-row_lock-count_crashes-dead_group"),
    pytest.param("mysql", None, Layout("row_lock", count_crashes=True, dead="table"),
                 id="mysql-row_lock-count_crashes-dead_table"),
    pytest.param("mysql", None, Layout("lease", group=True, fifo=True, dead="group"),
                 id="mysql-lease-fifo-dead_group"),
    pytest.param("mysql", None, Layout("lease", dead="table", unique=True),
                 id="mysql-lease-dead_table-unique"),
    pytest.param("mysql", None, Layout("advisory", group=True, dead="group"),
                 id="mysql-advisory-dead_group"),
    pytest.param("mysql", None, Layout("advisory", dead="table", processed=False),
                 id="mysql-advisory-dead_table"),
]


@pytest.mark.parametrize(("dialect", "example", "layout"), TOURS)
def test_every_generated_statement_runs_on_the_database(
        queue: MakeQueue, dialect: str, example: str | None, layout: Layout | None) -> None:
    q = queue(dialect, example or layout)
    ran = set(tour(q))
    missing = [name for name, sql in q.mod.STATEMENTS.items() if sql not in ran]
    assert missing == []


# -- Batch settlements (FINISH_MANY, RENEW_MANY) --------------------------------------------------

BATCH_LEASES = ["postgres", "sqlite"]  # MySQL has no UPDATE ... RETURNING: its leases settle alone


def five_leased_rows_two_taken(q: Queue, conn: Any) -> tuple[list[Any], set[int]]:
    """Five rows claimed by this worker, the second and the fourth under a short lease that ran
    out, so another worker claimed those two since: this worker's tokens for them are stale."""
    for _ in range(5):
        q.add(conn)
    rows = [q.claim_one(conn, now=T0, until=at(10 if i in (1, 3) else 30)) for i in range(5)]
    conn.commit()
    other = q.connect()
    taken = q.claim(other, now=at(11), until=at(61), limit=5)
    other.commit()
    assert [q.id_of(r) for r in taken] == [q.id_of(rows[1]), q.id_of(rows[3])]
    return rows, {q.id_of(r) for r in taken}


def batch_tokens(q: Queue, rows: list[Any]) -> dict[str, list[Any]]:
    tokens = [q.token(r) for r in rows]
    return {k: [t[k] for t in tokens] for k in tokens[0]}


@pytest.mark.parametrize("dialect", BATCH_LEASES)
def test_finish_many_settles_the_held_rows_and_names_exactly_those(
        queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout(form="lease"))
    conn = q.connect()
    rows, lost = five_leased_rows_two_taken(q, conn)
    settled = call(q.mod.finish_many, conn, now=at(40), **batch_tokens(q, rows))
    conn.commit()
    held = {q.id_of(r) for r in rows} - lost
    assert sorted(settled) == sorted(held)
    for row in rows:
        stored = q.row(q.id_of(row))
        assert stored is not None
        if q.id_of(row) in lost:  # the other worker's lease is untouched
            assert (stored["processed_at"], stored["locked_until"]) == (None, at(61))
        else:
            assert (stored["processed_at"], stored["locked_until"]) == (at(40), None)


@pytest.mark.parametrize("dialect", BATCH_LEASES)
def test_renew_many_extends_the_held_leases_only(queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout(form="lease"))
    conn = q.connect()
    rows, lost = five_leased_rows_two_taken(q, conn)
    renewed = call(q.mod.renew_many, conn, new_locked_until=at(90), **batch_tokens(q, rows))
    conn.commit()
    assert sorted(renewed) == sorted({q.id_of(r) for r in rows} - lost)
    for row in rows:
        stored = q.row(q.id_of(row))
        assert stored is not None
        assert stored["locked_until"] == (at(61) if q.id_of(row) in lost else at(90))
    # The new expiry is the token now; the old one settles nothing.
    kept = [r for r in rows if q.id_of(r) not in lost]
    assert call(q.mod.finish_many, conn, now=at(40), **batch_tokens(q, kept)) == []
    conn.rollback()


def test_row_lock_finish_many_deletes_the_claimed_rows_in_the_claims_transaction(
        queue: MakeQueue) -> None:
    # PostgreSQL: MySQL/MariaDB's row lock settles its rows one at a time.
    q = queue("postgres", Layout(form="row_lock", processed=False))
    conn = q.connect()
    for _ in range(4):
        q.add(conn)
    rows = q.claim(conn, limit=3)
    assert call(q.mod.finish_many, conn, id=[q.id_of(r) for r in rows]) == 3
    assert len(q.ids()) == 4  # not committed yet: another session still sees every row
    conn.commit()
    assert q.ids() == sorted(set(q.ids()) - {q.id_of(r) for r in rows})
    assert len(q.ids()) == 1
