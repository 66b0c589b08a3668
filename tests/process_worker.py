"""A worker in a child process, for tests/runtime/test_runtime_processes.py.

    python tests/process_worker.py MODULE DATABASE MODE --log FILE [options]

MODULE is the path of a generated module (imported by path), DATABASE a SQLite file, a
PostgreSQL conninfo or a MySQL/MariaDB URL (mysql://user@host:port/name; MySQL workers poll).
Everything the child does is appended to the log file, one line per event, flushed at once so the
parent can poll it:

    ready <pid>                 after the imports (and before waiting for --go)
    start <id> <attempt>        a handler began
    done <id>                   a handler finished (run mode)
    after <id> <finished> <dead>  a handler of a job that waited for others (run mode): how
                                many of those finished and died
    deliver <id> <attempt>      a handler ran (drain mode)
    idle                        drain mode: run_until_idle returned
    exit <stats as JSON>        the worker returned normally

Modes:

- ``crash``: every handler logs ``start`` and then blocks for ever; the parent SIGKILLs the child.
- ``drain``: every handler logs ``deliver`` (and sleeps ``--job-seconds``); the child runs
  ``inboxgen.testing.run_until_idle`` and exits 0 when the queue is idle.
- ``run``: ``Worker.run()`` until SIGTERM or SIGINT; every handler logs ``start``, sleeps
  ``--job-seconds`` and logs ``done``, then acks.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import attrs
from genutil import import_path

from inboxgen import Job, Worker
from inboxgen.testing import run_until_idle


class Log:
    """Append-only event log, one flushed line per event."""

    def __init__(self, path: str) -> None:
        self._file = open(path, "a", encoding="utf-8", buffering=1)

    def write(self, line: str) -> None:
        self._file.write(line + "\n")
        self._file.flush()


def load_module(path: str) -> Any:
    return import_path(path, f"_inboxgen_child_{Path(path).stem}_{os.getpid()}")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("module")
    p.add_argument("database")
    p.add_argument("mode", choices=["crash", "drain", "run"])
    p.add_argument("--log", required=True)
    p.add_argument("--go", help="wait until this file exists before starting the worker")
    p.add_argument("--group")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--lease", type=int)
    p.add_argument("--poll-interval", type=float, default=0.05)
    p.add_argument("--shutdown-timeout", type=float, default=30.0)
    p.add_argument("--job-seconds", type=float, default=0.0)
    p.add_argument("--no-listen", action="store_true")
    p.add_argument("--stamps", action="store_true",
                   help="end start and done lines with the machine's monotonic clock")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    module = load_module(args.module)
    log = Log(args.log)
    log.write(f"ready {os.getpid()}")

    def stamp() -> str:
        return f" {time.monotonic():.6f}" if args.stamps else ""

    async def crash_handler(job: Job[Any]) -> None:
        log.write(f"start {job.id} {job.attempt}{stamp()}")
        await asyncio.Event().wait()  # until the parent kills the process

    async def drain_handler(job: Job[Any]) -> None:
        log.write(f"deliver {job.id} {job.attempt}")
        if args.job_seconds:
            await asyncio.sleep(args.job_seconds)

    async def run_handler(job: Job[Any]) -> None:
        log.write(f"start {job.id} {job.attempt}{stamp()}")
        if job.after is not None:  # `after`: what the jobs it waited for became
            log.write(f"after {job.id} {len(job.after.finished)} {len(job.after.dead)}")
        await asyncio.sleep(args.job_seconds)
        log.write(f"done {job.id}{stamp()}")

    handler = {"crash": crash_handler, "drain": drain_handler, "run": run_handler}[args.mode]
    worker = Worker(
        module.DESCRIPTOR,
        handler,
        database=args.database,
        group=args.group,
        workers=args.workers,
        batch=args.batch,
        lease=args.lease,
        poll_interval=args.poll_interval,
        listen=False if args.no_listen else None,
        shutdown_timeout=args.shutdown_timeout,
    )

    if args.go:
        deadline = time.monotonic() + 60
        # Looked for often: children told to go together start within a fraction of a
        # millisecond of each other (the races of a start are what some tests are after).
        while not os.path.exists(args.go):
            if time.monotonic() > deadline:
                log.write("no go")
                return 3
            time.sleep(0.0002)

    if args.mode == "drain":
        asyncio.run(run_until_idle(worker, timeout=60))
        log.write("idle")
    else:
        worker.run()
    log.write("exit " + json.dumps(attrs.asdict(worker.stats)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
