"""Inserts: generated and default columns left to the database, the ids insert returns, bulk
inserts and unique keys."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pymysql
import pymysql.cursors
import pytest
from dbcases import (
    DIALECTS,
    LEDGERS,
    SERVERS,
    Layout,
    MakeQueue,
    at,
    executed,
    json_value,
    sent,
    spec_toml,
)


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


ARRAY_SPEC = spec_toml("jobs", {"id": "id generated", "locked_until": "locked_until",
                                "payload": "payload text"})
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
