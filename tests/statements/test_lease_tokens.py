"""Lease tokens: a settlement or renewal names the lease it holds (the expiry and the attempt the
claim returned) and finds nothing once another claim took the row."""

from __future__ import annotations

from typing import Any

import pytest
from dbcases import DIALECTS, T0, Layout, MakeQueue, at, leased_row

SETTLEMENTS = [  # settlement, dead-letter destination of the table
    pytest.param("finish", "group", id="finish"),
    pytest.param("retry", "group", id="retry"),
    pytest.param("retry_after", "group", id="retry_after"),
    pytest.param("renew", "group", id="renew"),
    pytest.param("dead_letter", "group", id="dead_letter-to-group"),
    pytest.param("dead_letter", "table", id="dead_letter-to-table"),
]
SETTLE_ARGS = {"now": at(5), "retry_after": at(60), "new_locked_until": at(90)}


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
