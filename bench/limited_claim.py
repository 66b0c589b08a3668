"""What rows due later at a more urgent priority cost a limited lease's claim on PostgreSQL, and
what its claim by priority saves: tests/generate/golden/flow_limits' `pg_limited_jobs` (a
priority and a due time, `concurrency = 20`, `key_concurrency = 2` on `tenant`, a rate) with
1,000 due rows of priority 1 over 1,000 tenants, behind N rows of priority 0 due the next day.
Times `claim()` of ten rows (the turn, the forgotten window, the read, the leases and the record
of the rate), plain and by priority in turns, each rolled back, and `held_back()` of the first
1,000 due rows, on a private server with stock durability. Prints the p50 of each. Not a test:
figures depend on the machine.

    python bench/limited_claim.py [--ahead 0,1000000] [--claims 40] [--rounds 2]
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from genutil import import_path  # noqa: E402
from servers import PostgresServer  # noqa: E402

GOLDEN = ROOT / "tests" / "generate" / "golden" / "flow_limits"
FILL = """
INSERT INTO pg_limited_jobs (tenant, priority, retry_after, payload)
SELECT 't' || (g %% 1000), %(priority)s, now() + %(due_in)s, '{}'::jsonb
FROM generate_series(1, %(rows)s) AS g
"""


def p50_ms(run: Callable[[], None], claims: int) -> float:
    times = []
    for _ in range(claims):
        started = time.perf_counter()
        run()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ahead", default="0,1000000", help="rows due later, per run")
    parser.add_argument("--claims", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    mod = import_path(GOLDEN / "expected" / "pg_limited_jobs.py", "bench_pg_limited_jobs")
    ddl = (GOLDEN / "specs" / "pg.sql").read_text(encoding="utf-8")
    ddl = ddl[:ddl.index("CREATE TABLE pg_seated_jobs")]  # the limited lease's tables alone
    with PostgresServer() as pg:
        for ahead in (int(n) for n in args.ahead.split(",")):
            url = pg.create_database(f"ahead_{ahead}")
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(ddl)
                conn.execute(FILL, {"priority": 0, "due_in": dt.timedelta(days=1), "rows": ahead})
                conn.execute(FILL, {"priority": 1, "due_in": dt.timedelta(minutes=-1),
                                    "rows": 1000})
                conn.execute("VACUUM ANALYZE pg_limited_jobs")
            with psycopg.connect(url) as conn:
                def claim(by_priority: bool) -> None:
                    now = dt.datetime.now(dt.UTC)
                    rows = mod.claim(conn, now=now, locked_until=now + dt.timedelta(seconds=30),
                                     limit=10, by_priority=by_priority)
                    assert len(rows) == 10
                    conn.rollback()

                def held_back(by_priority: bool) -> None:
                    mod.held_back(conn, now=dt.datetime.now(dt.UTC), limit=1000,
                                  by_priority=by_priority)
                    conn.rollback()

                for n in range(args.rounds):
                    figures = {f"{what.__name__} {'by priority' if by else 'plain'}":
                               p50_ms(lambda w=what, b=by: w(b), args.claims)
                               for what in (claim, held_back) for by in (False, True)}
                    print(f"{ahead:>9,} rows due later, round {n + 1}: " + ", ".join(
                        f"{name} {ms:.2f} ms" for name, ms in figures.items()))


if __name__ == "__main__":
    main()
