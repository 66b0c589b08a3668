"""insert_replace() and insert_debounced(): a row of a unique key that is queued and held by no
worker takes the new row's values (and, debounced, a due time moved later, bounded by
`max_wait`); one in work, finished or dead is left alone and the call says so; on every dialect
and each claim form that has them (not the advisory form, which has no cancel either)."""

from __future__ import annotations

import datetime as dt
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pymysql
import pytest
from dbcases import T0, Layout, MakeQueue, Queue
from pymysql.constants import CLIENT
from semantics_util import serve_until

from inboxgen import Job, Worker, values
from inboxgen.testing import FakeClock

pytestmark = pytest.mark.usefixtures("log_inboxgen")

SECOND = dt.timedelta(seconds=1)

SHAPES = [
    pytest.param("postgres", Layout(form="row_lock", unique=True, processed=False,
                                    enqueued_at=True), id="postgres-row_lock-deleted"),
    pytest.param("postgres", Layout(form="row_lock", unique=True, count_crashes=True,
                                    dead="table", enqueued_at=True),
                 id="postgres-counted-dead_table"),
    pytest.param("postgres", Layout(form="lease", unique=True, group=True, dead="group",
                                    unique_group=False, enqueued_at=True),
                 id="postgres-lease-dead_group"),
    pytest.param("mysql", Layout(form="row_lock", unique=True, processed=False,
                                 enqueued_at=True), id="mysql-row_lock-deleted"),
    pytest.param("mysql", Layout(form="row_lock", unique=True, count_crashes=True,
                                 dead="table", enqueued_at=True), id="mysql-counted-dead_table"),
    pytest.param("mysql", Layout(form="lease", unique=True, group=True, dead="group",
                                 unique_group=False, enqueued_at=True),
                 id="mysql-lease-dead_group"),
    pytest.param("sqlite", Layout(form="lease", unique=True, enqueued_at=True),
                 id="sqlite-lease"),
    pytest.param("sqlite", Layout(form="lease", unique=True, processed=False, dead="group",
                                  group=True, unique_group=False, enqueued_at=True),
                 id="sqlite-lease-deleted-dead_group"),
]


def _replace(q: Queue, account: str, payload: str, **fields: Any) -> Any:
    with q.db.transaction() as conn:
        return q.mod.insert_replace(conn, q.new(account=account, payload=payload, **fields))


def _of(q: Queue, account: str) -> list[dict[str, Any]]:
    return [r for r in q.rows() if r["account"] == account]


def _hold(q: Queue, conn: Any) -> Any:
    """Claim the one due row as a worker does and keep it: the row lock's transaction stays
    open, a counted row's key stays locked on the session, a lease runs to 2030."""
    row = q.claim_one(conn, until=T0 + dt.timedelta(seconds=30))
    if q.form == "lease":
        conn.commit()
    return row


@pytest.mark.parametrize(("dialect", "shape"), SHAPES)
def test_a_queued_row_is_replaced_and_one_in_work_finished_or_dead_is_kept(
        dialect: str, shape: Layout, queue: MakeQueue) -> None:
    q = queue(dialect, shape)
    first = _replace(q, "ada", "one")
    assert first.outcome == "queued"
    assert [r["payload"] for r in q.rows()] == ["one"]

    # Queued and free: the new values, the same row.
    again = _replace(q, "ada", "two", retry_after=T0 - 30 * SECOND)
    assert (again.outcome, again.id) == ("replaced", first.id)
    (row,) = q.rows()
    assert (row["payload"], row["retry_after"]) == ("two", T0 - 30 * SECOND)

    # In work: left alone, and the call says which row kept it.
    holder = q.connect()
    try:
        held = _hold(q, holder)
        busy = _replace(q, "ada", "three")
        assert (busy.outcome, busy.id) == ("kept", first.id)
        assert [r["payload"] for r in _of(q, "ada")] == ["two"]
        # A retry spends the attempt; the job then waits, queued again.
        assert q.settle("retry_after", holder, held, retry_after=T0 - 10 * SECOND)
        holder.commit()
        q.release(holder, held)
        holder.commit()
    finally:
        holder.close()
    (row,) = _of(q, "ada")
    assert row["attempt"] == 2
    fresh = _replace(q, "ada", "four")
    assert (fresh.outcome, fresh.id) == ("replaced", first.id)
    (row,) = _of(q, "ada")
    assert (row["payload"], row["attempt"]) == ("four", 1)  # its attempts count from the start

    # Finished: kept where the table keeps finished rows; a new row where it deletes them.
    holder = q.connect()
    try:
        held = _hold(q, holder)
        assert q.settle("finish", holder, held)
        holder.commit()
        q.release(holder, held)
        holder.commit()
    finally:
        holder.close()
    after = _replace(q, "ada", "five")
    if shape.processed:
        assert (after.outcome, after.id) == ("kept", first.id)
        assert [r["payload"] for r in _of(q, "ada")] == ["four"]
    else:
        assert after.outcome == "queued"  # (SQLite may give it the deleted row's id again)
        assert [(r["id"], r["payload"]) for r in _of(q, "ada")] == [(after.id, "five")]


@pytest.mark.parametrize(("dialect", "shape"), [p for p in SHAPES if p.values[1].dead])
def test_a_dead_letter_is_kept_in_its_group_and_a_new_row_is_queued_beside_its_table(
        dialect: str, shape: Layout, queue: MakeQueue) -> None:
    q = queue(dialect, shape)
    first = _replace(q, "bob", "one")
    holder = q.connect()
    try:
        held = _hold(q, holder)
        assert q.settle("dead_letter", holder, held)
        holder.commit()
        q.release(holder, held)
        holder.commit()
    finally:
        holder.close()
    after = _replace(q, "bob", "two")
    if shape.dead == "group":
        assert (after.outcome, after.id) == ("kept", first.id)
        assert [(r["payload"], r["grp"]) for r in _of(q, "bob")] == [("one", "dead")]
    else:
        assert after.outcome == "queued"
        assert [r["payload"] for r in _of(q, "bob")] == ["two"]


def test_a_lease_that_ran_out_is_replaced_and_its_holder_loses_it(queue: MakeQueue) -> None:
    q = queue("postgres", Layout(form="lease", unique=True, enqueued_at=True))
    first = _replace(q, "ada", "one")
    ran_out = q.db.rows("SELECT now()")[0][0] - SECOND  # by the database's clock
    with q.db.transaction() as conn:
        held = q.claim_one(conn, until=ran_out)
    assert _replace(q, "ada", "two").outcome == "replaced"
    with q.db.transaction() as conn:
        assert not q.settle("finish", conn, held)  # its token no longer holds
    (row,) = q.rows()
    assert (row["id"], row["payload"], row["locked_until"], row["processed_at"]) == (
        first.id, "two", None, None)


def _due_and_enqueued(q: Queue, account: str) -> tuple[dt.datetime, dt.datetime, dt.datetime]:
    """The row's due time, when it was enqueued, and the database's time now."""
    (row,) = _of(q, account)
    return (row["retry_after"], row["enqueued_at"], _db_now(q))


def _db_now(q: Queue) -> dt.datetime:
    sql = {"postgres": "SELECT now()", "mysql": "SELECT UTC_TIMESTAMP(6)",
           "sqlite": "SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')"}[q.dialect]
    now = q.db.rows(sql)[0][0]
    return values.parse_sqlite_time(now) if isinstance(now, str) else now


def _debounce(q: Queue, account: str, payload: str, wait: float, max_wait: float) -> Any:
    with q.db.transaction() as conn:
        return q.mod.insert_debounced(conn, q.new(account=account, payload=payload),
                                      wait=wait * SECOND, max_wait=max_wait * SECOND)


@pytest.mark.parametrize(("dialect", "shape"), SHAPES)
def test_debounce_moves_the_due_time_later_but_never_past_max_wait(
        dialect: str, shape: Layout, queue: MakeQueue) -> None:
    q = queue(dialect, shape)
    tolerance = 2 * SECOND  # the database's clock moves between the call and the reading
    first = _debounce(q, "ada", "one", wait=30, max_wait=600)
    assert first.outcome == "queued"
    due, enqueued, now = _due_and_enqueued(q, "ada")
    assert now - tolerance <= due - 30 * SECOND <= now
    again = _debounce(q, "ada", "two", wait=300, max_wait=600)
    assert (again.outcome, again.id) == ("replaced", first.id)
    later, _, now = _due_and_enqueued(q, "ada")
    assert later > due and now - tolerance <= later - 300 * SECOND <= now
    # max_wait counts from the first enqueue: the due time stops there.
    bounded = _debounce(q, "ada", "three", wait=3000, max_wait=60)
    assert bounded.outcome == "replaced"
    due, enqueued_now, _ = _due_and_enqueued(q, "ada")
    assert (due, enqueued_now) == (enqueued + 60 * SECOND, enqueued)
    assert [r["payload"] for r in _of(q, "ada")] == ["three"]
    # A first call whose max_wait is the shorter falls due then.
    assert _debounce(q, "bob", "one", wait=3000, max_wait=5).outcome == "queued"
    due, enqueued, _ = _due_and_enqueued(q, "bob")
    assert abs(due - (enqueued + 5 * SECOND)) < tolerance


def _in_four_threads(calls: Callable[[int], None]) -> list[BaseException]:
    """Run calls(0) to calls(3) at once, each on its own thread; what they raised."""
    failures: list[BaseException] = []

    def run(thread: int) -> None:
        try:
            calls(thread)
        except BaseException as err:  # reported by the test, on its own thread
            failures.append(err)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return failures


@pytest.mark.parametrize(("dialect", "shape"), SHAPES[:7])
def test_a_thousand_debounced_calls_from_four_threads_run_the_job_once(
        dialect: str, shape: Layout, queue: MakeQueue) -> None:
    q = queue(dialect, shape)
    outcomes: Counter[str] = Counter()
    lock = threading.Lock()

    def calls(thread: int) -> None:
        for n in range(250):
            done = _debounce(q, "ada", f"call-{thread}-{n}", wait=60, max_wait=600)
            with lock:
                outcomes[done.outcome] += 1

    failures = _in_four_threads(calls)
    assert not failures, failures
    if shape.form == "row_lock" and not shape.count_crashes:
        # A worker's hold is the row's lock, which a concurrent replacement takes too: a call
        # that meets another's may find the row held (docs/spec.md).
        assert (outcomes["queued"], outcomes["replaced"] + outcomes["kept"]) == (1, 999)
    else:
        assert outcomes == {"queued": 1, "replaced": 999}
    (row,) = q.rows()
    ran: list[str] = []

    def handle(job: Job[str]) -> None:
        ran.append(job.payload)

    # Not due within the wait; past it, once.
    clock = FakeClock(dt.datetime.now(dt.UTC) + dt.timedelta(seconds=30))
    group = {"group": "g"} if shape.group else {}
    early = Worker(q.mod.DESCRIPTOR, handle, database=q.database, clock=clock, **group)
    serve_until(early, clock, lambda: False, max_seconds=5)
    assert ran == []
    clock.advance(60)
    worker = Worker(q.mod.DESCRIPTOR, handle, database=q.database, clock=clock, **group)
    serve_until(worker, clock, lambda: worker.stats.acked == 1, max_seconds=60)
    assert ran == [row["payload"]]


@pytest.mark.parametrize(("dialect", "shape"), SHAPES)
def test_four_threads_racing_to_replace_a_key_with_no_row_queue_it_once(
        dialect: str, shape: Layout, queue: MakeQueue) -> None:
    """The first calls of a key race to insert its row: one queues it, the others replace it
    (or find it held), and none fails. On MySQL/MariaDB a locking read of the key's absent row
    locks the gap, and two callers holding it would deadlock as they insert; there two of the
    threads use sessions as a user's own often are: REPEATABLE READ (MySQL's default) and
    CLIENT_FOUND_ROWS (SQLAlchemy's), where the affected-row count cannot tell an insert from
    a key's row left as it was."""
    q = queue(dialect, shape)

    def call(thread: int, key: str) -> Any:
        if not (q.mysql and thread >= 2):
            return (_debounce(q, key, f"{thread}", wait=60, max_wait=600) if thread % 2 else
                    _replace(q, key, f"{thread}"))
        conn = pymysql.connect(**q.db.mysql_args, client_flag=CLIENT.FOUND_ROWS)
        try:
            row = q.new(account=key, payload=f"{thread}")
            done = (q.mod.insert_debounced(conn, row, wait=60 * SECOND, max_wait=600 * SECOND)
                    if thread % 2 else q.mod.insert_replace(conn, row))
            conn.commit()
            return done
        finally:
            conn.close()

    keys = [f"key-{n}" for n in range(60)]
    start = threading.Barrier(4)
    outcomes: dict[str, Counter[str]] = {k: Counter() for k in keys}
    lock = threading.Lock()

    def calls(thread: int) -> None:
        try:
            for key in keys:
                start.wait()
                done = call(thread, key)
                with lock:
                    outcomes[key][done.outcome] += 1
        except BaseException:
            start.abort()  # the others stop too, rather than wait for this thread
            raise

    failures = _in_four_threads(calls)
    assert not [f for f in failures if not isinstance(f, threading.BrokenBarrierError)], failures
    assert {k: c["queued"] for k, c in outcomes.items()} == dict.fromkeys(keys, 1)
    assert sorted(r["account"] for r in q.rows()) == sorted(keys)
