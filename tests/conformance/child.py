"""One worker process of the conformance matrix: `python child.py CONFIG.json`.

It serves the shape's table with the handler kind the shape names until SIGTERM (Worker.run).
Every delivery the handler sees is appended to `deliveries.log` (key, pid, attempt) before it
acts; an effect goes to `effects.log` (plain and async handlers, written before the ack) or, for
a transactional handler, into the shape's ledger table on `job.connection` (so it commits with
the ack or not at all). The crashing job SIGKILLs its process on its first delivery. At a clean
exit the Prometheus counts of the worker's outcomes go to `metrics-<pid>.json`.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any


def main() -> None:
    config = json.loads(Path(sys.argv[1]).read_text())
    sys.path.insert(0, config["tests"])
    sys.path.insert(0, config["project"])
    from genutil import import_path
    from prometheus_client import CollectorRegistry

    from conformance import shapes
    from inboxgen import Backoff, Worker, drop
    from inboxgen.contrib.prometheus import Prometheus

    if config["walk_keys"]:
        from inboxgen.runtime import limits

        limits.KEYS_WALK_FROM = 0  # every count says walk: this process claims by key
    module = import_path(config["module"], config["name"])
    logs = Path(config["logs"])
    deliveries = os.open(logs / "deliveries.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    effects = os.open(logs / "effects.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    ledger = config["ledger_sql"]
    handler_kind = config["handler"]
    # Where the table keeps results, a job with an effect returns one for its ack to write.
    returned = "result" in module.DESCRIPTOR.roles
    # Where it keeps progress, the acked job reports some and outlasts its first renewal, so
    # that one writes it: half the lease is left then, and the first expiry is rounded up to
    # a whole second, so that renewal comes up to a lease after the claim.
    # (Not a transactional handler on SQLite: its transaction holds the file's write lock, so
    # no renewal can write until it ends, and a longer job outlasts the other rows' leases.)
    # The job waits until a renewal has written its progress (read on a connection of its
    # own), not a fixed time: a renewal that a loaded machine holds up past the first expiry
    # would otherwise let another worker claim the job while it still runs.
    reports = "progress" in module.DESCRIPTOR.roles and not (
        handler_kind == "transactional" and config["dialect"] == "sqlite")
    outlast = shapes.LEASE_SECONDS * 4  # at the most: a renewal that never comes is a finding

    def reported(job: Any) -> bool:
        if reports and shapes.job_of(job.payload)[1] == shapes.ACK:
            job.progress(0.5, shapes.job_of(job.payload)[0])
            return True
        return False

    def connect() -> Any:
        if config["dialect"] == "postgres":
            import psycopg

            return psycopg.connect(config["database"])
        if config["dialect"] == "mysql":
            from dbcases import mysql_connect

            return mysql_connect(config["database"])
        import sqlite3

        return sqlite3.connect(config["database"], timeout=30)

    def progress_written(job: Any) -> bool:
        import datetime as dt

        conn = connect()
        try:
            st = module.state(conn, id=job.id, now=dt.datetime.now(dt.UTC))
            return st is not None and st.progress is not None
        finally:
            conn.close()

    def outlast_renewal(job: Any) -> None:
        """Until a renewal has written the job's progress (`outlast` at the most)."""
        deadline = time.monotonic() + outlast
        while not progress_written(job) and time.monotonic() < deadline:
            time.sleep(0.05)

    def note(fd: int, line: str) -> None:
        os.write(fd, line.encode() + b"\n")
        os.fsync(fd)

    def act(job: Any) -> tuple[str, Any]:
        """What the job's payload asks for: 'effect', or an outcome to return or raise."""
        key, kind = shapes.job_of(job.payload)
        note(deliveries, f"{key} {os.getpid()} {job.attempt}")
        marker = logs / f"{key}.marker"
        if kind == shapes.CRASH and not marker.exists():
            marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)
        if kind == shapes.FAIL_ONCE and not marker.exists():
            marker.touch()
            raise RuntimeError(f"job {key} fails once")
        if kind == shapes.FAIL_ALWAYS:
            raise RuntimeError(f"job {key} fails every time")
        if kind == shapes.DROP:
            return "outcome", drop()
        return "effect", key

    def plain(job: Any) -> Any:
        if reported(job):
            outlast_renewal(job)
        return effect(job)

    def effect(job: Any) -> Any:
        what, value = act(job)
        if what == "outcome":
            return value
        note(effects, value)
        return {"job": value} if returned else None

    async def run_async(job: Any) -> Any:
        if reported(job):
            await asyncio.to_thread(outlast_renewal, job)
        return effect(job)

    def transactional_sync(job: Any) -> Any:
        if reported(job):
            outlast_renewal(job)
        what, value = act(job)
        if what == "outcome":
            return value
        if config["dialect"] == "sqlite":
            job.connection.execute(ledger, (value,))
        else:
            with job.connection.cursor() as cur:
                cur.execute(ledger, (value,))
        return {"job": value} if returned else None

    async def transactional_async(job: Any) -> Any:
        if reported(job):
            await asyncio.to_thread(outlast_renewal, job)
        what, value = act(job)
        if what == "outcome":
            return value
        await job.connection.execute(ledger, (value,))
        return {"job": value} if returned else None

    if handler_kind == "transactional":
        handler: Any = transactional_async if config["dialect"] == "postgres" \
            else transactional_sync
    else:
        handler = run_async if handler_kind == "async" else plain
    registry = CollectorRegistry()
    worker = Worker(module.DESCRIPTOR, handler, database=config["database"],
                    group=config["group"], workers=2, batch=config["batch"],
                    lease=shapes.LEASE_SECONDS, poll_interval=0.05,
                    backoff=Backoff(base=0.05, factor=20.0, cap=60.0),
                    transactional=handler_kind == "transactional",
                    observers=[Prometheus(registry)], shutdown_timeout=10.0)
    worker.run()
    counts: dict[str, float] = {}
    for metric in registry.collect():
        for sample in metric.samples:
            if sample.name == "inboxgen_deliveries_total":
                outcome = sample.labels["outcome"]
                counts[outcome] = counts.get(outcome, 0) + sample.value
    (logs / f"metrics-{os.getpid()}.json").write_text(json.dumps(counts))


if __name__ == "__main__":
    main()
