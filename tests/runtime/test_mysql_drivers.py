"""MySQL/MariaDB's two drivers: which one a worker runs on, what the generated async twins do on
asyncmy, and what a cancelled asyncmy call leaves behind (on the session's MariaDB).

The runtime's promises on both drivers are the runtime semantics tests' (their MariaDB tests run on
mysql:// and on mysql+pymysql://); the fault suite's MariaDB workers run on asyncmy.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from pathlib import Path
from typing import Any

import asyncmy
import attrs
import pytest
from dbcases import Db, MakeQueue
from dbcases import example_module as example
from semantics_util import fake_clock

from inboxgen import Worker, ack, drop, retry
from inboxgen.errors import WorkerConfigError
from inboxgen.runtime.backends.mysql_async import AsyncMySQLBackend
from inboxgen.testing import run_until_idle

UTC = dt.UTC
SECRET = "s3cret-pw"


@pytest.fixture
def mailer_db(queue: MakeQueue) -> Db:
    """A fresh MariaDB database holding the mailer's table (generated_examples/mailer_mariadb)."""
    return queue("mysql", "mailer").db


def with_scheme(url: str, scheme: str) -> str:
    return scheme + url.removeprefix("mysql")


def test_a_worker_runs_on_asyncmy_unless_its_handlers_write_on_the_jobs_connection(
        mailer_db: Db, caplog: pytest.LogCaptureFixture) -> None:
    mailer = example("mailer_mariadb")
    d, url = mailer.DESCRIPTOR, mailer_db.database

    def driver(**kwargs: Any) -> str:
        worker = Worker(kwargs.pop("descriptor", d), lambda job: None, group="emails", **kwargs)
        return worker.backend.driver

    assert driver(database=url) == "asyncmy"
    assert driver(database=mailer_db.mysql_args) == "asyncmy"
    assert driver(database=url, transactional=True) == "PyMySQL"  # job.connection is PyMySQL's
    assert driver(database=with_scheme(url, "mysql+pymysql")) == "PyMySQL"
    assert driver(database=with_scheme(url, "mysql+asyncmy")) == "asyncmy"
    # A connect() argument asyncmy has no equivalent for, or a module built before the async
    # twins: PyMySQL, as before.
    assert driver(database={**mailer_db.mysql_args, "write_timeout": 30}) == "PyMySQL"
    old = attrs.evolve(d, async_ops=None)
    assert driver(descriptor=old, database=url) == "PyMySQL"

    # Naming asyncmy where it cannot serve is a one-line error naming worker and table.
    secret_url = with_scheme(url, "mysql+asyncmy").replace("root@", f"root:{SECRET}@")
    for kwargs in ({"transactional": True}, {"descriptor": old}):
        with pytest.raises(WorkerConfigError) as err:
            driver(database=secret_url, **kwargs)
        text = str(err.value)
        assert "mysql+asyncmy:// cannot serve this worker" in text and "email_jobs" in text
        assert "\n" not in text and SECRET not in text
    assert "run inboxgen build" in text

    # The start-up line says which driver serves.
    caplog.set_level(logging.INFO, logger="inboxgen")
    worker = Worker(d, lambda job: None, group="emails", database=url, clock=fake_clock())
    asyncio.run(run_until_idle(worker))
    assert any("on asyncmy" in r.getMessage() and "serving" in r.getMessage()
               for r in caplog.records)


@pytest.mark.parametrize("scheme", ["mysql+pymysql", "mysql+asyncmy"])
def test_both_drivers_settle_a_batch_of_mixed_outcomes_alike(
        mailer_db: Db, scheme: str) -> None:
    mailer = example("mailer_mariadb")
    with mailer_db.transaction() as conn:
        mailer.insert_many(conn, [mailer.NewRow(name="emails", payload=p)
                                  for p in (b"ack", b"drop", b"retry", b"ack", b"retry")])
    seen: list[bytes] = []

    def handle(job: Any) -> Any:
        seen.append(job.payload)
        if job.payload == b"drop":
            return drop()
        if job.payload == b"retry" and job.attempt < 2:
            return retry()
        return ack()

    worker = Worker(mailer.DESCRIPTOR, handle, group="emails", batch=5, workers=1,
                    max_attempts=2, database=with_scheme(mailer_db.database, scheme),
                    clock=fake_clock())
    asyncio.run(run_until_idle(worker))
    # Each retried row came back once; all rows are gone, none dead-lettered.
    assert sorted(seen) == sorted([b"ack", b"drop", b"retry", b"ack", b"retry", b"retry",
                                   b"retry"])
    assert mailer_db.rows("SELECT job_id FROM email_jobs") == []
    assert (worker.stats.acked, worker.stats.dropped, worker.stats.retried) == (4, 1, 2)


def test_async_twins_claim_count_and_settle_on_asyncmy(mailer_db: Db) -> None:
    mailer = example("mailer_mariadb")

    async def run() -> tuple[list[Any], list[Any]]:
        first = await asyncmy.connect(**mailer_db.mysql_args, autocommit=False)
        second = await asyncmy.connect(**mailer_db.mysql_args, autocommit=False)
        try:
            one = await mailer.insert_async(first, mailer.NewRow(name="emails", payload=b"1"))
            await mailer.insert_many_async(first, [mailer.NewRow(name="emails", payload=b"2"),
                                                   mailer.NewRow(name="emails", payload=b"3")])
            await first.commit()
            claimed = await mailer.claim_async(first, group="emails", limit=2)
            # The first claim's transaction holds its rows: another claim skips them.
            other = await mailer.claim_async(second, group="emails", limit=5)
            await second.rollback()
            assert await mailer.finish_async(first, id=one)
            assert await mailer.dead_letter_async(first, id=claimed[1].job_id, attempt=1)
            await first.commit()
            return claimed, other
        finally:
            first.close()
            second.close()

    claimed, other = asyncio.run(run())
    # The attempt as it stood before the claim (the column's default is 1).
    assert [(r.payload, r.attempt) for r in claimed] == [(b"1", 1), (b"2", 1)]
    assert [r.payload for r in other] == [b"3"]
    # The second claim's count was rolled back; the dead letter keeps the attempt it was given.
    assert mailer_db.rows("SELECT payload, name, attempt FROM email_jobs ORDER BY job_id") == [
        (b"2", "emails.dead", 1), (b"3", "emails", 1)]


def test_async_twins_unique_insert_and_lease_on_asyncmy(queue: MakeQueue) -> None:
    q = queue("mysql", "emails")
    mailer_db, emails = q.db, q.mod
    now = dt.datetime.now(UTC).replace(microsecond=0)
    until = now + dt.timedelta(seconds=30)
    mailer_db.exec("INSERT INTO orders (id, email) VALUES (7, 'a@example.com')")

    def row(kind: str) -> Any:
        return emails.NewRow(priority=1, retry_after=now, order_id=7, kind=kind,
                             payload={"kind": kind})

    async def run() -> tuple[list[bool], list[Any], list[int]]:
        conn = await asyncmy.connect(**mailer_db.mysql_args, autocommit=False)
        try:
            cur = conn.cursor()
            await cur.execute("SET SESSION time_zone = '+00:00'")
            # A duplicate key means "already queued"; the transaction goes on.
            added = [await emails.insert_unique_async(conn, row(k))
                     for k in ("confirmation", "confirmation", "receipt")]
            await conn.commit()
            claimed = await emails.claim_async(conn, now=now, locked_until=until, limit=5)
            await conn.commit()
            again = await emails.claim_async(conn, now=now, locked_until=until, limit=5)
            first = claimed[0]
            done = await emails.finish_async(conn, id=first.id, now=now,
                                             locked_until=first.locked_until,
                                             attempt=first.attempt)
            await conn.commit()
            return added, [(emails.decode_payload(r.payload), r.locked_until)
                           for r in claimed], [len(again), done]
        finally:
            conn.close()

    added, claimed, after = asyncio.run(run())
    assert added == [True, False, True]
    assert claimed == [({"kind": "confirmation"}, until), ({"kind": "receipt"}, until)]
    assert after == [0, True]  # both leased; the held lease settles
    assert mailer_db.rows("SELECT kind, processed_at IS NULL FROM email_jobs ORDER BY id") == [
        ("confirmation", 0), ("receipt", 1)]


def test_a_cancelled_asyncmy_call_closes_its_session_and_the_next_borrower_gets_a_fresh_one(
        mailer_db: Db) -> None:
    mailer = example("mailer_mariadb")

    async def run() -> tuple[float, int]:
        backend = AsyncMySQLBackend(mailer.DESCRIPTOR, mailer_db.mysql_args)
        await backend.open()
        try:
            async with backend.connection() as conn:
                (session,) = await backend.query(conn, "SELECT CONNECTION_ID()")
                call = asyncio.create_task(backend.query(conn, "SELECT SLEEP(30)"))
                await asyncio.sleep(0.3)
                began = time.monotonic()
                call.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await call
                took = time.monotonic() - began
            assert backend.busy == 0
            async with backend.connection() as fresh:
                assert fresh is not conn
                assert await backend.query(fresh, "SELECT 1") == (1,)
            return took, session
        finally:
            await backend.close()

    took, session = asyncio.run(run())
    assert took < 1
    # The server ends the session (SLEEP notices the closed socket within seconds).
    deadline = time.monotonic() + 15
    while mailer_db.rows("SELECT ID FROM information_schema.PROCESSLIST WHERE ID = %s",
                         [session]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert mailer_db.rows("SELECT ID FROM information_schema.PROCESSLIST WHERE ID = %s",
                          [session]) == []


def test_asyncmy_reaches_the_server_as_pymysql_does_with_a_clear_error(
        tmp_path: Path, mailer_db: Db) -> None:
    from inboxgen.errors import ConnectFailed

    mailer = example("mailer_mariadb")
    args = mailer_db.mysql_args
    host = f"{args['host']}:{args['port']}"
    url = f"mysql://nobody:{SECRET}@{host}/{args['database']}"
    worker = Worker(mailer.DESCRIPTOR, lambda job: None, group="emails", database=url)
    assert worker.backend.driver == "asyncmy"
    began = time.monotonic()
    with pytest.raises(ConnectFailed) as err:
        asyncio.run(worker.start())
    assert time.monotonic() - began < 5
    text = str(err.value)
    assert host in text and "Access denied" in text and SECRET not in text
