"""inboxgen on SQLite in the peer benchmark: the runtime (lease, the form SQLite has), and a bare
sqlite3 loop running the same generated statements, beside the harness's sqlite3 ceiling."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import sqlite3
import threading
import time
from typing import Any

from inboxgen_bench import MIGRATIONS, POLL_S, generated
from peerbench import hooks
from peerbench.peers.base import AsyncPeer, Target, WorkerOpts

from inboxgen import Worker  # a library import: before the harness's clock starts

FORM = "sqlite_lease"
TABLE = f"bench_{FORM}"


def _connect(target: Target) -> sqlite3.Connection:
    # As the runtime's own connections: autocommit with explicit BEGIN, WAL.
    assert target.path is not None
    conn = sqlite3.connect(target.path, isolation_level=None, timeout=30)
    conn.execute("PRAGMA journal_mode=WAL")
    return conn


def _count(target: Target, where: str) -> int:
    with contextlib.closing(_connect(target)) as conn:
        (n,) = conn.execute(f'SELECT count(*) FROM "{TABLE}" WHERE {where}').fetchone()
        return int(n)


async def _handler(job: Any) -> None:
    hooks.job_started(job.payload["n"])


class InboxgenSqlitePeer(AsyncPeer):
    """The inboxgen Worker on a SQLite file: `concurrency` slots, `batch` rows per claim."""

    dists = ("inboxgen",)
    backend = "sqlite"
    batch = 1
    bulk_api = "insert_many(conn, rows) (executemany in one transaction)"
    caveats = "SQLite, not PostgreSQL; the lease form (SQLite has no row locks)"

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"inboxgen SQLite lease (batch {self.batch})"

    @property
    def settings(self) -> str:  # type: ignore[override]
        return (f"Worker(workers=concurrency, batch={self.batch}, listen=True): WAL, the file "
                f"watched for commits; async no-op handler; finished rows kept (processed_at)")

    def done_count(self, target: Target, opts: WorkerOpts) -> int:
        return _count(target, "processed_at IS NOT NULL")

    def queued_count(self, target: Target) -> int:
        return _count(target, "processed_at IS NULL")

    async def ainstall(self, target: Target) -> None:
        with contextlib.closing(_connect(target)) as conn:
            conn.executescript((MIGRATIONS / "migrations_sqlite" / "001_jobs.sql").read_text(
                encoding="utf-8"))

    @contextlib.asynccontextmanager
    async def aclient(self, target: Target):  # type: ignore[no-untyped-def]
        mod = generated(FORM)
        conn = _connect(target)

        class Client:
            async def enqueue_one(self, i: int) -> None:
                conn.execute("BEGIN IMMEDIATE")
                mod.insert(conn, mod.NewRow(payload={"n": i}))
                conn.execute("COMMIT")

            async def enqueue_many(self, ids: list[int]) -> None:
                conn.execute("BEGIN IMMEDIATE")
                mod.insert_many(conn, [mod.NewRow(payload={"n": i}) for i in ids])
                conn.execute("COMMIT")

        try:
            yield Client()
        finally:
            conn.close()

    async def aworker(self, target: Target, opts: WorkerOpts, stop: asyncio.Event) -> None:
        worker = Worker(generated(FORM).DESCRIPTOR, _handler, database=target.path,
                        workers=opts.concurrency, batch=self.batch, poll_interval=1.0,
                        listen=True)
        await worker.start()
        try:
            await stop.wait()
        finally:
            await worker.shutdown()


class BareSqlitePeer(InboxgenSqlitePeer):
    """No runtime: one sqlite3 connection in one thread running the generated statements in
    the plainest loop: claim a batch and commit, then ack the batch (FINISH_MANY) and commit."""

    workloads = ("W3",)

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"bare sqlite3 loop, lease (batch {self.batch})"

    @property
    def settings(self) -> str:  # type: ignore[override]
        return ("the generated statements in a hand-written loop: one connection, one thread, "
                "no renewal, no error handling; a ceiling, not a queue")

    async def aworker(self, target: Target, opts: WorkerOpts, stop: asyncio.Event) -> None:
        mod = generated(FORM)
        done = threading.Event()

        def loop() -> None:
            with contextlib.closing(_connect(target)) as conn:
                while not done.is_set():
                    now = dt.datetime.now(dt.UTC)
                    conn.execute("BEGIN IMMEDIATE")
                    rows = mod.claim(conn, now=now, locked_until=now + dt.timedelta(seconds=30),
                                     limit=self.batch)
                    conn.execute("COMMIT")
                    if not rows:
                        time.sleep(POLL_S)
                        continue
                    for row in rows:
                        hooks.job_started(mod.decode_payload(row.payload)["n"])
                    now = dt.datetime.now(dt.UTC)
                    conn.execute("BEGIN IMMEDIATE")
                    if len(rows) == 1:  # as the runtime: one row, the one-row statement
                        mod.finish(conn, id=rows[0].id, now=now,
                                   locked_until=rows[0].locked_until, attempt=rows[0].attempt)
                    else:
                        mod.finish_many(conn, id=[r.id for r in rows], now=now,
                                        locked_until=[r.locked_until for r in rows],
                                        attempt=[r.attempt for r in rows])
                    conn.execute("COMMIT")

        thread = asyncio.ensure_future(asyncio.to_thread(loop))
        await stop.wait()
        done.set()
        await thread
