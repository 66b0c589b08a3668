"""The pool rule: a worker never takes the last connection of the pool it is given."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from dbcases import example_module as example
from dbcases import pg_exec, pg_rows
from psycopg_pool import AsyncConnectionPool
from semantics_util import Tracker, fake_clock, messages, migration_sql

import inboxgen
from inboxgen import Job, Worker
from inboxgen.testing import run_until_idle

pytestmark = pytest.mark.usefixtures("log_inboxgen")


def test_worker_never_takes_the_pools_last_connection(
        pg_dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    mailer = example("mailer")
    pg_exec(pg_dsn, migration_sql("mailer"))
    with psycopg.connect(pg_dsn) as conn:
        mailer.insert_many(conn, [mailer.NewRow(name="emails", payload=b"%d" % i)
                                  for i in range(12)])
    clock = fake_clock()
    tracker = Tracker()
    spare: list[int] = []

    async def main() -> Worker:
        # (psycopg_pool's default min_size is 4, more than this max_size: min_size=1 here)
        pool = AsyncConnectionPool(pg_dsn, min_size=1, max_size=3, open=False)

        async def send(job: Job[bytes]) -> None:
            with tracker:
                await asyncio.sleep(0.005)
                stats = pool.get_stats()
                spare.append(3 - stats["pool_size"] + stats.get("pool_available", 0))

        worker = Worker(mailer.DESCRIPTOR, send, pool=pool, group="emails", workers=8,
                        clock=clock)
        assert worker.workers == 2
        await pool.open(wait=True)
        try:
            await run_until_idle(worker, timeout=20)
        finally:
            await pool.close()
        return worker

    worker = asyncio.run(main())
    assert worker.stats.acked == 12
    assert tracker.peak <= 2
    assert min(spare) >= 1, "a connection of the pool was always left for the service"
    assert any("never takes the pool's last connection" in m and "running 2 workers" in m
               for m in messages(caplog.records))
    assert pg_rows(pg_dsn, "SELECT count(*) FROM email_jobs") == [(0,)]


def test_worker_refuses_a_pool_with_no_connection_to_spare(pg_dsn: str) -> None:
    mailer = example("mailer")
    pool = AsyncConnectionPool(pg_dsn, min_size=1, max_size=1, open=False)
    with pytest.raises(inboxgen.WorkerConfigError, match="pool"):
        Worker(mailer.DESCRIPTOR, lambda job: None, pool=pool, group="emails", workers=1)
