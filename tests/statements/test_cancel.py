"""cancel(conn, id=...): a queued row no worker holds is deleted, and the function says so; a
held row (the row lock's open transaction, a counted row's key, a live lease), a finished row
and a row already gone are left, and it says False."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from dbcases import LEASE, T0, Layout, MakeQueue, Queue, at, call

FORMS = [
    pytest.param("postgres", Layout(form="row_lock"), id="postgres-row_lock"),
    pytest.param("postgres", Layout(form="row_lock", count_crashes=True),
                 id="postgres-row_lock-counted"),
    pytest.param("postgres", Layout(form="lease"), id="postgres-lease"),
    pytest.param("sqlite", Layout(form="lease"), id="sqlite-lease"),
    pytest.param("mysql", Layout(form="row_lock"), id="mysql-row_lock"),
    pytest.param("mysql", Layout(form="row_lock", count_crashes=True),
                 id="mysql-row_lock-counted"),
    pytest.param("mysql", Layout(form="lease"), id="mysql-lease"),
]
# Where a holder keeps its row from other sessions (SQLite's row-lock holder keeps the whole
# database: a cancel waits for it instead).
HELD_FORMS = FORMS


def cancel(q: Queue, conn: Any, row_id: int, now: dt.datetime = T0) -> bool:
    done = bool(call(q.mod.cancel, conn, id=row_id, now=now))
    conn.commit()
    return done


def ids(q: Queue) -> list[int]:
    return [r["id"] for r in q.rows()]


@pytest.mark.parametrize(("dialect", "layout"), FORMS)
def test_a_queued_row_is_cancelled_once(queue: MakeQueue, dialect: str,
                                        layout: Layout) -> None:
    q = queue(dialect, layout)
    conn = q.connect()
    first, second = q.add(conn, retry_after=at(-10)), q.add(conn, retry_after=at(-5))
    assert cancel(q, conn, first) is True
    assert ids(q) == [second]
    assert cancel(q, conn, first) is False  # gone already


@pytest.mark.parametrize(("dialect", "layout"), HELD_FORMS)
def test_a_held_row_is_not_cancelled(queue: MakeQueue, dialect: str, layout: Layout) -> None:
    q = queue(dialect, layout)
    holder, other = q.connect(), q.connect()
    row_id = q.add(holder, retry_after=at(-10))
    held = q.claim_one(holder)
    if layout.form == "lease":
        holder.commit()  # the lease is the hold
    assert q.id_of(held) == row_id
    assert cancel(q, other, row_id) is False
    assert ids(q) == [row_id]


@pytest.mark.parametrize(("dialect", "layout"), [
    p for p in FORMS if p.values[1].form == "lease"])  # type: ignore[union-attr]
def test_a_lease_that_ran_out_can_be_cancelled(queue: MakeQueue, dialect: str,
                                               layout: Layout) -> None:
    q = queue(dialect, layout)
    conn = q.connect()
    row_id = q.add(conn, retry_after=at(-10))
    q.claim_one(conn)
    conn.commit()
    later = T0 + dt.timedelta(seconds=LEASE + 1)
    assert cancel(q, conn, row_id, now=later) is True
    assert ids(q) == []


@pytest.mark.parametrize("dialect", ["postgres", "sqlite", "mysql"])
def test_a_finished_row_is_not_cancelled(queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout(form="lease", processed=True))
    conn = q.connect()
    row_id = q.add(conn, retry_after=at(-10))
    row = q.claim_one(conn)
    conn.commit()
    assert q.settle("finish", conn, row)
    conn.commit()
    assert cancel(q, conn, row_id) is False
    assert ids(q) == [row_id]
