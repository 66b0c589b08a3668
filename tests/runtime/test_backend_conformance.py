"""The same promises of every driver the runtime's backends wrap: psycopg on PostgreSQL, sqlite3 on
SQLite, PyMySQL and asyncmy on MariaDB (chosen by the mysql+pymysql:// and mysql+asyncmy://
schemes).

Each test builds the backend as a Worker does (`BACKENDS[dialect].for_worker`) on a lease table of
its own and goes through the backend's public methods only: opening and closing, transactions,
generated statements called through `Calls`, steps run `together` and `alone`, a session kept
across calls, the count of calls in flight, a broken statement's error, and closing while a
connection is in use. The table is read back on a connection of the test's own, as another
process would.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import pytest
from dbcases import T0, Layout, MakeQueue, Queue, at

from inboxgen.runtime.backends import BACKENDS, Backend
from inboxgen.runtime.backends.base import BEGIN, COMMIT, COMMIT_BEGIN, GENERIC_PLANS
from inboxgen.runtime.batching import Calls

# (the queue's dialect, with the scheme that names the driver) -> the driver's name
DRIVERS = [pytest.param(("postgres", "psycopg"), id="psycopg"),
           pytest.param(("sqlite", "sqlite3"), id="sqlite3"),
           pytest.param(("mysql+pymysql", "PyMySQL"), id="PyMySQL"),
           pytest.param(("mysql+asyncmy", "asyncmy"), id="asyncmy")]
# A session-local table, seen only by the session that made it.
TEMP_TABLE = {"postgres": "CREATE TEMPORARY TABLE mine (n INTEGER)",
              "sqlite": "CREATE TEMP TABLE mine (n INTEGER)",
              "mysql": "CREATE TEMPORARY TABLE mine (n INTEGER)"}


@attrs.define
class Driver:
    """A backend on a fresh lease table, and the generated functions called through it."""

    q: Queue
    backend: Backend
    calls: Calls

    def run(self, body: Callable[[], Awaitable[Any]]) -> Any:
        """Open the backend, run `body`, close it (also when `body` fails)."""
        async def main() -> Any:
            await self.backend.open(keep=2)
            try:
                return await body()
            finally:
                await self.backend.close()

        return asyncio.run(main())

    def payloads(self) -> list[str]:
        return [row["payload"] for row in self.q.rows()]

    def insert(self, payload: str) -> tuple[str, dict[str, Any]]:
        """The step that enqueues a row carrying `payload`."""
        return self.calls.step("insert", {"row": self.q.new(payload=payload)})


@pytest.fixture(params=DRIVERS)
def driver(request: pytest.FixtureRequest, queue: MakeQueue) -> Driver:
    dialect, name = request.param
    q = queue(dialect, Layout("lease"))
    d = q.mod.DESCRIPTOR
    backend = BACKENDS[d.dialect].for_worker(d, q.database, None, 2, transactional=False)
    assert backend.driver == name
    return Driver(q, backend, Calls(d, backend))


def test_opens_answers_a_query_and_closes_and_opens_again(driver: Driver) -> None:
    b = driver.backend

    async def query() -> Any:
        async with b.connection() as conn:
            return await b.query(conn, "SELECT 1")

    assert driver.run(query)[0] == 1
    assert driver.run(query)[0] == 1  # a closed backend opens again


def test_a_committed_transaction_keeps_its_row(driver: Driver) -> None:
    b = driver.backend

    async def body() -> Any:
        async with b.connection() as conn:
            await b.begin(conn)
            new_id = await driver.calls(conn, "insert", row=driver.q.new(payload="kept"))
            assert driver.payloads() == [], "seen before its commit"
            await b.commit(conn)
            return new_id

    new_id = driver.run(body)
    assert driver.q.ids() == [new_id] and driver.payloads() == ["kept"]


def test_a_rolled_back_transaction_leaves_no_row(driver: Driver) -> None:
    b = driver.backend

    async def body() -> None:
        async with b.connection() as conn:
            await b.begin(conn)
            await driver.calls(conn, "insert", row=driver.q.new(payload="gone"))
            await b.rollback(conn)

    driver.run(body)
    assert driver.payloads() == []


def test_a_connection_given_back_uncommitted_leaves_no_row(driver: Driver) -> None:
    b = driver.backend

    async def body() -> None:
        async with b.connection() as conn:
            await b.begin(conn)
            await driver.calls(conn, "insert", row=driver.q.new(payload="left open"))

    driver.run(body)
    assert driver.payloads() == []


def test_generated_statements_claim_and_settle_through_calls(driver: Driver) -> None:
    b, q = driver.backend, driver.q
    conn = q.connect()
    first, second = q.add(conn, payload="first"), q.add(conn, payload="second")

    async def body() -> tuple[list[Any], bool]:
        async with b.connection() as conn:
            await b.begin(conn)
            claimed = await driver.calls(conn, "claim", now=T0, locked_until=at(30), limit=1,
                                         group="g")
            await b.commit(conn)
            (row,) = claimed
            await b.begin(conn)
            done = await driver.calls(conn, "finish", now=T0, **q.token(row))
            await b.commit(conn)
            return claimed, done

    claimed, done = driver.run(body)
    assert [q.id_of(row) for row in claimed] == [first] and done is True
    rows = {r["id"]: r for r in q.rows()}
    assert rows[first]["processed_at"] is not None and rows[second]["processed_at"] is None


def test_steps_run_together_in_order_and_commit(driver: Driver) -> None:
    b = driver.backend

    async def body() -> list[Any]:
        async with b.session() as conn:
            return await b.together(conn, [BEGIN, driver.insert("one"), driver.insert("two"),
                                           COMMIT])

    ids = driver.run(body)
    assert driver.q.ids() == ids and len(ids) == 2
    assert driver.payloads() == ["one", "two"]


def test_commit_begin_commits_the_steps_before_it_and_opens_a_transaction(
        driver: Driver) -> None:
    """A row-lock round's COMMIT and next BEGIN as one step: what came before it is committed,
    what follows it is in a transaction of its own, which a rollback undoes."""
    b = driver.backend

    async def body() -> None:
        async with b.session() as conn:
            await b.together(conn, [BEGIN, driver.insert("kept"), COMMIT_BEGIN,
                                    driver.insert("undone")])
            await b.rollback(conn)
            await b.together(conn, [BEGIN, driver.insert("after"), COMMIT])

    driver.run(body)
    assert driver.payloads() == ["kept", "after"]


SETTINGS = "SELECT current_setting('plan_cache_mode'), current_setting('jit')"


def test_generic_plans_hold_for_the_rest_of_the_transaction_only(driver: Driver) -> None:
    """GENERIC_PLANS before a walking claim: on PostgreSQL the transaction's prepared
    statements run their generic plans, and the session is back to its own setting once the
    transaction ends; elsewhere the step does nothing, and the steps around it run as ever."""
    b, postgres = driver.backend, driver.q.dialect == "postgres"

    async def body() -> list[Any]:
        modes = []
        async with b.session() as conn:
            await b.together(conn, [BEGIN, driver.insert("one"), GENERIC_PLANS])
            if postgres:
                modes.append(tuple(await b.query(conn, SETTINGS)))
            await b.together(conn, [driver.insert("two"), COMMIT])
            if postgres:
                modes.append(tuple(await b.query(conn, SETTINGS)))
                await b.rollback(conn)
        return modes

    modes = driver.run(body)
    assert driver.payloads() == ["one", "two"]
    # JIT is off with them: a generic plan's costs would pass jit_above_cost on a large table.
    assert modes == ([("force_generic_plan", "off"), ("auto", "on")] if postgres else [])


def test_a_call_planned_once_stands_alone_and_commits(driver: Driver) -> None:
    """A call planned once (a lease's claim by priority, an advisory read by priority) stands
    alone: it returns its result, and what it wrote is committed, seen by another connection.
    On PostgreSQL its statement runs with the generic plan's settings, and the session is back
    to its own once it returns."""
    b, q, postgres = driver.backend, driver.q, driver.q.dialect == "postgres"
    conn = q.connect()
    ids = [q.add(conn, payload=p) for p in ("a", "b")]
    conn.commit()
    claim = driver.calls.step("claim", {"now": T0, "locked_until": at(30), "limit": 1,
                                        "group": "g"})

    async def body() -> tuple[list[Any], list[Any], list[Any]]:
        first = await b.alone_planned_once(claim)
        modes = []
        async with b.session() as session:
            second = await b.planned_once(session, claim)
            if postgres:
                from inboxgen.runtime.backends.postgres import _PlannedOnce

                modes.append(tuple(await b.query(_PlannedOnce(session), SETTINGS)))
                modes.append(tuple(await b.query(session, SETTINGS)))
        return first, second, modes

    first, second, modes = driver.run(body)
    assert [q.id_of(row) for row in first + second] == ids
    assert all(row["locked_until"] is not None for row in q.rows())  # both claims committed
    assert modes == ([("force_generic_plan", "off"), ("auto", "on")] if postgres else [])


def test_steps_alone_each_commit_and_return_their_results(driver: Driver) -> None:
    b, q = driver.backend, driver.q
    conn = q.connect()
    ids = [q.add(conn, payload=p) for p in ("a", "b")]
    claim = driver.calls.step("claim", {"now": T0, "locked_until": at(30), "limit": 5,
                                        "group": "g"})

    (claimed, again) = driver.run(lambda: b.alone([claim, claim]))
    assert [q.id_of(row) for row in claimed] == ids and again == []
    assert [r["locked_until"] for r in q.rows()] == [at(30), at(30)]


def test_a_session_is_one_database_session_across_calls(driver: Driver) -> None:
    b, dialect = driver.backend, driver.q.dialect

    async def body() -> Any:
        async with b.session() as conn:
            await b.execute(conn, TEMP_TABLE[dialect])  # seen by this session only
            await b.together(conn, [BEGIN, COMMIT])
            await b.execute(conn, "INSERT INTO mine (n) VALUES (7)")
            await b.together(conn, [BEGIN, driver.insert("between"), COMMIT])
            return await b.query(conn, "SELECT n FROM mine")

    assert driver.run(body)[0] == 7
    assert driver.payloads() == ["between"]


def test_busy_is_back_to_zero_once_calls_are_done(driver: Driver) -> None:
    b, q = driver.backend, driver.q
    during: list[int] = []

    async def one(payload: str) -> None:
        async with b.connection() as conn:
            await b.begin(conn)
            call = asyncio.ensure_future(driver.calls(conn, "insert", row=q.new(payload=payload)))
            await asyncio.sleep(0)  # the call has started and not yet ended
            during.append(b.busy)
            await call
            await b.commit(conn)

    async def body() -> int:
        assert b.busy == 0
        await asyncio.gather(*(one(f"p{i}") for i in range(4)))
        await b.alone([driver.insert("last")])
        return b.busy

    assert driver.run(body) == 0 and b.busy == 0
    assert max(during) >= 1, "calls in flight are counted"
    assert sorted(driver.payloads()) == ["last", "p0", "p1", "p2", "p3"]


def test_a_broken_statement_raises_and_the_connection_goes_on(driver: Driver) -> None:
    b = driver.backend
    errors: list[BaseException] = []

    async def body() -> Any:
        async with b.connection() as conn:
            for broken in (b.execute(conn, "SELECT * FROM no_such_table"),
                           b.query(conn, "SELEKT 1")):
                with pytest.raises(Exception) as caught:
                    await broken
                errors.append(caught.value)
                assert not b.disconnected(caught.value, conn), "a statement's error, not a loss"
                await b.rollback(conn)
            return await b.query(conn, "SELECT 2")

    assert driver.run(body)[0] == 2
    assert "no_such_table" in str(errors[0])


def test_a_broken_step_raises_and_commits_nothing(driver: Driver) -> None:
    b = driver.backend
    broken = driver.calls.step("insert", {"row": attrs.evolve(driver.q.new(), payload=None)})

    async def body() -> None:
        async with b.session() as conn:
            with pytest.raises(Exception) as caught:
                await b.together(conn, [BEGIN, driver.insert("before"), broken, COMMIT])
            assert "payload" in str(caught.value)  # NOT NULL, as the database says it
            await b.rollback(conn)

    driver.run(body)
    assert driver.payloads() == []


def test_closing_with_a_connection_in_use_returns_at_once(driver: Driver) -> None:
    b, q = driver.backend, driver.q

    async def body() -> None:
        borrowed = b.connection()
        conn = await borrowed.__aenter__()
        await b.begin(conn)
        await driver.calls(conn, "insert", row=q.new(payload="in use"))
        await asyncio.wait_for(b.close(), timeout=5)  # it does not wait for the borrower
        await borrowed.__aexit__(None, None, None)  # giving it back afterwards raises nothing
        assert b.busy == 0

    async def main() -> None:
        await b.open(keep=2)
        await body()

    asyncio.run(main())
    assert q.db.rows("SELECT payload FROM jobs") == [], "nothing was committed"
    assert other_sessions(q) == 0, "no connection of the backend is left open"


def other_sessions(q: Queue, wait: float = 5.0) -> int:
    """Sessions on the queue's database besides the one asking, once they are gone or `wait`
    seconds have passed (a server ends a closed session a moment later); SQLite has none."""
    if q.dialect == "sqlite":
        return 0
    sql = ("SELECT count(*) FROM information_schema.PROCESSLIST WHERE DB = DATABASE() "
           "AND ID <> CONNECTION_ID()" if q.dialect == "mysql" else
           "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
           "AND pid <> pg_backend_pid() AND backend_type = 'client backend'")  # no autovacuum
    deadline = time.monotonic() + wait
    while True:
        ((count,),) = q.db.rows(sql)
        if count == 0 or time.monotonic() > deadline:
            return int(count)
        time.sleep(0.05)
