"""The long profile: every scenario and form of cases.py (plus a clean run of every shape and the
defect scenarios) with many jobs each and every fault repeated, written as a markdown report.

    python3 -m tests.faults.long_profile [--jobs 20000] [--out fault-report.md] [--only TEXT]

Run it from the repository root. It starts private PostgreSQL and MariaDB servers of its own (as
the test suite does) and removes them at the end; every worker process is killed before it
exits. `--only` keeps the cases whose id contains TEXT (may be given more than once).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import cases as catalog
from .checker import Report
from .harness import Servers, markdown, run_case
from .restartable import RestartableMariaDB, RestartablePostgres
from .shapes import MAX_ATTEMPTS, SHAPES


def all_cases() -> list[catalog.Case]:
    # The -due shapes are the lease's with a due time: their scenarios are the skew ones.
    clean = [catalog._case(shape, "clean") for shape in SHAPES
             if not shape.startswith("sqlite-advisory") and not shape.endswith("-due")]
    clean.append(catalog._case("sqlite-advisory", "clean", processes=1))
    return [*clean, *catalog.CASES, *catalog.DEFECTS]


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python3 -m tests.faults.long_profile",
                                description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--jobs", type=int, default=20000, help="jobs per scenario (default 20000)")
    p.add_argument("--out", default="fault-report.md", help="the markdown report to write")
    p.add_argument("--only", action="append", default=[], help="run the cases whose id "
                   "contains this text")
    p.add_argument("--keep", action="store_true", help="keep the event logs and databases")
    args = p.parse_args(argv)

    chosen = [c for c in all_cases() if not args.only or any(o in c.id for o in args.only)]
    if not chosen:
        print("no case matches", file=sys.stderr)
        return 2
    base = Path(tempfile.mkdtemp(prefix="inboxgen-faults-"))
    started: dict[str, Any] = {}

    def server(kind: str) -> Any:
        if kind not in started:
            from mariadb_server import MariaDBServer
            from servers import PostgresServer

            make = {"pg": PostgresServer, "mysql": MariaDBServer,
                    "pg-restart": RestartablePostgres, "mysql-restart": RestartableMariaDB}
            started[kind] = make[kind]()
        return started[kind]

    servers = Servers(pg=lambda: server("pg"), mysql=lambda: server("mysql"),
                      pg_restart=lambda: server("pg-restart"),
                      mysql_restart=lambda: server("mysql-restart"))
    reports: list[Report] = []
    errors: list[str] = []
    began = time.time()
    try:
        for n, case in enumerate(chosen, 1):
            t0 = time.time()
            print(f"[{n}/{len(chosen)}] {case.id} ...", file=sys.stderr, flush=True)
            try:
                report = run_case(case, servers, base / case.id, jobs=args.jobs)
            except Exception as err:  # one broken case must not cost the others
                errors.append(f"{case.id}: {type(err).__name__}: {err}")
                print(f"    failed: {err}", file=sys.stderr, flush=True)
                continue
            reports.append(report)
            print(f"    {time.time() - t0:.0f} s: {report.summary()}", file=sys.stderr,
                  flush=True)
            for problem in report.problems():
                print(f"    ! {problem[:300]}", file=sys.stderr, flush=True)
            # Partial reports survive an interrupted run.
            Path(args.out).write_text(_document(reports, errors, args, began), encoding="utf-8")
    finally:
        for s in started.values():
            s.stop()
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    Path(args.out).write_text(_document(reports, errors, args, began), encoding="utf-8")
    print(f"wrote {args.out} ({len(reports)} scenarios, {time.time() - began:.0f} s)",
          file=sys.stderr)
    return 0 if not errors else 1


def _document(reports: list[Report], errors: list[str], args: argparse.Namespace,
              began: float) -> str:
    lines = [
        "# Fault suite: long profile",
        "",
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}; {args.jobs} jobs per "
        f"scenario, max_attempts {MAX_ATTEMPTS}, {time.time() - began:.0f} s in all.",
        "",
        "Columns: lost, duplicated, stranded (checker.py); healthy dead = healthy jobs in the "
        "dead letters (unexplained: not every delivery of it died with its process); recovery "
        "ratio = effects/s in the 5 s after the last fault ended / effects/s before the first "
        "fault (target >= 0.95); recovered within = seconds from the fault's end to the first 1 s "
        "window at 95 % of the clean rate; drain = seconds from the start to the queue seen "
        "empty (n/a: not drained within the scenario's timeout).",
        "",
        markdown(reports),
    ]
    bad = [(r, r.problems()) for r in reports if r.problems()]
    if bad:
        lines += ["## Broken invariants", ""]
        for r, problems in bad:
            lines.append(f"- **{r.scenario}**: " + "; ".join(p[:400] for p in problems))
        lines.append("")
    missed = [r for r in reports if r.recovery_ratio is not None and r.recovery_ratio < 0.95]
    if missed:
        lines += ["## Recovery below 0.95", ""]
        lines += [f"- {r.scenario}: {r.recovery_ratio:.2f} (clean {r.clean_rate:.0f}/s, after "
                  f"the fault {r.recovery_rate:.0f}/s over {r.recovery_window_s:.1f} s)"
                  for r in missed if r.clean_rate and r.recovery_rate is not None
                  and r.recovery_window_s is not None]
        lines.append("")
    if errors:
        lines += ["## Scenarios that could not run", ""] + [f"- {e}" for e in errors] + [""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
