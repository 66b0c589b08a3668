"""A payload its table cannot hold fails at the enqueue, before anything is written: JSON that a
typed payload's class refuses (the worker could only dead-letter it), or a value JSON cannot
encode. The error names the table and where in the payload; the caller's transaction goes on.
Every enqueue function (insert, insert_unique, insert_many), sync and async, on real databases
and every kind of payload column."""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncmy
import dbcases
import msgspec
import pytest
from dbcases import MakeQueue, Queue

from inboxgen.errors import WrongPayload

EMAIL = ("import msgspec\n\n\nclass Email(msgspec.Struct):\n    to: str\n"
         "    subject: str\n")


def case(column: str, typed: bool) -> tuple[str, str]:
    """A lease table `mail` with a unique key (so it has insert_unique), its payload JSON (of
    class Email where `typed`) in a column of type `column`."""
    kind = ', type = "mail_payloads:Email"' if typed else ""
    spec = f"""\
        table = "mail"
        dialect = "sqlite"
        unique = ["account"]

        [columns]
        id = {{ role = "id", generated = true }}
        queue = "group"
        locked_until = "locked_until"
        payload = {{ role = "payload", codec = "json"{kind} }}
        """
    ddl = f"""\
        CREATE TABLE mail (
            id {{id}},
            queue {{text}} NOT NULL,
            account {{text}} NOT NULL,
            locked_until {{lease}},
            payload {column} NOT NULL
        );
        CREATE INDEX mail_claim ON mail (queue, id);
        CREATE UNIQUE INDEX mail_once ON mail (account);
        """
    return textwrap.dedent(spec), ddl


COLUMNS = [
    pytest.param("postgres", "JSONB", id="postgres-jsonb"),
    pytest.param("postgres", "TEXT", id="postgres-text"),
    pytest.param("postgres", "BYTEA", id="postgres-bytea"),
    pytest.param("mysql", "JSON", id="mysql-json"),
    pytest.param("mysql", "TEXT", id="mysql-text"),
    pytest.param("sqlite", "TEXT", id="sqlite-text"),
    pytest.param("sqlite", "BLOB", id="sqlite-blob"),
]


def mail_queue(queue: MakeQueue, dialect: str, column: str, typed: bool, tmp_path: Path,
               monkeypatch: pytest.MonkeyPatch) -> Queue:
    (tmp_path / "mail_payloads.py").write_text(EMAIL, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    spec, ddl = case(column, typed)
    return queue(dialect, spec=spec, ddl=dbcases.typed(ddl, dialect))


Enqueue = Callable[[Any, Any], Any]


def enqueues(q: Queue) -> dict[str, Enqueue]:
    """Each enqueue function, given a connection and a NewRow."""
    m = q.mod
    return {"insert": m.insert, "insert_unique": m.insert_unique,
            "insert_many": lambda conn, row: m.insert_many(conn, [row])}


def async_enqueues(q: Queue) -> dict[str, Callable[[Any, Any], Awaitable[Any]]]:
    m = q.mod
    return {"insert_async": m.insert_async, "insert_unique_async": m.insert_unique_async,
            "insert_many_async": lambda conn, row: m.insert_many_async(conn, [row])}


def check_refusals(q: Queue, conn: Any, bad: list[tuple[Any, str]], good: Any) -> None:
    """Every enqueue function refuses every bad payload (payload, a piece of the error naming
    where it is wrong) with an error naming the table; the transaction still takes a good job
    after them, and commits it alone."""
    m = q.mod
    for name, enqueue in enqueues(q).items():
        for payload, where in bad:
            row = m.NewRow(queue="mail", account=f"{name}-{where}", payload=payload)
            with pytest.raises(WrongPayload) as err:
                enqueue(conn, row)
            message = str(err.value)
            assert "mail" in message and where in message, (name, message)
            assert isinstance(err.value, ValueError)
    m.insert(conn, m.NewRow(queue="mail", account="good", payload=good))
    conn.commit()
    assert [r["account"] for r in q.rows()] == ["good"]


@pytest.mark.parametrize(("dialect", "column"), COLUMNS)
def test_a_payload_its_type_refuses_fails_at_the_enqueue(
        queue: MakeQueue, dialect: str, column: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    q = mail_queue(queue, dialect, column, True, tmp_path, monkeypatch)
    email = __import__("mail_payloads").Email
    bad = [({"to": "a@example.com"}, "subject"),  # a dict missing a field
           (email(to=1, subject="hi"), "$.to"),  # a Struct holding the wrong type
           ({"to": "a@example.com", "subject": object()}, "$.subject")]  # not JSON at all
    check_refusals(q, q.connect(), bad, email(to="a@example.com", subject="hi"))
    # A dict whose JSON the class takes is what the worker will decode: it is enqueued.
    conn = q.connect()
    q.mod.insert(conn, q.mod.NewRow(queue="mail", account="dict",
                                    payload={"to": "b@example.com", "subject": "yo"}))
    conn.commit()
    assert [r["account"] for r in q.rows()] == ["good", "dict"]


@pytest.mark.parametrize(("dialect", "column"), COLUMNS)
def test_a_json_payload_json_cannot_encode_fails_at_the_enqueue(
        queue: MakeQueue, dialect: str, column: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    q = mail_queue(queue, dialect, column, False, tmp_path, monkeypatch)
    bad = [({"when": object()}, "$.when"), ([1, {"a": [2, {3}, object()]}], "$[1].a[2]")]
    check_refusals(q, q.connect(), bad, {"to": "a@example.com"})


@pytest.mark.parametrize("dialect", ["postgres", "mysql"])
def test_the_async_twins_refuse_a_payload_its_type_refuses(
        queue: MakeQueue, dialect: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    q = mail_queue(queue, dialect, "JSONB" if dialect == "postgres" else "JSON", True, tmp_path,
                   monkeypatch)
    email = __import__("mail_payloads").Email
    m = q.mod

    async def main() -> None:
        conn: Any = (await q.connect_async() if q.pg else
                     await asyncmy.connect(**q.db.mysql_args, autocommit=False))
        try:
            for name, enqueue in async_enqueues(q).items():
                for payload, where in [({"to": "a"}, "subject"), (email(to="a", subject=2),
                                                                  "$.subject")]:
                    row = m.NewRow(queue="mail", account=name, payload=payload)
                    with pytest.raises(WrongPayload, match=r"mail") as err:
                        await enqueue(conn, row)
                    assert where in str(err.value), str(err.value)
            await m.insert_async(conn, m.NewRow(queue="mail", account="good",
                                                payload=email(to="a", subject="hi")))
            await conn.commit()
        finally:
            conn.close() if q.mysql else await conn.close()

    asyncio.run(main())
    assert [r["account"] for r in q.rows()] == ["good"]


def test_the_error_names_the_table_the_class_and_the_field(
        queue: MakeQueue, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    q = mail_queue(queue, "sqlite", "TEXT", True, tmp_path, monkeypatch)
    with pytest.raises(WrongPayload) as err:
        q.mod.insert(q.connect(), q.mod.NewRow(queue="mail", account="a", payload={"to": "a"}))
    assert str(err.value) == ("mail: the payload is not a mail_payloads.Email: "
                              "Object missing required field `subject`")
    assert isinstance(err.value.__cause__, msgspec.ValidationError)


def test_a_nul_character_fails_at_the_enqueue_where_jsonb_holds_the_payload(
        queue: MakeQueue, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PostgreSQL's jsonb holds no NUL character (`\\u0000`): refused at the enqueue instead of
    by the server, which aborts the caller's transaction. A text column keeps it."""
    nul = {"note": ["ok", "a\x00b"], "path": "C:\\u0000"}  # the second one is no NUL
    jsonb = mail_queue(queue, "postgres", "JSONB", False, tmp_path, monkeypatch)
    check_refusals(jsonb, jsonb.connect(), [(nul, "$.note[1]")], {"path": "C:\\u0000"})
    text = mail_queue(queue, "postgres", "TEXT", False, tmp_path, monkeypatch)
    conn = text.connect()
    text.mod.insert(conn, text.mod.NewRow(queue="mail", account="nul", payload=nul))
    conn.commit()
    (row,) = text.rows()
    assert text.mod.decode_payload(row["payload"]) == nul
