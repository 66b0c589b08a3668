"""A database outage under running workers is logged as one: each worker says once that the
database is unreachable and once that it is reachable again, with no traceback, no handler
failure (a transactional handler whose statement dies with the connection is the outage, not the
handler's fault) and none of psycopg_pool's warnings for the pools the workers own. The jobs in
work then are done after the outage.

The PostgreSQL server here is the test's own: it is stopped and started again on the same
port."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shlex
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from dbcases import spec_toml
from genutil import build_module
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from servers import _SETTINGS, OS_USER, START_TIMEOUT_S, PostgresServer

from inboxgen import Job, Worker

TX_DDL = "CREATE TABLE tx_jobs (id BIGSERIAL PRIMARY KEY, payload TEXT NOT NULL);"
TX_SPEC = spec_toml("tx_jobs", {"id": "id generated", "payload": "payload text"})
LEASE_DDL = ("CREATE TABLE lease_jobs (id BIGSERIAL PRIMARY KEY, "
             "locked_until TIMESTAMPTZ, payload TEXT NOT NULL);")
LEASE_SPEC = spec_toml("lease_jobs", {"id": "id generated", "locked_until": "locked_until",
                                      "payload": "payload text"})
EFFECTS_DDL = "CREATE TABLE effects (job BIGINT PRIMARY KEY);"


class StoppablePostgres(PostgresServer):
    """A private server that can be stopped and started again on the same port."""

    def _ctl(self, *args: str) -> None:
        cmd = [self._exe("pg_ctl"), *args, "-D", str(self.data_dir), "-w", "-t",
               str(START_TIMEOUT_S)]
        if self.as_root:
            cmd = ["runuser", "-u", OS_USER, "--", *cmd]
        # The postmaster inherits pg_ctl's descriptors: nothing may wait for them to close.
        subprocess.run(cmd, cwd=self.base_dir, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=START_TIMEOUT_S * 2, check=True)

    def halt(self) -> None:
        self._ctl("stop", "-m", "immediate")

    def resume(self) -> None:
        settings = {**_SETTINGS, "port": str(self.port),
                    "unix_socket_directories": str(self.socket_dir)}
        opts = " ".join(f"-c {shlex.quote(f'{k}={v}')}" for k, v in settings.items())
        self._ctl("start", "-l", str(self.log_file), "-o", opts)


@pytest.fixture(scope="module")
def server() -> Iterator[StoppablePostgres]:
    with StoppablePostgres() as pg:
        yield pg


async def feed(pool: AsyncConnectionPool, modules: list[Any], stop: asyncio.Event) -> None:
    """Enqueue a job on each table every 20 ms, through the outage (failures are skipped), on
    a pool of the service's own."""
    n = 0
    while not stop.is_set():
        with contextlib.suppress(psycopg.Error, OSError, PoolTimeout):
            async with pool.connection(timeout=2) as conn:
                n += 1
                for m in modules:
                    await m.insert_async(conn, m.NewRow(payload=f"job {n}"))
        await asyncio.sleep(0.02)


def test_an_outage_is_one_line_when_it_starts_and_one_when_it_ends_per_worker(
        tmp_path: Path, server: StoppablePostgres, caplog: pytest.LogCaptureFixture) -> None:
    dsn = server.create_database("outage")
    with psycopg.connect(dsn, autocommit=True) as conn:
        # An acknowledged commit survives the stop (the test servers commit asynchronously).
        conn.execute("ALTER DATABASE outage SET synchronous_commit = on")
    with psycopg.connect(dsn) as conn:
        conn.execute(TX_DDL + LEASE_DDL + EFFECTS_DDL)
    tx = build_module(tmp_path, TX_SPEC, TX_DDL, name="tx_jobs")
    lease = build_module(tmp_path, LEASE_SPEC, LEASE_DDL, name="lease_jobs")

    async def write_effect(job: Job[str]) -> None:
        # The handler's own statements on the job's connection: they die with the server.
        await job.connection.execute("SELECT pg_sleep(0.05)")
        await job.connection.execute("INSERT INTO effects (job) VALUES (%s)", (job.id,))

    async def work(job: Job[str]) -> None:
        await asyncio.sleep(0.05)

    workers = [Worker(tx.DESCRIPTOR, write_effect, database=dsn, workers=3, transactional=True,
                      poll_interval=0.2),
               Worker(lease.DESCRIPTOR, work, database=dsn, workers=3, lease=5,
                      poll_interval=0.2)]
    caplog.set_level(logging.INFO)

    async def main() -> None:
        stop = asyncio.Event()
        app_pool = AsyncConnectionPool(dsn, name="app-pool", min_size=1, max_size=2,
                                       open=False)
        await app_pool.open(wait=True)
        feeder = asyncio.create_task(feed(app_pool, [tx, lease], stop))
        for w in workers:
            await w.start()
        try:
            await asyncio.sleep(1.5)
            before = [w.stats.acked for w in workers]
            assert all(before), before
            await asyncio.to_thread(server.halt)
            await asyncio.sleep(3)
            await asyncio.to_thread(server.resume)
            after = [w.stats.acked for w in workers]
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not all(
                    w.stats.acked > a + 10 for w, a in zip(workers, after, strict=True)):
                await asyncio.sleep(0.1)
            stop.set()
            await feeder
            deadline = time.monotonic() + 30  # what was enqueued is done
            while time.monotonic() < deadline and pending(dsn):
                await asyncio.sleep(0.1)
        finally:
            stop.set()
            await asyncio.gather(feeder, return_exceptions=True)
            await app_pool.close()
            for w in workers:
                await w.shutdown()

    asyncio.run(main())

    records = caplog.records
    for w in workers:
        mine = [r.getMessage() for r in records if r.getMessage().startswith(f"{w.name}: ")]
        down = [m for m in mine if "database unreachable" in m]
        up = [m for m in mine if "database reachable again" in m]
        assert len(down) == 1 and len(up) == 1, mine
        assert f"127.0.0.1:{server.port}" in down[0] and "outage" in down[0], down
    noisy = [f"{r.name} {r.levelname} {r.getMessage()}" for r in records
             if r.levelno >= logging.WARNING and (r.exc_info or r.name.startswith("psycopg"))
             and not of_app_pool(r)]
    assert noisy == [], noisy
    # The service's own pool is not the workers' to quieten.
    assert any(r.name == "psycopg.pool" and of_app_pool(r) for r in records)
    failures = [r.getMessage() for r in records if "handler failed" in r.getMessage()]
    assert failures == [], failures
    assert pending(dsn) == 0, "jobs in work at the outage were done after it"
    with psycopg.connect(dsn) as conn:
        effects = conn.execute("SELECT count(*) FROM effects").fetchone()
    # An ack whose commit the outage cut off is counted, its effect rolled back with it (the
    # job ran again): the settlements lost say how many.
    tx_stats = workers[0].stats
    assert effects is not None and effects[0] == tx_stats.acked - tx_stats.settlements_lost


def of_app_pool(record: logging.LogRecord) -> bool:
    """A record of the test's own pool: it names the pool, or a connection of it."""
    args = record.args if isinstance(record.args, tuple) else ()
    return "app-pool" in record.getMessage() or any(
        getattr(getattr(a, "_pool", None), "name", None) == "app-pool" for a in args)


def pending(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT (SELECT count(*) FROM tx_jobs) + "
                           "(SELECT count(*) FROM lease_jobs)").fetchone()
    assert row is not None
    return int(row[0])
