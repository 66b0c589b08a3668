"""Drain N pre-enqueued no-op jobs on a private PostgreSQL: one worker, 10 workers, per claim
form and batch size; prints jobs/s. Not a test: numbers depend on the machine.

    python bench/drain.py [N] [FORM ...]     # forms: row_lock row_lock_counted lease advisory
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests")]

import psycopg  # noqa: E402
from genutil import build_module, ddl_of  # noqa: E402
from servers import PostgresServer  # noqa: E402

from inboxgen import Worker  # noqa: E402
from inboxgen.testing import run_until_idle  # noqa: E402

DDL = """
CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    attempt INTEGER NOT NULL DEFAULT 1,
    locked_until TIMESTAMPTZ,
    payload JSONB NOT NULL
);
"""
SPECS = {
    "row_lock": 'table = "jobs"\ndialect = "postgres"\n[columns]\n'
                'id = { role = "id", generated = true }\n'
                'attempt = { role = "attempt", generated = true }\npayload = "payload"\n',
    # Row lock counting every claim (count_crashes, the default with max_attempts): a job that
    # kills its worker still spends its attempt.
    "row_lock_counted": 'table = "jobs"\ndialect = "postgres"\ncount_crashes = true\n'
                        '[columns]\nid = { role = "id", generated = true }\n'
                        'attempt = { role = "attempt", generated = true }\npayload = "payload"\n',
    "lease": 'table = "jobs"\ndialect = "postgres"\n[columns]\n'
             'id = { role = "id", generated = true }\n'
             'attempt = { role = "attempt", generated = true }\n'
             'locked_until = "locked_until"\npayload = "payload"\n',
    "advisory": 'table = "jobs"\ndialect = "postgres"\nadvisory_key = "job-{id}"\n[columns]\n'
                'id = { role = "id", generated = true }\n'
                'attempt = { role = "attempt", generated = true }\npayload = "payload"\n',
}


async def noop(job: object) -> None:
    return None


def drain(server: PostgresServer, form: str, batch: int, n: int) -> float:
    root = Path(tempfile.mkdtemp())
    module: Any = build_module(root, SPECS[form], DDL.replace(
        "    locked_until TIMESTAMPTZ,\n", "" if form != "lease" else "    locked_until "
        "TIMESTAMPTZ,\n"), name=f"jobs_{form}_{batch}")
    dsn = server.create_database(f"{form}_{batch}")
    with psycopg.connect(dsn) as conn:
        conn.execute(ddl_of(root, f"jobs_{form}_{batch}"))
        module.insert_many(conn, [module.NewRow(payload={"n": i}) for i in range(n)])
    worker = Worker(module.DESCRIPTOR, noop, database=dsn, workers=10, batch=batch,
                    poll_interval=0.05, listen=False)
    started = time.perf_counter()
    asyncio.run(run_until_idle(worker, timeout=600))
    return n / (time.perf_counter() - started)


def main(n: int, forms: list[str]) -> None:
    server = PostgresServer()
    try:
        for form in forms or SPECS:
            for batch in (1, 16):
                print(f"{form:16} batch {batch:2}: {drain(server, form, batch, n):7.0f} jobs/s",
                      flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5000, sys.argv[2:])
