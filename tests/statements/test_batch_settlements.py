"""Batch settlements (FINISH_MANY, RENEW_MANY): each row of a batch is judged alone."""

from __future__ import annotations

from typing import Any

import pytest
from dbcases import T0, Layout, MakeQueue, Queue, at, call

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
