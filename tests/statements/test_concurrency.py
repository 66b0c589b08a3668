"""Concurrency: claims on several connections at once never hand a row out twice, and a claim skips
rows another transaction holds."""

from __future__ import annotations

import time
from typing import Any

import pytest
from dbcases import CLAIM_FORMS, DIALECTS, SERVERS, Layout, MakeQueue, commit_claim, run_workers


@pytest.mark.parametrize("dialect", SERVERS)
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


@pytest.mark.parametrize("dialect", SERVERS)
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


STRESS_FORMS = [form for form in CLAIM_FORMS if form.id != "sqlite-advisory"]


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
