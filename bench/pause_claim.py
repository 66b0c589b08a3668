"""What the pause condition ([flow] pauses) costs one claim on PostgreSQL: the same claim of a
row lock (`SELECT ... FOR UPDATE SKIP LOCKED`, batch 1) on a 20,000-row table, without and
with `NOT EXISTS (SELECT 1 FROM pauses WHERE queue = ...)`, each run and rolled back N times on
one connection (as psycopg runs it: prepared after five runs), in turns, on a private server with
stock durability. Prints microseconds per claim and the planning time EXPLAIN reports. Not a
test: figures depend on the machine.

    python bench/pause_claim.py [--claims 3000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from servers import PostgresServer  # noqa: E402

TABLES = """
CREATE TABLE jobs (id BIGSERIAL PRIMARY KEY, retry_after TIMESTAMPTZ NOT NULL DEFAULT now(),
                   attempt INT NOT NULL DEFAULT 1, payload JSONB NOT NULL);
CREATE INDEX jobs_claim ON jobs (retry_after, id);
CREATE TABLE pauses (queue TEXT NOT NULL, paused_group TEXT);
INSERT INTO jobs (payload) SELECT '{}' FROM generate_series(1, 20000);
ANALYZE;
"""
CLAIM = """SELECT "id", "retry_after", "attempt", "payload"
FROM "jobs"
WHERE "retry_after" <= %(now)s{paused}
ORDER BY "retry_after", "id"
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED"""
PAUSED = """
  AND NOT EXISTS (
    SELECT 1
    FROM "pauses"
    WHERE "queue" = %(queue)s
)"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--claims", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    opts = parser.parse_args()
    server = PostgresServer(durable=True)
    try:
        dsn = server.create_database("pause_claim")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(TABLES)
        params = {"now": dt.datetime.now(dt.UTC), "limit": 1, "queue": "jobs"}
        for turn in range(opts.rounds):
            for name, sql in (("without", CLAIM.format(paused="")),
                              ("with the pause condition", CLAIM.format(paused=PAUSED))):
                with psycopg.connect(dsn) as conn:
                    for _ in range(200):  # warm: prepared, cached
                        conn.execute(sql, params).fetchall()
                        conn.rollback()
                    started = time.perf_counter()
                    for _ in range(opts.claims):
                        conn.execute(sql, params).fetchall()
                        conn.rollback()
                    each = (time.perf_counter() - started) / opts.claims * 1e6
                    plan = conn.execute("EXPLAIN (ANALYZE, SUMMARY) " + sql, params).fetchall()
                    planning = next(r[0] for r in plan if "Planning Time" in r[0])
                    conn.rollback()
                print(f"round {turn + 1}, {name}: {each:.0f} us a claim and its rollback; "
                      f"{planning}", flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
