"""FIFO groups: a group's head goes first, one at a time, and a retry keeps it at the head."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import pytest
from dbcases import (
    DIALECTS,
    FIFO_FORMS,
    LEASE,
    SERVERS,
    T0,
    Layout,
    MakeQueue,
    Queue,
    at,
    commit_claim,
    finish,
    run_workers,
)


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
