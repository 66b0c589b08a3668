"""Lease settlements and renewals on PostgreSQL go together: the slots' settlements are written
in one flush, and each row is judged alone: a row whose lease another worker took gets LeaseLost,
the others of the same flush settle; the leases a worker holds are renewed in one statement."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from typing import Any

import psycopg
import pytest
from dbcases import MakeQueue, spec_toml
from semantics_util import fake_clock, messages

from inboxgen import Job, Outcome, Worker, ack, retry, retry_after
from inboxgen.testing import run_until_idle

DDL = """
CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    attempt INTEGER NOT NULL DEFAULT 0,
    locked_until TIMESTAMPTZ,
    retry_after TIMESTAMPTZ NOT NULL DEFAULT now(),
    processed_at TIMESTAMPTZ,
    payload JSONB NOT NULL
);
"""
SPEC = spec_toml("jobs", {"id": "id generated", "attempt": "attempt generated",
                          "locked_until": "locked_until", "retry_after": "retry_after",
                          "processed_at": "processed_at", "payload": "payload"})
STOLEN_UNTIL = dt.datetime(2100, 1, 1, tzinfo=dt.UTC)


def _rows(dsn: str) -> dict[str, tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return {kind: (attempt, until, done is not None, due) for kind, attempt, until, done, due
                in conn.execute("SELECT payload->>'kind', attempt, locked_until, processed_at, "
                                "retry_after FROM jobs").fetchall()}


def test_one_flush_settles_each_row_alone(queue: MakeQueue,
                                          caplog: pytest.LogCaptureFixture) -> None:
    kinds = ["ack", "stolen-1", "retry", "later", "stolen-2", "ack-2"]
    q = queue("postgres", spec=SPEC, ddl=DDL)
    module, dsn = q.mod, q.target
    with psycopg.connect(dsn) as conn:
        module.insert_many(conn, [module.NewRow(payload={"kind": k}) for k in kinds])
    started: list[str] = []
    all_started = asyncio.Event()
    release = asyncio.Event()

    async def handler(job: Job[Any]) -> Outcome:
        kind = job.payload["kind"]
        started.append(kind)
        if len(started) == len(kinds):
            all_started.set()
        if started.count(kind) > 1:
            return ack()  # the retried row, run again
        await release.wait()  # every handler returns at once: their settlements go together
        return {"retry": retry(), "later": retry_after(dt.timedelta(hours=1))}.get(
            kind, ack())

    async def main() -> None:
        worker = Worker(module.DESCRIPTOR, handler, database=dsn, workers=6, batch=1,
                        lease=600, listen=False, poll_interval=3600)
        await worker.start()
        try:
            await asyncio.wait_for(all_started.wait(), 20)
            # Another worker takes two of the leases (as its claim would: a new expiry and
            # attempt) while their handlers still run.
            with psycopg.connect(dsn) as conn:
                conn.execute("UPDATE jobs SET locked_until = %s, attempt = attempt + 1 "
                             "WHERE payload->>'kind' LIKE 'stolen%%'", (STOLEN_UNTIL,))
            release.set()
            for _ in range(200):
                if worker.in_flight == 0 and len(started) == len(kinds) + 1:
                    break
                await asyncio.sleep(0.05)
        finally:
            await worker.shutdown()
        assert (worker.stats.acked, worker.stats.retried, worker.stats.lease_lost) == (3, 2, 2)

    with caplog.at_level(logging.WARNING, logger="inboxgen"):
        asyncio.run(main())

    rows = _rows(dsn)
    assert rows["ack"][2] and rows["ack-2"][2]  # finished
    assert rows["stolen-1"][:3] == (2, STOLEN_UNTIL, False)  # the new holder's row, untouched
    assert rows["stolen-2"][:3] == (2, STOLEN_UNTIL, False)
    assert rows["retry"][0] == 2 and rows["retry"][2]  # back at once, and run again
    assert rows["later"][1:3] == (None, False)
    assert rows["later"][3] > dt.datetime.now(dt.UTC) + dt.timedelta(minutes=50)
    lost = [m for m in messages(caplog.records) if "no longer held" in m]
    assert len(lost) == 2 and all("row 2" in m or "row 5" in m for m in lost), lost


def test_a_batchs_handlers_run_one_at_a_time_in_claim_order(queue: MakeQueue) -> None:
    # Settlements overlap the next row's handler; the handlers themselves never overlap.
    q = queue("postgres", spec=SPEC, ddl=DDL)
    module, dsn = q.mod, q.target
    with psycopg.connect(dsn) as conn:
        module.insert_many(conn, [module.NewRow(payload={"kind": str(i)}) for i in range(16)])
    running = 0
    most = 0
    order: list[int] = []

    async def handler(job: Job[Any]) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        order.append(int(job.payload["kind"]))
        await asyncio.sleep(0.01)
        running -= 1

    async def main() -> tuple[int, int]:
        worker = Worker(module.DESCRIPTOR, handler, database=dsn, workers=1, batch=8,
                        listen=False, poll_interval=0.05)
        await worker.start()
        try:
            for _ in range(400):
                if len(order) == 16 and worker.in_flight == 0:
                    break
                await asyncio.sleep(0.02)
        finally:
            await worker.shutdown()
        return worker.stats.acked, worker.stats.lease_lost

    assert asyncio.run(main()) == (16, 0)
    assert most == 1
    assert order == list(range(16))
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM jobs WHERE processed_at IS NULL"
                            ).fetchone() == (0,)


def test_a_settlement_held_up_by_a_lock_does_not_hold_up_the_slots_next_job(
        queue: MakeQueue) -> None:
    # One slot of batch 1. While the first job runs, another session locks its row, so its
    # ack waits in the settler; the slot runs the next jobs meanwhile, and the ack lands once
    # the lock goes.
    q = queue("postgres", spec=SPEC, ddl=DDL)
    module, dsn = q.mod, q.target
    with psycopg.connect(dsn) as conn:
        module.insert_many(conn, [module.NewRow(payload={"kind": str(i)}) for i in range(3)])
    ran: list[str] = []
    blocker = psycopg.connect(dsn)

    async def handler(job: Job[Any]) -> None:
        if job.payload["kind"] == "0":
            blocker.execute("SELECT 1 FROM jobs WHERE id = %s FOR UPDATE", (job.id,))
        ran.append(job.payload["kind"])

    async def main() -> tuple[list[str], int, int]:
        worker = Worker(module.DESCRIPTOR, handler, database=dsn, workers=1, batch=1,
                        listen=False, poll_interval=0.05)
        await worker.start()
        try:
            for _ in range(200):
                if len(ran) == 3:
                    break
                await asyncio.sleep(0.02)
            while_blocked = list(ran)
            blocker.rollback()
            for _ in range(200):
                if worker.in_flight == 0:
                    break
                await asyncio.sleep(0.02)
        finally:
            await worker.shutdown()
        return while_blocked, worker.stats.acked, worker.stats.lease_lost

    try:
        assert asyncio.run(main()) == (["0", "1", "2"], 3, 0)
    finally:
        blocker.close()
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM jobs WHERE processed_at IS NULL"
                            ).fetchone() == (0,)


def test_every_held_lease_is_renewed_in_one_statement_per_round(queue: MakeQueue) -> None:
    # A batch of four: the first job runs 25 s under a 10 s lease, the other three wait their
    # turn, leased all along; each renewal round renews the four together.
    q = queue("postgres", spec=SPEC, ddl=DDL)
    module, dsn = q.mod, q.target
    with psycopg.connect(dsn) as conn:
        module.insert_many(conn, [module.NewRow(payload={"kind": str(i)}) for i in range(4)])
    clock = fake_clock()
    done: list[str] = []

    async def handler(job: Job[Any]) -> None:
        if job.payload["kind"] == "0":
            await clock.sleep(25)
        done.append(job.payload["kind"])

    worker = Worker(module.DESCRIPTOR, handler, database=dsn, workers=1, batch=4, lease=10,
                    listen=False, clock=clock)
    rounds: list[tuple[int, bool]] = []  # (rows renewed together, as one statement)
    many = worker.calls.many

    async def spy(conn: Any, op: str, rows: list[dict[str, Any]]) -> Any:
        if op == "renew":
            rounds.append((len(rows), worker.calls.has("renew_many")))
        return await many(conn, op, rows)

    worker.calls.many = spy  # type: ignore[method-assign]
    asyncio.run(run_until_idle(worker, timeout=30))

    assert done == ["0", "1", "2", "3"]
    assert (worker.stats.acked, worker.stats.lease_lost) == (4, 0)
    assert len(rounds) >= 4, rounds  # 25 s of work, a renewal at half of each 10 s lease
    # While the first job runs, all four rows are held; one being settled is left out.
    assert [rows for rows, _ in rounds[:4]] == [4, 4, 4, 4], rounds
    assert all(together for _, together in rounds), rounds
    assert worker.stats.renewed == sum(rows for rows, _ in rounds)


def test_one_claim_serves_every_slot(queue: MakeQueue) -> None:
    # Four slots of batch 2: one claim takes the eight rows the worker has room for; four
    # handlers run at once, and the worker never holds more than eight rows.
    q = queue("postgres", spec=SPEC, ddl=DDL)
    module, dsn = q.mod, q.target
    with psycopg.connect(dsn) as conn:
        module.insert_many(conn, [module.NewRow(payload={"kind": str(i)}) for i in range(20)])
    running = 0
    most = 0
    gate = asyncio.Event()
    four_running = asyncio.Event()

    async def handler(job: Job[Any]) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        if running == 4:
            four_running.set()
        await gate.wait()
        running -= 1

    def leased() -> int:
        with psycopg.connect(dsn) as conn:
            (n,) = conn.execute("SELECT count(*) FROM jobs WHERE processed_at IS NULL "
                                "AND locked_until > now()").fetchone()
            return int(n)

    async def main() -> tuple[list[tuple[int, int]], int, list[int]]:
        worker = Worker(module.DESCRIPTOR, handler, database=dsn, workers=4, batch=2,
                        listen=False, poll_interval=0.05)
        claims: list[tuple[int, int]] = []  # (limit, rows it took)
        call = worker.backend.call

        async def spy(conn: Any, op: str, *args: Any, **values: Any) -> Any:
            result = await call(conn, op, *args, **values)
            if op == "claim":
                claims.append((values["limit"], len(result)))
            return result

        worker.backend.call = spy  # type: ignore[method-assign]
        held: list[int] = []
        await worker.start()
        try:
            await asyncio.wait_for(four_running.wait(), 20)
            await asyncio.sleep(0.2)  # time for a claim that should not come
            first = list(claims)
            held.append(await asyncio.to_thread(leased))
            gate.set()
            for _ in range(500):
                if worker.stats.acked == 20 and worker.in_flight == 0:
                    break
                await asyncio.sleep(0.02)
        finally:
            await worker.shutdown()
        return first, worker.stats.acked, held

    first, acked, held = asyncio.run(main())
    assert first == [(8, 8)]  # one statement for all four slots, nothing more while they work
    assert held == [8]
    assert acked == 20
    assert most == 4


def test_settlements_that_fall_behind_hold_claims_back_so_no_lease_runs_out(
        queue: MakeQueue) -> None:
    """A row waiting for its settlement is no longer renewed. Where the server settles more
    slowly than handlers finish (here a trigger makes each finish take a millisecond; in the
    field, deletes slowing down behind a purge or vacuum that lags), the claimer waits for the
    settlements rather than claim on: otherwise each flush carries all that came in during the
    last, until one outlasts the lease and its rows are claimed and run again."""
    slow = """
CREATE FUNCTION slow_finish() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.processed_at IS NOT NULL AND OLD.processed_at IS NULL THEN
        PERFORM pg_sleep(0.001);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER slow_finish BEFORE UPDATE ON jobs FOR EACH ROW EXECUTE FUNCTION slow_finish();
"""
    q = queue("postgres", spec=SPEC, ddl=DDL + slow)
    module, dsn = q.mod, q.target
    jobs = 4000
    with psycopg.connect(dsn) as conn:
        module.insert_many(conn, [module.NewRow(payload={"kind": "n"}) for _ in range(jobs)])
    runs: dict[int, int] = {}

    async def handler(job: Job[Any]) -> None:
        runs[job.id] = runs.get(job.id, 0) + 1

    worker = Worker(module.DESCRIPTOR, handler, database=dsn, workers=10, batch=1, lease=2,
                    listen=False, poll_interval=0.05)
    asyncio.run(run_until_idle(worker, timeout=120))

    assert len(runs) == jobs
    assert sorted(set(runs.values())) == [1], "jobs ran twice"
    assert (worker.stats.acked, worker.stats.lease_lost) == (jobs, 0)
    with psycopg.connect(dsn) as conn:
        (left,) = conn.execute("SELECT count(*) FROM jobs WHERE processed_at IS NULL").fetchone()
    assert left == 0
