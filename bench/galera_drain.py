"""Drain N pre-enqueued no-op jobs from a lease table on a MariaDB Galera cluster of `--nodes`
nodes (3 by default) on loopback: one Worker (10 slots) on node 0, then one on each of the first
two nodes, then on each of three (10 slots each), each drain on a fresh database; and, for
scale, the same on a standalone MariaDB. Prints jobs/s per drain, the jobs each node's worker
ran (and so its claims/s), and the claims the cluster rolled back (certification failures and
brute-force aborts, summed over the nodes). Not a test: numbers depend on the machine.

    python bench/galera_drain.py [N] [--batch B] [--nodes K]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests")]

import pymysql  # noqa: E402
from galera_cluster import GaleraCluster  # noqa: E402
from genutil import build_module, ddl_of  # noqa: E402
from mariadb_server import MariaDBServer  # noqa: E402

from inboxgen import Worker  # noqa: E402

DDL = """
CREATE TABLE jobs (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    locked_until DATETIME(6) NULL,
    attempt INTEGER NOT NULL DEFAULT 0,
    payload JSON NOT NULL
);
"""
SPEC = ('table = "jobs"\ndialect = "mysql"\n[columns]\n'
        'id = { role = "id", generated = true }\nlocked_until = "locked_until"\n'
        'attempt = { role = "attempt", generated = true }\npayload = "payload"\n')


async def noop(job: object) -> None:
    return None


def fill(args: dict[str, Any], module: Any, ddl: str, n: int) -> None:
    conn = pymysql.connect(**args)
    try:
        with conn.cursor() as cur:
            cur.execute(ddl)
        for start in range(0, n, 1000):
            module.insert_many(conn, [module.NewRow(payload={"n": i})
                                      for i in range(start, min(n, start + 1000))])
        conn.commit()
    finally:
        conn.close()


def left(args: dict[str, Any]) -> int:
    conn = pymysql.connect(**args, autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM jobs")
            return int(cur.fetchone()[0])
    finally:
        conn.close()


async def drain(module: Any, urls: list[str], count: dict[str, Any], batch: int) -> float:
    workers = [Worker(module.DESCRIPTOR, noop, database=url, workers=10, batch=batch,
                      poll_interval=0.05, listen=False) for url in urls]
    started = time.perf_counter()
    for w in workers:
        await w.start()
    try:
        while await asyncio.to_thread(left, count):
            await asyncio.sleep(0.02)
    finally:
        for w in workers:
            await w.shutdown()
    took = time.perf_counter() - started
    print("   jobs run per node's worker: " + ", ".join(
        f"{w.stats.delivered} ({w.stats.delivered / took:.0f}/s)" for w in workers))
    return took


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("jobs", type=int, nargs="?", default=5000)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--nodes", type=int, default=3)
    opts = parser.parse_args()
    root = Path(tempfile.mkdtemp())
    module: Any = build_module(root, SPEC, DDL, name="jobs")
    ddl = ddl_of(root, "jobs")
    print(f"{opts.jobs} no-op jobs, lease, batch {opts.batch}, 10 slots a worker")
    single = MariaDBServer("--skip-log-bin", "--innodb-flush-log-at-trx-commit=0")
    try:
        single.create_database("one")
        fill(single.connect_args("one"), module, ddl, opts.jobs)
        took = asyncio.run(drain(module, [single.url("one")], single.connect_args("one"),
                                 opts.batch))
        print(f"standalone MariaDB, one worker: {opts.jobs / took:7.0f} jobs/s")
    finally:
        single.stop()
    cluster = GaleraCluster(nodes=opts.nodes)
    try:
        for k in range(1, opts.nodes + 1):
            nodes = list(range(k))
            label = "one worker on node 0" if k == 1 else f"a worker on each of {k} nodes"
            name = cluster.create_database()
            fill(cluster.connect_args(0, name), module, ddl, opts.jobs)
            before = cluster.rolled_back()
            took = asyncio.run(drain(module, [cluster.url(n, name) for n in nodes],
                                     cluster.connect_args(0, name), opts.batch))
            print(f"Galera, {label}: {opts.jobs / took:7.0f} jobs/s, "
                  f"{cluster.rolled_back() - before} claim(s) rolled back by the cluster")
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
