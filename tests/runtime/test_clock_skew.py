"""Workers on hosts whose clocks are off judge due times and leases by the database's clock:
three worker processes on one PostgreSQL lease table, one on time, one 30 s fast and one 30 s
slow (libfaketime), jobs that outlive half their 10 s lease (so they renew) and jobs due 20 s
later. Every job runs once, while its holder lives, and none before it is due."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psycopg
import pytest

SPEC = """table = "jobs"
dialect = "postgres"

[columns]
id = { role = "id", generated = true }
attempt = { role = "attempt", generated = true }
retry_after = "retry_after"
locked_until = "locked_until"
payload = "payload"

[runtime]
lease = 10
"""
DDL = """
CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    attempt INTEGER NOT NULL DEFAULT 1,
    retry_after TIMESTAMPTZ NOT NULL DEFAULT now(),
    locked_until TIMESTAMPTZ,
    payload TEXT NOT NULL
);
CREATE INDEX jobs_claim ON jobs (retry_after, id);
"""
# Each delivery, as the database's clock saw it begin.
DELIVERIES = """
CREATE TABLE deliveries (
    job_id BIGINT NOT NULL,
    worker TEXT NOT NULL,
    at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);
"""
CHILD = """
import importlib.util, logging, select, sys
import psycopg
from inboxgen import Worker

logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
spec = importlib.util.spec_from_file_location("jobs_module", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
dsn, name = sys.argv[2], sys.argv[3]

def handle(job):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO deliveries (job_id, worker) VALUES (%s, %s)", (job.id, name))
    # A relative wait: libfaketime fails time.sleep's absolute one when it sets the clock back.
    select.select([], [], [], float(job.payload))

Worker(module.DESCRIPTOR, handle, database=dsn, name=name, workers=4).run()
"""
SKEWS = {"on-time": None, "fast": "+30s", "slow": "-30s"}


@pytest.fixture(scope="module")
def faketime() -> str:
    """libfaketime (Debian package faketime), preloaded into the worker itself: the faketime
    command would stand between the test and the worker, and signals with it."""
    found = sorted(Path("/usr/lib").glob("*/faketime/libfaketimeMT.so.1"))
    assert found, "libfaketime is missing: install the Debian package faketime"
    return str(found[0])


def test_skewed_hosts_neither_run_a_job_twice_nor_early(queue, tmp_path: Path,
                                                        faketime: str) -> None:
    q = queue("postgres", spec=SPEC, ddl=DDL)
    dsn = q.database
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(DELIVERIES)
        # 24 jobs of 6 s each (a renewal at 5 s), then 8 short ones due 20 s from now.
        conn.execute("INSERT INTO jobs (payload) SELECT '6' FROM generate_series(1, 24)")
        conn.execute("INSERT INTO jobs (payload, retry_after) SELECT '0.2', now() + "
                     "interval '20 seconds' FROM generate_series(1, 8)")
        due = dict(conn.execute("SELECT id, retry_after FROM jobs").fetchall())
    child = tmp_path / "child.py"
    child.write_text(textwrap.dedent(CHILD), encoding="utf-8")
    procs = {}
    for name, skew in SKEWS.items():
        env = {**os.environ, "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
        if skew:
            env.update(LD_PRELOAD=faketime, FAKETIME=skew)
        procs[name] = subprocess.Popen(
            [sys.executable, str(child), str(q.mod.__file__), dsn, name],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(1.0)  # the on-time worker holds its leases before the skewed ones claim
    try:
        deadline = time.monotonic() + 90
        with psycopg.connect(dsn, autocommit=True) as conn:
            while time.monotonic() < deadline:
                if conn.execute("SELECT count(*) FROM jobs").fetchone() == (0,):
                    break
                assert all(p.poll() is None for p in procs.values()), "a worker died"
                time.sleep(0.25)
            left = conn.execute("SELECT count(*) FROM jobs").fetchone()
            runs = conn.execute("SELECT job_id, worker, at FROM deliveries").fetchall()
    finally:
        for p in procs.values():
            p.send_signal(signal.SIGTERM)
        outputs = {}
        for name, p in procs.items():
            try:
                outputs[name] = p.communicate(timeout=60)[0]
            except subprocess.TimeoutExpired:
                p.kill()
                outputs[name] = p.communicate()[0] + "\n(killed: no exit 60 s after SIGTERM)"
    assert left == (0,), outputs
    twice = sorted({j for j, *_ in runs if sum(1 for k, *_ in runs if k == j) > 1})
    assert twice == [], f"run twice: {twice}"
    early = [(j, w, (due[j] - at).total_seconds()) for j, w, at in runs if at < due[j]]
    assert early == [], f"run before due: {early}"
    assert {w for _, w, _ in runs} == set(SKEWS)  # every worker took part
    assert "this host's clock is 30.0 s ahead of the database's" in outputs["fast"]
    assert "this host's clock is 30.0 s behind the database's" in outputs["slow"]
    assert "host's clock" not in outputs["on-time"]
    assert all(p.returncode == 0 for p in procs.values()), outputs


@pytest.mark.parametrize("dialect", ["postgres", "mysql+pymysql", "mysql+asyncmy", "sqlite"])
def test_a_worker_reads_the_databases_clock_where_it_has_one(queue, dialect: str) -> None:
    """The offset is measured at start on every driver (about zero on this one host); SQLite's
    clock is the process's, and a test clock is never corrected."""
    import asyncio

    from inboxgen import Worker
    from inboxgen.runtime.clock import DatabaseClock
    from inboxgen.testing import FakeClock

    q = queue(dialect)

    async def main() -> None:
        worker = Worker(q.mod.DESCRIPTOR, lambda job: None, database=q.database)
        await worker.start()
        try:
            if dialect == "sqlite":
                assert not isinstance(worker.clock, DatabaseClock)
            else:
                assert isinstance(worker.clock, DatabaseClock)
                assert abs(worker.clock.offset.total_seconds()) < 1.0
        finally:
            await worker.shutdown()
        fake = FakeClock()
        assert Worker(q.mod.DESCRIPTOR, lambda job: None, database=q.database,
                      clock=fake).clock is fake

    asyncio.run(main())
