"""Every role bound to a column whose name is not the role's, on every dialect and claim form.

The examples bind most roles to columns named after them, so a generated statement or function
that uses a role's name where it needs the column's name (SQL) or its attribute (Python) works
there and nowhere else. Two sets of names, neither with a role under its own name:

- SWAPPED: each role under the name of another role's column (the lease expiry in a column
  called `processed_at`, the due time in one called `locked_until`, ...), so that a name looked
  up by role finds the wrong column instead of none;
- QUOTED: mixed-case names with spaces and punctuation (quote characters of each dialect,
  a dot, parentheses, a letter outside ASCII), which only quoted identifiers can hold and whose
  Python attributes differ from the column names (`Due At` is `Due_At`), so that a role's name
  or a column's name used for an attribute finds none.

Each table has every role the form allows (lease only for `locked_until`), dead letters to a
group or a table, FIFO groups and a unique key where the form has them. The generated functions
run on real databases (PostgreSQL, MariaDB, SQLite files); the table is read back on another
connection by column name, and a Worker serves each form once per name set.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from dbcases import LEASE, T0, Layout, MakeQueue, Queue, at, tour

from inboxgen import Worker, ack
from inboxgen.testing import FakeClock, run_until_idle

SWAPPED = {"id": "attempt", "priority": "id", "attempt": "priority",
           "retry_after": "locked_until", "processed_at": "retry_after",
           "locked_until": "processed_at",
           "group": "payload", "headers": "group", "payload": "headers"}
QUOTED = {"id": "JobKey", "group": 'Lane "Q"', "priority": "Rank", "retry_after": "Due At",
          "attempt": "Try`Count", "processed_at": "Done (At)", "locked_until": "Lease End",
          "headers": "Meta.Über", "payload": "Body's"}
NAME_SETS = {"swapped": SWAPPED, "quoted": QUOTED}

# (dialect, form, layout options) for every claim form of each dialect.
SHAPES: list[tuple[str, str, dict[str, Any]]] = [
    *((dialect, form, options)
      for dialect in ("postgres", "mysql")
      for form, options in (
          ("row_lock", {"fifo": True, "dead": "group"}),
          ("row_lock", {"dead": "table", "unique": True}),
          ("row_lock", {"count_crashes": True, "dead": "table"}),
          ("lease", {"fifo": True, "dead": "group"}),
          ("lease", {"dead": "table", "unique": True}),
          ("advisory", {"dead": "group"}),
          ("advisory", {"dead": "table", "unique": True}),
      )),
    ("sqlite", "lease", {"fifo": True, "dead": "group"}),
    ("sqlite", "lease", {"dead": "table", "unique": True}),
    ("sqlite", "advisory", {"dead": "group"}),
    ("sqlite", "advisory", {"dead": "table", "unique": True}),
]


def layout(form: str, names: Mapping[str, str], **options: Any) -> Layout:
    # The advisory key is made of two role columns (one job per key).
    key = f"lane-{{{names['group']}}}-job-{{{names['id']}}}"
    return Layout(form=form, group=True, headers=True, names=names, key=key, **options)


def shape_id(dialect: str, form: str, options: dict[str, Any]) -> str:
    extra = [k if v is True else f"{k}_{v}" for k, v in options.items()]
    return "-".join([dialect, form, *extra])


TABLES = [(f"{shape_id(dialect, form, options)}-{names_id}", dialect,
           layout(form, names, **options))
          for names_id, names in NAME_SETS.items()
          for dialect, form, options in SHAPES]


def cases(keep: Callable[[Layout], bool] = lambda lay: True) -> list[Any]:
    return [pytest.param(dialect, lay, id=id) for id, dialect, lay in TABLES if keep(lay)]


CASES = cases()
LEASE_CASES = cases(lambda lay: lay.form == "lease")
FIFO_CASES = cases(lambda lay: lay.fifo)
UNIQUE_CASES = cases(lambda lay: lay.unique)
# One table per claim form and dialect, for the worker.
WORKER_CASES = [pytest.param(dialect, layout(form, names, dead="group"),
                             id=f"{dialect}-{form}-{names_id}")
                for names_id, names in NAME_SETS.items()
                for dialect, forms in (("postgres", ("row_lock", "lease", "advisory")),
                                       ("mysql", ("row_lock", "lease", "advisory")),
                                       ("sqlite", ("lease", "advisory")))
                for form in forms]

# -- helpers: rows by role -----------------------------------------------------------------------


def new(q: Queue, **values: Any) -> Any:
    """A NewRow with the given values by role (or, for a data column, by name); other columns
    as Queue.new fills them."""
    return q.new(**{q.role_attrs.get(name, name): value for name, value in values.items()})


def add(q: Queue, conn: Any, **by_role: Any) -> int:
    """Insert one row (committed) and return its id."""
    q.mod.insert(conn, new(q, **by_role))
    conn.commit()
    return max(q.ids())


def json_value(value: Any) -> Any:
    """A JSON column as read: PostgreSQL's jsonb is decoded already, MySQL's JSON and SQLite's
    TEXT are text."""
    return json.loads(value) if isinstance(value, str) else value


def claimed(q: Queue, row: Any) -> dict[str, Any]:
    """A ClaimedRow's value of each role (headers decoded)."""
    out = {role: q.value(row, role) for role in q.role_attrs}
    out["headers"] = json_value(out["headers"])
    return out


def stored(q: Queue, id: int, table: str | None = None) -> dict[str, Any]:
    """The row as another connection sees it, by role (read by column name; headers decoded)."""
    (raw,) = [r for r in q.rows(table) if r[q.roles["id"]] == id]
    out = {role: raw[column] for role, column in q.roles.items()}
    out["headers"] = json_value(out["headers"])
    return out


def commit_claim(q: Queue, conn: Any) -> None:
    """Lease and advisory claims are committed at once; a row lock claim stays open."""
    if q.form != "row_lock":
        conn.commit()


def claim_counts(q: Queue) -> bool:
    """Whether the claim (rather than a retry) counts the attempt."""
    return q.form != "row_lock" or q.count_crashes


# -- every generated function --------------------------------------------------------------------


@pytest.mark.parametrize(("dialect", "lay"), CASES)
def test_every_generated_statement_runs_and_finds_its_row(
        queue: MakeQueue, dialect: str, lay: Layout) -> None:
    q = queue(dialect, lay)
    ran = set(tour(q))
    assert [name for name, sql in q.mod.STATEMENTS.items() if sql not in ran] == []


@pytest.mark.parametrize(("dialect", "lay"), CASES)
def test_claim_and_settlements_read_and_write_the_bound_columns(
        queue: MakeQueue, dialect: str, lay: Layout) -> None:
    q = queue(dialect, lay)
    conn = q.connect()
    first = add(q, conn, priority=0, retry_after=at(-60), headers={"trace": "t1"},
                payload="first")
    second = add(q, conn, priority=5, retry_after=at(-90), headers=None, payload="second")
    add(q, conn, group="other", priority=-1, payload="elsewhere")

    # The claim returns the first row of group g in claim order, every role in its place.
    row = q.claim_one(conn, now=T0, until=at(30))
    commit_claim(q, conn)
    expected = {"id": first, "group": "g", "priority": 0, "retry_after": at(-60), "attempt": 1,
                "processed_at": None, "headers": {"trace": "t1"}, "payload": "first"}
    if q.form == "lease":
        expected["locked_until"] = at(30)
    assert claimed(q, row) == expected
    seen = stored(q, first)
    assert seen["attempt"] == (2 if claim_counts(q) else 1)
    token = q.token(row)
    if q.form == "lease":
        assert seen["locked_until"] == at(30)
        assert q.settle("renew", conn, row, new_locked_until=at(90))
        conn.commit()
        assert stored(q, first)["locked_until"] == at(90)
        token["locked_until"] = at(90)

    # retry_after: due later, the lease dropped, the attempt counted once in all.
    assert q.settle("retry_after", conn, row, **token, retry_after=at(-10))
    conn.commit()
    q.release(conn, row)
    seen = stored(q, first)
    assert (seen["retry_after"], seen["attempt"], seen["processed_at"]) == (at(-10), 2, None)
    if q.form == "lease":
        assert seen["locked_until"] is None

    # Claimed again (still first in claim order), then dead-lettered with its attempt.
    row = q.claim_one(conn, now=T0, until=at(30))
    commit_claim(q, conn)
    assert (q.id_of(row), q.value(row, "attempt"), q.value(row, "retry_after")) == (
        first, 2, at(-10))
    assert q.settle("dead_letter", conn, row)
    conn.commit()
    q.release(conn, row)
    expected = {**expected, "retry_after": at(-10), "attempt": 2}
    if q.form == "lease":
        expected["locked_until"] = None
    if lay.dead == "group":
        assert stored(q, first) == {**expected, "group": "dead"}
    else:
        assert stored(q, first, "jobs_dead") == expected
        assert first not in q.ids()

    # The second row is next; finish marks it processed and clears its lease.
    row = q.claim_one(conn, now=T0, until=at(30))
    commit_claim(q, conn)
    assert claimed(q, row)["payload"] == "second" and q.id_of(row) == second
    assert claimed(q, row)["headers"] is None
    assert q.settle("finish", conn, row, now=at(5))
    conn.commit()
    q.release(conn, row)
    seen = stored(q, second)
    assert seen["processed_at"] == at(5)
    if q.form == "lease":
        assert seen["locked_until"] is None
    assert q.claim(conn, now=at(100), limit=10) == []


@pytest.mark.parametrize(("dialect", "lay"), LEASE_CASES)
def test_lease_settlements_with_a_stale_token_change_nothing(
        queue: MakeQueue, dialect: str, lay: Layout) -> None:
    q = queue(dialect, lay)
    conn = q.connect()
    add(q, conn)
    row = q.claim_one(conn, now=T0, until=at(30))
    conn.commit()
    before = q.rows()
    for wrong in ({"locked_until": at(31)}, {"attempt": q.value(row, "attempt") + 1},
                  {"attempt": q.value(row, "attempt") - 1}):
        for name in ("renew", "finish", "retry", "retry_after", "dead_letter"):
            settled = q.settle(name, conn, row, retry_after=at(60), new_locked_until=at(90),
                               **wrong)
            conn.rollback()
            assert settled is False, (name, wrong)
    assert q.rows() == before
    assert q.settle("finish", conn, row, now=at(5))  # the held token
    conn.commit()
    assert stored(q, q.id_of(row))["processed_at"] == at(5)


@pytest.mark.parametrize(("dialect", "lay"), FIFO_CASES)
def test_fifo_claim_takes_the_head_and_holds_the_group(
        queue: MakeQueue, dialect: str, lay: Layout) -> None:
    q = queue(dialect, lay)
    holder, other = q.connect(), q.connect()
    add(q, holder, group="other")
    ids = [add(q, holder, priority=i, payload=f"job-{i}") for i in range(3)]
    head = q.fifo_claim(holder, now=T0, until=at(30))
    commit_claim(q, holder)
    assert head is not None
    got = claimed(q, head)
    assert (got["id"], got["group"], got["attempt"], got["payload"]) == (ids[0], "g", 1, "job-0")
    if q.form == "lease":
        assert got["locked_until"] == at(30)
        seen = stored(q, ids[0])
        assert (seen["locked_until"], seen["attempt"]) == (at(30), 2)
    # The group is held: by the head's lease, or by the holder's open transaction.
    assert q.fifo_claim(other, now=at(10), until=at(40)) is None
    other.rollback()
    assert q.settle("finish", holder, head, now=at(1))
    holder.commit()
    nxt = q.fifo_claim(other, now=at(10), until=at(40))
    commit_claim(q, other)
    assert nxt is not None and q.id_of(nxt) == ids[1]
    assert q.settle("finish", other, nxt, now=at(11))
    other.commit()
    if q.form == "lease":  # an expired lease frees the group
        head = q.fifo_claim(holder, now=at(20), until=at(50))
        holder.commit()
        assert head is not None and q.id_of(head) == ids[2]
        again = q.fifo_claim(other, now=at(50), until=at(80))
        other.commit()
        assert again is not None and (q.id_of(again), q.value(again, "attempt")) == (ids[2], 2)


@pytest.mark.parametrize(("dialect", "lay"), UNIQUE_CASES)
def test_insert_unique_skips_a_row_whose_key_is_queued(
        queue: MakeQueue, dialect: str, lay: Layout) -> None:
    q = queue(dialect, lay)
    conn = q.connect()
    m = q.mod
    assert m.insert_unique(conn, new(q, account="order-1", payload="first")) is True
    assert m.insert_unique(conn, new(q, account="order-1", payload="again")) is False
    assert m.insert_unique(conn, new(q, account="order-1", group="other",
                                     payload="other group")) is True
    conn.commit()
    assert [(r["account"], r[q.roles["group"]], r[q.roles["payload"]]) for r in q.rows()] == [
        ("order-1", "g", "first"), ("order-1", "other", "other group")]


# -- a worker ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("dialect", "lay"), WORKER_CASES)
def test_worker_serves_the_table_and_dead_letters_a_failing_job(
        queue: MakeQueue, dialect: str, lay: Layout) -> None:
    q = queue(dialect, lay)
    conn = q.connect()
    ok = add(q, conn, priority=0, headers={"trace": "t-ok"}, payload="ok")
    flaky = add(q, conn, priority=1, headers={"trace": "t-flaky"}, payload="flaky")
    poison = add(q, conn, priority=2, headers=None, payload="poison")
    deliveries: list[tuple[int, int | None, str, dict[str, str]]] = []
    first_rows: dict[str, dict[str, Any]] = {}  # payload -> the row of its first delivery

    def handle(job: Any) -> Any:
        deliveries.append((job.id, job.attempt, job.payload, dict(job.headers)))
        first_rows.setdefault(job.payload, claimed(q, job.row))
        if job.payload == "poison" or (job.payload == "flaky" and job.attempt == 1):
            raise RuntimeError(f"{job.payload} fails")
        return ack()

    clock = FakeClock(T0)
    worker = Worker(q.mod.DESCRIPTOR, handle, database=q.target, group="g", lease=LEASE,
                    clock=clock, listen=False)

    def pending() -> bool:
        group, processed = q.roles["group"], q.roles["processed_at"]
        return any(r[group] == "g" and r[processed] is None for r in q.rows())

    async def serve() -> None:
        # A failed job comes back after a backoff of seconds: move the clock on until it has.
        await worker.start()
        try:
            for _ in range(10):
                await run_until_idle(worker, timeout=30)
                if not pending():
                    break
                clock.advance(60)
        finally:
            await worker.shutdown()

    asyncio.run(serve())
    assert sorted(deliveries) == [
        (ok, 1, "ok", {"trace": "t-ok"}), (flaky, 1, "flaky", {"trace": "t-flaky"}),
        (flaky, 2, "flaky", {"trace": "t-flaky"}),
        (poison, 1, "poison", {}), (poison, 2, "poison", {}), (poison, 3, "poison", {})]
    # The row handed to the handler holds each role's value in that role's attribute.
    expected = {"id": ok, "group": "g", "priority": 0, "retry_after": at(-60), "attempt": 1,
                "processed_at": None, "headers": {"trace": "t-ok"}, "payload": "ok"}
    if q.form == "lease":
        expected["locked_until"] = at(LEASE)  # the first claim, at T0
    assert first_rows["ok"] == expected
    done = {id: stored(q, id) for id in (ok, flaky, poison)}
    assert [(id, row["group"], row["processed_at"] is not None) for id, row in done.items()] == [
        (ok, "g", True), (flaky, "g", True), (poison, "dead", False)]
    assert done[poison]["attempt"] == 3
