"""state(conn, id=..., now=...): what became of one job, as its row says at `now`: ready,
scheduled, in work (under a live lease), finished (kept by processed_at) or dead (in the
dead-letter group or table), with its payload; None for a job the table does not keep."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import textwrap
from pathlib import Path
from typing import Any

import dbcases
import pytest
from dbcases import LEASE, T0, Layout, MakeQueue, Queue, at, call

DIALECTS = ["postgres", "mysql", "sqlite"]


def state(q: Queue, conn: Any, row_id: int, now: dt.datetime = T0) -> Any:
    found = call(q.mod.state, conn, id=row_id, now=now)
    conn.commit()
    return found


def claimed(q: Queue, conn: Any, row_id: int) -> Any:
    row = q.claim_one(conn)
    conn.commit()
    assert q.id_of(row) == row_id
    return row


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_leased_job_is_seen_through_every_state(queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout(form="lease", processed=True, dead="table"))
    conn = q.connect()
    later = q.add(conn, retry_after=at(60), payload="later")
    assert (state(q, conn, later).state, state(q, conn, later).payload) == ("scheduled", "later")
    assert state(q, conn, later, now=at(61)).state == "ready"

    row_id = q.add(conn, retry_after=at(-10), payload="now")
    assert state(q, conn, row_id).state == "ready"
    row = claimed(q, conn, row_id)
    assert state(q, conn, row_id).state == "in_work"
    # The lease ran out: the job is ready again for any worker.
    assert state(q, conn, row_id, now=T0 + dt.timedelta(seconds=LEASE + 1)).state == "ready"
    assert q.settle("finish", conn, row)
    conn.commit()
    done = state(q, conn, row_id)
    assert (done.state, done.attempt, done.payload) == ("finished", 2, "now")
    assert done.finished_at is not None and done.due == at(-10)

    spent = q.add(conn, retry_after=at(-5))
    assert q.settle("dead_letter", conn, claimed(q, conn, spent))
    conn.commit()
    assert state(q, conn, spent).state == "dead"  # read from jobs_dead, which keeps the id
    assert state(q, conn, 10_000) is None
    listed = q.mod.dead_letters(conn, limit=10)
    conn.commit()
    assert [(d.id, d.state, d.due) for d in listed] == [(spent, "dead", at(-5))]


@pytest.mark.parametrize("dialect", ["postgres", "mysql"])
def test_a_row_locked_job_in_a_dead_letter_group(queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout(form="row_lock", group=True, processed=False, dead="group"))
    conn = q.connect()
    row_id = q.add(conn, retry_after=at(-10))
    row = q.claim_one(conn)
    # The row lock's holder is invisible to others: its job reads as ready until settled.
    other = q.connect()
    assert state(q, other, row_id).state == "ready"
    assert q.settle("dead_letter", conn, row)
    conn.commit()
    assert state(q, other, row_id).state == "dead"
    second = q.add(conn, retry_after=at(-5))
    assert q.settle("dead_letter", conn, q.claim_one(conn))
    conn.commit()
    # The newest first, and no more than asked for.
    assert [d.id for d in q.mod.dead_letters(other, limit=5)] == [second, row_id]
    assert [d.id for d in q.mod.dead_letters(other, limit=1)] == [second]
    other.commit()

    finished = q.add(conn, retry_after=at(-10))
    assert q.settle("finish", conn, q.claim_one(conn))
    conn.commit()
    assert state(q, other, finished) is None  # finishing deleted it: nothing is kept


# A payload that does not decode: JSON text that is not JSON, or JSON that a typed payload's
# class refuses. The worker dead-letters such a job; state() and dead_letters() must still
# answer for it (it is the job an operator looks for), with the payload as stored and why it
# does not decode, and every other job as usual.
EMAIL = ("import msgspec\n\n\nclass Email(msgspec.Struct):\n    subject: str\n"
         "    to: str\n")
GOOD = '{"subject": "hello", "to": "a@example.com"}'
MALFORMED = "not json {"
MISSING = '{"to": "b@example.com"}'  # no subject: the Email class refuses it


def undecodable_case(payload_column: str, typed: bool,
                     dead: str) -> tuple[str, str]:
    """A lease table `jobs` whose payload is JSON (of class Email where `typed`) in a column of
    type `payload_column`, its dead letters in group "dead" or in table jobs_dead."""
    kind = ', type = "mail_payloads:Email"' if typed else ""
    where = 'group = "dead"' if dead == "group" else 'table = "jobs_dead"'
    spec = f"""\
        table = "jobs"
        dialect = "sqlite"

        [columns]
        id = {{ role = "id", generated = true }}
        queue = "group"
        attempt = {{ role = "attempt", generated = true }}
        locked_until = "locked_until"
        payload = {{ role = "payload", codec = "json"{kind} }}

        [runtime]
        max_attempts = 3

        [dead_letter]
        {where}
        """
    ddl = f"""\
        CREATE TABLE jobs (
            id {{id}},
            queue {{text}} NOT NULL,
            attempt INTEGER NOT NULL DEFAULT 1,
            locked_until {{lease}},
            payload {payload_column} NOT NULL
        );
        CREATE INDEX jobs_claim ON jobs (queue, id);
        CREATE TABLE jobs_dead (
            id BIGINT PRIMARY KEY,
            queue {{text}} NOT NULL,
            attempt INTEGER NOT NULL,
            locked_until {{lease}},
            payload {payload_column} NOT NULL
        );
        """
    return textwrap.dedent(spec), ddl


def sql_text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


UNDECODABLE = [
    # dialect, payload column, typed, dead letters, the payload that does not decode, the error
    pytest.param("sqlite", "TEXT", False, "group", MALFORMED, "DecodeError: JSON is malformed",
                 id="sqlite-json-text"),
    pytest.param("sqlite", "TEXT", True, "table", MISSING,
                 "ValidationError: Object missing required field `subject`",
                 id="sqlite-typed"),
    pytest.param("postgres", "TEXT", False, "table", MALFORMED,
                 "DecodeError: JSON is malformed", id="postgres-json-text"),
    pytest.param("postgres", "JSONB", True, "group", MISSING,
                 "ValidationError: Object missing required field `subject`",
                 id="postgres-typed-jsonb"),
    pytest.param("mysql", "JSON", True, "table", MISSING,
                 "ValidationError: Object missing required field `subject`",
                 id="mysql-typed-json"),
]


@pytest.mark.parametrize(("dialect", "column", "typed", "dead", "poison", "error"),
                         UNDECODABLE)
def test_a_payload_that_does_not_decode_is_shown_as_stored_with_its_error(
        queue: MakeQueue, dialect: str, column: str, typed: bool, dead: str, poison: str,
        error: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "mail_payloads.py").write_text(EMAIL, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    spec, ddl = undecodable_case(column, typed, dead)
    q = queue(dialect, spec=spec, ddl=dbcases.typed(ddl, dialect))
    dead_row = ("INSERT INTO jobs (queue, payload) VALUES ('dead', {})" if dead == "group" else
                "INSERT INTO jobs_dead (id, queue, attempt, payload) VALUES (100, 'work', 3, {})")
    q.db.exec(f"INSERT INTO jobs (queue, payload) VALUES ('work', {sql_text(GOOD)});\n"
              f"INSERT INTO jobs (queue, payload) VALUES ('work', {sql_text(poison)});\n"
              + dead_row.format(sql_text(poison)))
    dead_id = 100 if dead == "table" else 3
    # As the driver hands the column back: PostgreSQL's jsonb parsed, any text as text.
    stored = json.loads(poison) if column == "JSONB" else poison
    conn = q.connect()

    queued = state(q, conn, 2)
    assert (queued.state, queued.id, queued.payload) == ("ready", 2, stored)
    assert queued.payload_error is not None and queued.payload_error.startswith(error), \
        queued.payload_error
    assert "\n" not in queued.payload_error
    found = state(q, conn, dead_id)
    assert (found.state, found.id, found.payload) == ("dead", dead_id, stored)
    assert found.payload_error == queued.payload_error
    good = state(q, conn, 1)  # the others as usual
    decoded = q.mod.decode_payload(GOOD if column != "JSONB" else json.loads(GOOD))
    assert (good.state, good.payload, good.payload_error) == ("ready", decoded, None)
    listed = q.mod.dead_letters(conn, limit=10)
    conn.commit()
    assert [(j.id, j.state, j.payload, j.payload_error) for j in listed] == [
        (dead_id, "dead", stored, found.payload_error)]
    if dialect == "postgres":  # the async twins read rows the same way

        async def twins() -> tuple[Any, list[Any]]:
            async with await q.connect_async() as aconn:
                return (await q.mod.state_async(aconn, id=dead_id, now=T0),
                        await q.mod.dead_letters_async(aconn, limit=10))

        found_async, listed_async = asyncio.run(twins())
        assert found_async == found and listed_async == listed
