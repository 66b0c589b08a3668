"""The report renderer example on SQLite: renders run under a lease that the worker renews.

`python scripts/reports.py --lease 2 --render-seconds 3` shows a render outliving its lease: the
worker renews it every half lease, so no other worker takes the row, and it completes once.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sqlite3
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from generated_examples import reports  # noqa: E402
from inboxgen import Job, Worker  # noqa: E402
from inboxgen.testing import run_until_idle  # noqa: E402

MIGRATIONS = REPO / "specs" / "migrations" / "reports"


async def main(database: Path, count: int, lease: int, render_seconds: float) -> None:
    conn = sqlite3.connect(database)
    for migration in sorted(MIGRATIONS.glob("*.sql")):
        conn.executescript(migration.read_text(encoding="utf-8"))
    with conn:
        reports.insert_many(conn, [reports.NewRow(payload=f"report {i}".encode())
                                   for i in range(1, count + 1)])

    async def render(job: Job[bytes]) -> None:
        print(f"rendering {job.payload.decode()} (attempt {job.attempt})")
        await asyncio.sleep(render_seconds)
        print(f"rendered {job.payload.decode()}")

    worker = Worker(reports.DESCRIPTOR, render, database=database, lease=lease,
                    poll_interval=0.1)
    started = time.monotonic()
    await run_until_idle(worker, timeout=count * render_seconds + 30)
    print(f"done in {time.monotonic() - started:.1f} s: {worker.stats.acked} rendered, "
          f"{worker.stats.renewed} lease renewal(s), {worker.stats.lease_lost} lost")
    conn.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", type=Path, default=Path("reports.db"))
    parser.add_argument("--count", type=int, default=2)
    parser.add_argument("--lease", type=int, default=reports.DESCRIPTOR.defaults.lease_seconds)
    parser.add_argument("--render-seconds", type=float, default=1.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{args.database}{suffix}").unlink(missing_ok=True)
    asyncio.run(main(args.database, args.count, args.lease, args.render_seconds))
