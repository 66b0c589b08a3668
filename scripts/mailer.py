"""The mailer example: 8 workers serve the "emails" group; spent jobs go to "emails.dead".

`python scripts/mailer.py --database "host=... dbname=..."` (PostgreSQL conninfo or URL; woken by
LISTEN/NOTIFY) or `--database mysql://user@host:3306/db` (MariaDB/MySQL, polling). The table must
exist (specs/migrations/mailer or mailer_mariadb); the worker checks every statement at startup
and stops with a SchemaError naming the table and statement when it does not fit.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from generated_examples import mailer, mailer_mariadb  # noqa: E402
from inboxgen import Job, Outcome, Worker, ack, retry_after  # noqa: E402
from inboxgen.testing import run_until_idle  # noqa: E402


def send(job: Job[bytes]) -> Outcome:
    body = job.payload.decode()
    if "bounce" in body:
        print(f"email {job.id}: bounced (attempt {job.attempt}); trying again later")
        return retry_after(0.1)
    print(f"email {job.id}: sent {body!r}")
    return ack()


def enqueue(url: str, bodies: list[str]) -> None:
    if url.startswith("mysql"):
        import pymysql

        from inboxgen.runtime.backends import mysql_connect_args

        conn: Any = pymysql.connect(**mysql_connect_args(url))
        mailer_mariadb.insert_many(conn, [mailer_mariadb.NewRow(name="emails", payload=b.encode())
                                          for b in bodies])
        conn.commit()
        conn.close()
        return
    import psycopg

    with psycopg.connect(url) as pg:
        for body in bodies:
            mailer.insert(pg, mailer.NewRow(name="emails", payload=body.encode()), notify=True)


async def main(url: str) -> None:
    module: Any = mailer_mariadb if url.startswith("mysql") else mailer
    enqueue(url, ["welcome", "receipt", "bounce me"])
    worker = Worker(module.DESCRIPTOR, send, database=url, group="emails", poll_interval=0.2)
    await run_until_idle(worker, timeout=60)
    print(f"done: {worker.stats.acked} sent, {worker.stats.dead_lettered} dead-lettered")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", required=True, help="postgresql:// or mysql:// URL")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(main(args.database))
