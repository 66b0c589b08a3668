"""inboxgen as a peer of the shared queue benchmark (../shared/bench/peers): the runtime, and
bare psycopg loops running the same generated statements, so that the runtime's overhead over
its own SQL shows. The `*_peer.py` files beside this one are the variants the report lists.

The generated modules come from specs/ (this folder is an inboxgen project of its own:
`inboxgen verify` here checks them).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg
from peerbench import hooks
from peerbench.peers.base import AsyncPeer, Target, WorkerOpts

from inboxgen import Worker, values  # a library import: before the harness's clock starts

HERE = Path(__file__).resolve().parent
MIGRATIONS = HERE / "specs"
MIGRATION = MIGRATIONS / "migrations" / "001_jobs.sql"
POLL_S = 0.02  # the harness's own polling interval


def generated(form: str) -> ModuleType:
    if str(HERE / "generated") not in sys.path:
        sys.path.insert(0, str(HERE / "generated"))
    return importlib.import_module(f"bench_{form}")


async def _handler(job: Any) -> None:
    hooks.job_started(job.payload["n"])


class InboxgenPeer(AsyncPeer):
    """The inboxgen Worker on one table, `concurrency` slots, `batch` rows per claim."""

    dists = ("inboxgen", "psycopg", "psycopg-pool")
    backend = "postgres"
    form = "row_lock"
    batch = 1
    group: str | None = None  # the table's group (column queue) where it has one
    bulk_api = "insert_many_async(conn, rows) (one INSERT ... SELECT FROM unnest)"

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"inboxgen {self.form.replace('_', ' ')} (batch {self.batch})"

    @property
    def settings(self) -> str:  # type: ignore[override]
        return (f"Worker(workers=concurrency, batch={self.batch}, listen=True); async no-op "
                f"handler; finished rows kept (processed_at)")

    @property
    def table(self) -> str:
        return f"bench_{self.form}"

    @property
    def done_sql(self) -> str:  # type: ignore[override]
        return f'SELECT count(*) FROM "{self.table}" WHERE processed_at IS NOT NULL'

    @property
    def queued_sql(self) -> str:  # type: ignore[override]
        return f'SELECT count(*) FROM "{self.table}" WHERE processed_at IS NULL'

    async def ainstall(self, target: Target) -> None:
        async with await psycopg.AsyncConnection.connect(target.conninfo) as conn:
            await conn.execute(MIGRATION.read_text(encoding="utf-8"))

    @contextlib.asynccontextmanager
    async def aclient(self, target: Target):  # type: ignore[no-untyped-def]
        # Autocommit, as the other peers' clients (asyncpg's default): a job enqueued on its own
        # is one statement (INSERT_NOTIFY), its own transaction. A service enqueueing with its
        # data calls the same function inside its transaction.
        async with await psycopg.AsyncConnection.connect(target.conninfo,
                                                         autocommit=True) as conn:
            yield self.enqueuer(generated(self.form), conn)

    def new_row(self, mod: ModuleType, i: int) -> Any:
        if self.group is None:
            return mod.NewRow(payload={"n": i})
        return mod.NewRow(queue=self.group, payload={"n": i})

    def enqueuer(self, mod: ModuleType, conn: Any) -> Any:
        peer = self

        class Client:
            async def enqueue_one(self, i: int) -> None:
                await mod.insert_async(conn, peer.new_row(mod, i), notify=True)

            async def enqueue_many(self, ids: list[int]) -> None:
                async with conn.transaction():
                    await mod.insert_many_async(conn, [peer.new_row(mod, i) for i in ids])
                    await mod.notify_async(conn, peer.group or "")

        return Client()

    async def aworker(self, target: Target, opts: WorkerOpts, stop: asyncio.Event) -> None:
        worker = Worker(generated(self.form).DESCRIPTOR, _handler, database=target.conninfo,
                        group=self.group, workers=opts.concurrency, batch=self.batch,
                        listen=True, poll_interval=1.0)
        await worker.start()
        try:
            await stop.wait()
        finally:
            await worker.shutdown()


class BarePeer(InboxgenPeer):
    """No runtime: `concurrency` tasks, each with its own connection, running the generated
    statements in the plainest loop (claim, handler, settle, commit). `pipelined` sends a
    round's settlements, its COMMIT and the next claim in one round trip (row lock only). A
    batch's acks go as one statement (FINISH_MANY), as the runtime sends them."""

    workloads = ("W3",)
    pipelined = False

    @property
    def name(self) -> str:  # type: ignore[override]
        how = ", pipelined" if self.pipelined else ""
        return f"bare psycopg loop, {self.form.replace('_', ' ')} (batch {self.batch}{how})"

    @property
    def settings(self) -> str:  # type: ignore[override]
        return ("the generated statements in a hand-written loop: one connection per task, "
                "no pool, no renewal, no error handling; a ceiling, not a queue")

    async def aworker(self, target: Target, opts: WorkerOpts, stop: asyncio.Event) -> None:
        mod = generated(self.form)
        loop = self._pipelined_row_lock if self.pipelined else (
            self._row_lock if self.form == "row_lock" else self._lease)
        tasks = [asyncio.create_task(loop(mod, target, stop)) for _ in range(opts.concurrency)]
        await stop.wait()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _row_lock(self, mod: ModuleType, target: Target, stop: asyncio.Event) -> None:
        async with await psycopg.AsyncConnection.connect(target.conninfo) as conn:
            while not stop.is_set():
                rows = await mod.claim_async(conn, limit=self.batch)
                for row in rows:
                    hooks.job_started(row.payload["n"])
                    await mod.finish_async(conn, id=row.id, now=_now())
                await conn.commit()
                if not rows:
                    await asyncio.sleep(POLL_S)

    async def _pipelined_row_lock(self, mod: ModuleType, target: Target,
                                  stop: asyncio.Event) -> None:
        async with await psycopg.AsyncConnection.connect(target.conninfo,
                                                         autocommit=True) as conn:
            done: list[Any] = []
            while not stop.is_set():
                async with conn.pipeline():
                    if len(done) == 1:
                        await conn.execute(mod.FINISH, {"id": done[0], "now": _now()})
                    elif done:  # a batch's acks as one statement, as the runtime sends them
                        await conn.execute(mod.FINISH_MANY, {"id": done, "now": _now()})
                    if done:
                        await conn.execute("COMMIT")
                    await conn.execute("BEGIN")
                    # From the head, as claim() binds it where it is given no start.
                    cur = await conn.execute(mod.CLAIM, {"limit": self.batch,
                                                         "from_id": values.LOWEST_ID})
                rows = await cur.fetchall()
                done = []
                for r in rows:
                    row = mod._claimed(r)
                    hooks.job_started(row.payload["n"])
                    done.append(row.id)
                if not rows:
                    await conn.execute("COMMIT")
                    await asyncio.sleep(POLL_S)

    async def _lease(self, mod: ModuleType, target: Target, stop: asyncio.Event) -> None:
        # Autocommit: the claim and the batch's acks are one statement each, as the runtime's.
        async with await psycopg.AsyncConnection.connect(target.conninfo,
                                                         autocommit=True) as conn:
            while not stop.is_set():
                now = _now()
                until = now + dt.timedelta(seconds=30)
                rows = await mod.claim_async(conn, now=now, locked_until=until,
                                             limit=self.batch)
                for row in rows:
                    hooks.job_started(row.payload["n"])
                if len(rows) == 1:
                    await mod.finish_async(conn, id=rows[0].id, now=_now(),
                                           locked_until=rows[0].locked_until,
                                           attempt=rows[0].attempt)
                elif rows:
                    await mod.finish_many_async(
                        conn, id=[r.id for r in rows], now=_now(),
                        locked_until=[r.locked_until for r in rows],
                        attempt=[r.attempt for r in rows])
                if not rows:
                    await asyncio.sleep(POLL_S)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class BareInsertPeer(InboxgenPeer):
    """No generated function around the statement: W1 with the same INSERT_NOTIFY executed
    straight on an autocommit psycopg connection, the Python ceiling for an enqueue."""

    workloads = ("W1",)

    @property
    def name(self) -> str:  # type: ignore[override]
        return "bare psycopg INSERT_NOTIFY, autocommit"

    @property
    def settings(self) -> str:  # type: ignore[override]
        return "the generated statement, executed and fetched by hand; a ceiling, not a queue"

    def enqueuer(self, mod: ModuleType, conn: Any) -> Any:
        class Client:
            async def enqueue_one(self, i: int) -> None:
                params = {**mod._insert_params(mod.NewRow(payload={"n": i})),
                          "notify_channel": mod.CHANNEL, "notify_group": ""}
                cur = await conn.execute(mod.INSERT_NOTIFY, params)
                await cur.fetchone()

            async def enqueue_many(self, ids: list[int]) -> None:
                raise NotImplementedError  # W1 only

        return Client()
