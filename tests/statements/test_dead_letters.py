"""Dead letters: a spent row moves to its dead-letter group or table with what it held."""

from __future__ import annotations

import datetime as dt

import pytest
from dbcases import (
    CLAIM_FORMS,
    DIALECTS,
    LEDGERS,
    Layout,
    MakeQueue,
    at,
    commit_claim,
    json_value,
    leased_row,
)

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
