"""Drain N pre-enqueued no-op jobs on a private MariaDB: the inboxgen Worker (row lock, 10
workers) against a bare PyMySQL loop running the same generated statements (10 threads, one
connection each: claim, finish each row, COMMIT), at batch 1 and 16; prints jobs/s and the
ratio. Where aiomysql is installed (it is not a dependency of inboxgen), also a bare aiomysql
loop over the same statements: 10 connections on one event loop, no threads, which shows what
the runtime's thread per PyMySQL connection costs. Not a test: numbers depend on the machine.

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


def runtime(server: MariaDBServer, batch: int, n: int) -> float:
    module, url = fill(server, f"rt_{batch}", n)
    worker = Worker(module.DESCRIPTOR, noop, database=url, workers=WORKERS, batch=batch,
                    poll_interval=0.05)
    started = time.perf_counter()
    asyncio.run(run_until_idle(worker, timeout=600))
    return n / (time.perf_counter() - started)


def bare(server: MariaDBServer, batch: int, n: int) -> float:
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
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return n / (time.perf_counter() - started)


def bare_async(server: MariaDBServer, batch: int, n: int) -> float | None:
    """The bare loop on aiomysql, WORKERS connections on one event loop; None without it."""
    try:
        import aiomysql  # type: ignore[import-untyped]
    except ImportError:
        return None
    from pymysql.constants import CLIENT

    module, url = fill(server, f"aio_{batch}", n)
    args = mysql_connect_args(url)

    async def loop() -> None:
        conn = await aiomysql.connect(host=args["host"], port=args["port"], user=args.get("user"),
                                      password=args.get("password", ""), db=args["database"],
                                      autocommit=False, client_flag=CLIENT.FOUND_ROWS)
        try:
            cur = await conn.cursor()
            await cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            await cur.execute("SET SESSION time_zone = '+00:00'")
            while True:
                await cur.execute(module.CLAIM, {"limit": batch})
                rows = [module._claimed(r) for r in await cur.fetchall()]
                for row in rows:
                    await cur.execute(module.FINISH, {"id": row.id})
                await conn.commit()
                if not rows:
                    return
        finally:
            conn.close()

    async def loops() -> None:
        await asyncio.gather(*[loop() for _ in range(WORKERS)])

    started = time.perf_counter()
    asyncio.run(loops())
    return n / (time.perf_counter() - started)


def main(n: int) -> None:
    server = MariaDBServer()
    try:
        for batch in (1, 16):
            rt, ceiling = runtime(server, batch, n), bare(server, batch, n)
            line = (f"row lock batch {batch:2}: runtime {rt:7.0f} jobs/s, bare PyMySQL loop "
                    f"{ceiling:7.0f} jobs/s ({rt / ceiling:.2f}x)")
            on_loop = bare_async(server, batch, n)
            if on_loop is not None:
                line += f", bare aiomysql loop {on_loop:7.0f} jobs/s"
            print(line, flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5000)
