"""[flow] pauses: pause(), resume() and paused() on every dialect and claim form. A paused queue
(or group) gives no claim any of its rows, whichever claim statement the worker runs; rows in
work settle as usual; resume() gives them back at once."""

from __future__ import annotations

from typing import Any

import pytest
from dbcases import Layout, MakeQueue, Queue, at, call

FORMS = [
    pytest.param("postgres", Layout(form="row_lock", pauses=True), id="postgres-row_lock"),
    pytest.param("postgres", Layout(form="row_lock", count_crashes=True, dead="table",
                                    pauses=True), id="postgres-row_lock-counted"),
    pytest.param("postgres", Layout(form="lease", pauses=True), id="postgres-lease"),
    pytest.param("postgres", Layout(form="advisory", pauses=True), id="postgres-advisory"),
    pytest.param("mysql", Layout(form="row_lock", pauses=True), id="mysql-row_lock"),
    pytest.param("mysql", Layout(form="row_lock", count_crashes=True, dead="group", group=True,
                                 pauses=True), id="mysql-row_lock-counted"),
    pytest.param("mysql", Layout(form="lease", pauses=True), id="mysql-lease"),
    pytest.param("mysql", Layout(form="advisory", pauses=True), id="mysql-advisory"),
    pytest.param("sqlite", Layout(form="lease", pauses=True), id="sqlite-lease"),
    pytest.param("sqlite", Layout(form="advisory", pauses=True), id="sqlite-advisory"),
]
GROUPED = [
    pytest.param("postgres", Layout(form="row_lock", group=True, pauses=True),
                 id="postgres-row_lock"),
    pytest.param("postgres", Layout(form="lease", group=True, pauses=True), id="postgres-lease"),
    pytest.param("mysql", Layout(form="row_lock", group=True, pauses=True), id="mysql-row_lock"),
    pytest.param("mysql", Layout(form="lease", group=True, pauses=True), id="mysql-lease"),
    pytest.param("sqlite", Layout(form="lease", group=True, pauses=True), id="sqlite-lease"),
]
FIFO = [pytest.param(d, f, id=f"{d}-{f}") for d, f in
        (("postgres", "row_lock"), ("postgres", "lease"), ("mysql", "row_lock"),
         ("mysql", "lease"), ("sqlite", "lease"))]


def claimed(q: Queue, conn: Any, **kwargs: Any) -> list[int]:
    """The ids one claim takes (then rolled back or, for committed claims, left held)."""
    rows = q.claim(conn, limit=10, **kwargs)
    ids = sorted(q.id_of(r) for r in rows)
    conn.rollback()
    return ids


def pause(q: Queue, conn: Any, **group: str) -> None:
    q.mod.pause(conn, **group)
    conn.commit()


def resume(q: Queue, conn: Any, **group: str) -> bool:
    lifted = bool(q.mod.resume(conn, **group))
    conn.commit()
    return lifted


@pytest.mark.parametrize(("dialect", "layout"), FORMS)
def test_a_paused_queue_gives_no_claim_its_rows(queue: MakeQueue, dialect: str,
                                                layout: Layout) -> None:
    q = queue(dialect, layout)
    admin, worker = q.connect(), q.connect()
    first = q.add(admin, retry_after=at(-10))
    pause(q, admin)
    pause(q, admin)  # again: still one pause
    assert q.mod.paused(admin) == [None]
    assert claimed(q, worker) == []
    assert resume(q, admin) is True
    assert resume(q, admin) is False  # nothing left to lift
    assert q.mod.paused(admin) == []
    assert claimed(q, worker) == [first]


@pytest.mark.parametrize(("dialect", "layout"), FORMS[:3] + FORMS[4:7])
def test_rows_in_work_settle_while_paused(queue: MakeQueue, dialect: str,
                                          layout: Layout) -> None:
    q = queue(dialect, layout)
    admin, worker = q.connect(), q.connect()
    first, second = q.add(admin, retry_after=at(-10)), q.add(admin, retry_after=at(-5))
    row = q.claim_one(worker)
    if layout.form == "lease":
        worker.commit()
    pause(q, admin)
    assert q.settle("finish", worker, row) is True
    worker.commit()
    if layout.count_crashes:
        call(q.mod.release, worker, id=[first])
        worker.commit()
    assert claimed(q, worker) == []  # the other row waits for resume()
    resume(q, admin)
    assert claimed(q, worker) == [second]


@pytest.mark.parametrize(("dialect", "layout"), GROUPED)
def test_a_paused_group_stops_alone(queue: MakeQueue, dialect: str, layout: Layout) -> None:
    q = queue(dialect, layout)
    admin, worker = q.connect(), q.connect()
    in_g = q.add(admin, retry_after=at(-10))
    in_h = q.add(admin, retry_after=at(-10), **{q.group_attr: "h"})
    pause(q, admin, group="g")
    assert q.mod.paused(admin) == ["g"]
    assert claimed(q, worker, group="g") == []
    assert claimed(q, worker, group="h") == [in_h]
    # The whole queue paused and lifted again: the group's own pause stays.
    pause(q, admin)
    assert sorted(q.mod.paused(admin), key=str) == sorted([None, "g"], key=str)
    assert claimed(q, worker, group="h") == []
    assert resume(q, admin) is True
    assert claimed(q, worker, group="g") == []
    assert resume(q, admin, group="g") is True
    assert claimed(q, worker, group="g") == [in_g]


@pytest.mark.parametrize(("dialect", "form"), FIFO)
def test_a_paused_fifo_group_gives_no_head(queue: MakeQueue, dialect: str, form: str) -> None:
    q = queue(dialect, Layout(form=form, group=True, fifo=True, pauses=True))
    admin, worker = q.connect(), q.connect()
    head = q.add(admin, retry_after=at(-10))
    pause(q, admin, group="g")
    assert q.fifo_claim(worker) is None
    worker.rollback()
    resume(q, admin, group="g")
    assert q.id_of(q.fifo_claim(worker)) == head
    worker.rollback()


def test_the_claim_by_priority_is_paused_too(queue: MakeQueue) -> None:
    q = queue("postgres", Layout(form="lease", pauses=True))
    admin, worker = q.connect(), q.connect()
    row = q.add(admin, retry_after=at(-10))
    pause(q, admin)
    assert claimed(q, worker, by_priority=True) == []
    resume(q, admin)
    assert claimed(q, worker, by_priority=True) == [row]
