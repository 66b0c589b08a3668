"""Drain N pre-enqueued no-op jobs on a private MariaDB, row lock, 10 workers, at batch 1 and
16: the inboxgen Worker on its default driver (asyncmy) and on PyMySQL (mysql+pymysql://),
against bare loops running the same generated statements: PyMySQL in 10 threads, one
connection each, and the async twins on asyncmy, 10 connections on one event loop (claim,
finish each row, COMMIT). Prints jobs/s, the ratios, and this process's CPU time per job.
Not a test: numbers depend on the machine.

    python bench/mariadb_drain.py [N]          # WORKERS=1 for one worker and one thread
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests")]

from genutil import build_module, ddl_of  # noqa: E402
from mariadb_server import MariaDBServer  # noqa: E402

from inboxgen import Worker  # noqa: E402
from inboxgen.runtime.backends import mysql_connect_args  # noqa: E402
from inboxgen.runtime.backends.mysql import open_session  # noqa: E402
from inboxgen.testing import run_until_idle  # noqa: E402

DDL = """
CREATE TABLE jobs (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    attempt INTEGER NOT NULL DEFAULT 1,
    payload JSON NOT NULL
);
"""
SPEC = ('table = "jobs"\ndialect = "mysql"\n[columns]\n'
        'id = { role = "id", generated = true }\n'
        'attempt = { role = "attempt", generated = true }\npayload = "payload"\n')
WORKERS = int(os.environ.get("WORKERS", "10"))


async def noop(job: object) -> None:
    return None


def fill(server: MariaDBServer, name: str, n: int) -> tuple[Any, str]:
    root = Path(tempfile.mkdtemp())
    module: Any = build_module(root, SPEC, DDL, name=name)
    url = server.create_database(name)
    conn = open_session(mysql_connect_args(url))
    with conn.cursor() as cur:
        cur.execute(ddl_of(root, name))
    for start in range(0, n, 1000):
        module.insert_many(conn, [module.NewRow(payload={"n": i})
                                  for i in range(start, min(n, start + 1000))])
    conn.commit()
    conn.close()
    return module, url


class Run:
    """jobs/s and this process's CPU µs per job of one drain."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __enter__(self) -> Run:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.rate = self.n / (time.perf_counter() - self.wall)
        self.cpu_us = (time.process_time() - self.cpu) / self.n * 1e6

    def __str__(self) -> str:
        return f"{self.rate:7.0f} jobs/s ({self.cpu_us:4.0f} µs CPU/job)"


def runtime(server: MariaDBServer, batch: int, n: int, scheme: str) -> Run:
    module, url = fill(server, f"rt_{scheme.replace('+', '_')}_{batch}", n)
    worker = Worker(module.DESCRIPTOR, noop, database=scheme + url.removeprefix("mysql"),
                    workers=WORKERS, batch=batch, poll_interval=0.05)
    with Run(n) as run:
        asyncio.run(run_until_idle(worker, timeout=600))
    return run


def bare(server: MariaDBServer, batch: int, n: int) -> Run:
    module, url = fill(server, f"bare_{batch}", n)

    def loop() -> None:
        conn = open_session(mysql_connect_args(url))
        try:
            while True:
                rows = module.claim(conn, limit=batch)
                for row in rows:
                    module.finish(conn, id=row.id)
                conn.commit()
                if not rows:
                    return
        finally:
            conn.close()

    threads = [threading.Thread(target=loop) for _ in range(WORKERS)]
    with Run(n) as run:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return run


def bare_async(server: MariaDBServer, batch: int, n: int) -> Run:
    """The bare loop on asyncmy: the generated async twins, WORKERS connections on one loop."""
    import asyncmy
    from asyncmy.constants import CLIENT

    module, url = fill(server, f"async_{batch}", n)
    args = mysql_connect_args(url)

    async def loop() -> None:
        conn = await asyncmy.connect(**args, autocommit=False, client_flag=CLIENT.FOUND_ROWS)
        try:
            cur = conn.cursor()
            await cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            await cur.execute("SET SESSION time_zone = '+00:00'")
            while True:
                rows = await module.claim_async(conn, limit=batch)
                for row in rows:
                    await module.finish_async(conn, id=row.id)
                await conn.commit()
                if not rows:
                    return
        finally:
            conn.close()

    async def loops() -> None:
        await asyncio.gather(*[loop() for _ in range(WORKERS)])

    with Run(n) as run:
        asyncio.run(loops())
    return run


def main(n: int) -> None:
    server = MariaDBServer()
    try:
        for batch in (1, 16):
            rt = runtime(server, batch, n, "mysql")
            rt_threads = runtime(server, batch, n, "mysql+pymysql")
            ceiling, on_loop = bare(server, batch, n), bare_async(server, batch, n)
            print(f"row lock batch {batch:2}:\n"
                  f"  runtime on asyncmy    {rt}  {rt.rate / ceiling.rate:.2f}x bare PyMySQL, "
                  f"{rt.rate / on_loop.rate:.2f}x bare asyncmy\n"
                  f"  runtime on PyMySQL    {rt_threads}  "
                  f"{rt_threads.rate / ceiling.rate:.2f}x bare PyMySQL\n"
                  f"  bare PyMySQL loop     {ceiling}\n"
                  f"  bare asyncmy loop     {on_loop}", flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5000)
