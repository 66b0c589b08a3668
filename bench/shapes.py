"""W3 on every production shape: drain N pre-enqueued no-op jobs with one Worker (10 slots, batch
1 and 16) per shape, claim form and release, on private servers with stock durability, and print
each figure beside its ratios. Not a test: figures depend on the machine.

    python bench/shapes.py [--jobs N] [--dialects postgres,mysql] [--shapes a,b]
                           [--variants row_lock,row_lock_counted,lease] [--batches 1,16]
                           [--previous REV] [--same-shape]

The shapes are the conformance matrix's production shapes (tests/conformance/axes.py,
PRODUCTION), each written as the matrix writes it (tests/conformance/shapes.py) with the claim
index and, on PostgreSQL, the storage settings the build asks for. The variants:

- `row_lock`: the row lock with `count_crashes = false` (a crash does not spend an attempt);
- `row_lock_counted`: the row lock counting every claim (`max_attempts`' default);
- `lease`;
- `row_lock_pauses`: the row lock on the shape with a pause table (`[flow] pauses`, nothing
  paused), its "before" being this checkout's row lock on the shape without one: what the
  pause condition in every claim costs.
- `lease_key_limits`: the lease with `[flow] key_concurrency = 2` on a tenant column holding
  1,000 keys (spread by a hash of the id), its "before" this checkout's lease on the shape
  without limits: what a per-key limit costs where it seldom binds.
- `lease_fair`: the lease with `[flow] fair = true` on the same 1,000 tenants, its "before" this
  checkout's lease without it: what the walk over the tenants costs.
- `lease_key_skewed`: `lease_key_limits` where one tenant's backlog stands first in claim order:
  the first half of the jobs (by id) belong to one tenant, at its limit of 2 while the others
  drain behind it, so each claim passes over its waiting rows; "before" as for
  `lease_key_limits`. Its drain ends when the other tenants' jobs are done (the big tenant's
  rest then runs two at a time, as its limit says), and its rate counts the jobs done by then.
- `lease_fair_skewed`: `lease_fair` on the same skewed tenants (no key limit): claims take turns
  across the tenants instead of passing over one's backlog.
- `lease_weighted`: `lease_fair` with a weights table (`[flow] weights_table`) giving every
  tenth tenant weight 4, its "before" this checkout's `lease_fair`: what weights cost.
- `row_lock_after`, `lease_after`: the row lock (not counting) and the lease on the shape with
  `after` (a parents column and an after table), every tenth job (by id) waiting for the one
  before it (`--waits-every`; 0: none, the claim's condition alone); "before" this
  checkout's same form on the shape without `after`: what the claim's condition and a
  waiting job's extra read cost (integer ids only).
- `row_lock_kept`, `lease_kept`: the row lock (not counting) and the lease with an `error`
  column and, on shapes that keep finished rows, a `result` column, every handler returning a
  small JSON object for its ack to write; "before" this checkout's same form on the shape
  without them: what keeping results (and a column more in every claim) costs.
- `row_lock_seats`: the row lock counting every claim with `[flow] concurrency = 100`, held by
  seats (session locks), its "before" this checkout's `row_lock_counted`: what the seats cost
  where the limit holds no job back.
- `advisory_seats`: the advisory form (each job its own key) with `key_concurrency = 2` over
  the 1,000 tenants and `concurrency = 100`, its "before" this checkout's advisory form
  without limits (`advisory`; FIFO shapes are left out, the advisory form has none).

Each drain runs twice, in a process of its own: with this checkout's generator and runtime
("now") and with those of release `--previous` ("before", the commit's `inboxgen` package
extracted with `git archive`), the two drains of one configuration one after the other on the
same server, each batch size taking them in the other order (a variant of the list above
compares so only with `--same-shape`). On PostgreSQL a third figure,
"bare", drains the row lock's table with the plainest loop over the generated statements (10
connections in pipeline mode, a round's acks as one FINISH_MANY, its COMMIT, BEGIN and the next
claim in one round trip), with each release's statements. Printed per line: jobs/s now, before,
bare now and bare before; the ratios now / before, now / bare, and counted / uncounted; and the
server's and the worker process's CPU per job (steadier than the rate on a shared machine).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PREVIOUS = "a3abc9c"  # the last release before the per-priority claims
VARIANTS = ("row_lock", "row_lock_counted", "lease")
PAUSES = "row_lock_pauses"  # not in the default sweep
KEY_LIMITS = "lease_key_limits"  # nor this
FAIR = "lease_fair"  # nor this
SKEWED = "lease_key_skewed"  # nor these
FAIR_SKEWED = "lease_fair_skewed"
WEIGHTED = "lease_weighted"  # "before": FAIR
TENANTS = (KEY_LIMITS, FAIR, SKEWED, FAIR_SKEWED, WEIGHTED)  # tables holding KEYS tenants
WEIGHTY = 10  # of a WEIGHTED variant's tenants, every tenth has weight 4
KEPT = ("row_lock_kept", "lease_kept")  # error and result columns; "before": the same without
WAITING = ("row_lock_after", "lease_after")  # `after`; "before": the same without
WAITS_EVERY = 10  # of a WAITING variant's jobs, every tenth waits for the one before it
RETURNED = {"sent": True, "id": "m-0001"}  # what a kept variant's handlers return
KEYS = 1000  # the tenants of its table
# Limits held by seats (session locks): a row lock counting crashes with `concurrency`, and an
# advisory table with `concurrency` and `key_concurrency = 2` over KEYS tenants; "before": the
# same without limits. The queue's limit is SEAT_LIMIT, more than the slots: it holds no job
# back, so the figure is what the seats cost.
SEATS = ("row_lock_seats", "advisory_seats")
SEAT_LIMIT = 100


def _waiting(shape: Any, every: int) -> list[str]:
    """`after`: every `every`-th job (by id) waits for the one before it, as insert_after()
    would have written it (0: none)."""
    if shape.after == "none" or not every:
        return []
    return [f"INSERT INTO {shape.name}_after (job_id, after_id, on_failure) SELECT id, id - 1, "
            f"'dead_letter' FROM {shape.name} WHERE id % {every} = 0",
            f"UPDATE {shape.name} SET parents = 1 WHERE id % {every} = 0"]


# -- the drain, in a process of its own (this checkout's inboxgen, or a release's) ------------

async def _returns(job: object) -> dict[str, Any]:
    return RETURNED


async def _noop(job: object) -> None:
    return None


def child(args: dict[str, Any]) -> None:
    """Drain the table with whichever inboxgen is on the path; print jobs/s and CPU as JSON."""
    import importlib.util
    import resource

    from inboxgen import Worker

    spec = importlib.util.spec_from_file_location("bench_shape", args["module"])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    async def drain() -> tuple[float, int]:
        handler = _returns if "result" in module.DESCRIPTOR.roles else _noop
        worker = Worker(module.DESCRIPTOR, handler, database=args["database"], workers=10,
                        batch=args["batch"], poll_interval=0.05, listen=False,
                        **({"group": args["group"]} if args["group"] else {}))
        # One connection of its own asks whether rows are left: a connection a poll would cost
        # the server a process start every 10 ms.
        unfinished = await _Unfinished.open(args["dialect"], args["database"], args["left"])
        started = time.perf_counter()
        await worker.start()
        try:
            while await unfinished.ask():
                await asyncio.sleep(0.01)
            seconds = time.perf_counter() - started
            remaining = await unfinished.ask(args["remaining"])
        finally:
            await worker.shutdown()
            await unfinished.close()
        return seconds, remaining

    seconds, remaining = asyncio.run(drain())
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"seconds": seconds, "remaining": remaining,
                      "cpu": usage.ru_utime + usage.ru_stime}))


class _Unfinished:
    """Whether the table still holds an unfinished row, asked on a connection of its own."""

    def __init__(self, dialect: str, conn: Any, sql: str) -> None:
        self.dialect, self.conn, self.sql = dialect, conn, sql

    @classmethod
    async def open(cls, dialect: str, database: str, sql: str) -> _Unfinished:
        if dialect == "postgres":
            import psycopg

            return cls(dialect, await psycopg.AsyncConnection.connect(database, autocommit=True),
                       sql)
        import pymysql

        return cls(dialect, await asyncio.to_thread(
            pymysql.connect, autocommit=True, **_mysql_args(database)), sql)

    async def ask(self, sql: str = "") -> int:
        """The first value `sql` (by default, whether rows are left) selects."""
        sql = sql or self.sql
        if self.dialect == "postgres":
            row = await (await self.conn.execute(sql)).fetchone()
        else:
            row = await asyncio.to_thread(self._mysql_ask, sql)
        return int(row[0]) if row and row[0] else 0

    def _mysql_ask(self, sql: str) -> Any:
        with self.conn.cursor() as cur:
            cur.execute(sql)
            return cur.fetchone()

    async def close(self) -> None:
        if self.dialect == "postgres":
            await self.conn.close()
        else:
            self.conn.close()


def _mysql_args(url: str) -> dict[str, Any]:
    """PyMySQL's arguments for a private server's `mysql://root@host:port/db` URL."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return {"host": parts.hostname, "port": parts.port, "user": parts.username or "root",
            "password": parts.password or "", "database": parts.path.lstrip("/")}


# -- the parent: servers, projects, tables and the table of figures ----------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--dialects", default="postgres,mysql")
    parser.add_argument("--shapes", default="")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--batches", default="1,16")
    parser.add_argument("--previous", default=PREVIOUS)
    parser.add_argument("--waits-every", type=int, default=WAITS_EVERY,
                        help="of a *_after variant's jobs, every Nth waits for the one before "
                             "it (0: none waits)")
    parser.add_argument("--same-shape", action="store_true",
                        help="a variant's \"before\" is release --previous on the same shape "
                             "(by default a variant with limits, pauses, results or `after` "
                             "compares with this checkout on the shape without them)")
    parser.add_argument("--child", default="")
    opts = parser.parse_args()
    if opts.child:
        child(json.loads(opts.child))
        return
    Sweep(opts).run()


class Sweep:
    def __init__(self, opts: argparse.Namespace) -> None:
        sys.path[:0] = [str(REPO / "tests")]
        from conformance.axes import PRODUCTION

        self.opts = opts
        self.root = Path(tempfile.mkdtemp(prefix="inboxgen-shapes-"))
        self.previous = self._release(opts.previous)
        self.shapes = [s for s in (opts.shapes.split(",") if opts.shapes else PRODUCTION)]
        self.variants = opts.variants.split(",")
        self.batches = [int(b) for b in opts.batches.split(",")]
        self.rates: dict[tuple[str, ...], float] = {}
        self.server_pid = 0  # the running server's main process: its CPU is counted

    def _release(self, rev: str) -> Path:
        """The `inboxgen` package of commit `rev`, extracted where nothing else imports from,
        with the module template beside it where that release keeps it in `templates/`."""
        out = self.root / f"release-{rev}"
        out.mkdir()
        listed = subprocess.run(["git", "-C", str(REPO), "ls-tree", "--name-only", rev],
                                capture_output=True, text=True, check=True).stdout.split()
        paths = ["inboxgen", *(["templates"] if "templates" in listed else [])]
        archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, *paths],
                                 capture_output=True, check=True).stdout
        with tempfile.TemporaryFile() as f:
            f.write(archive)
            f.seek(0)
            with tarfile.open(fileobj=f) as tar:
                tar.extractall(out, filter="data")
        return out

    def run(self) -> None:
        for dialect in self.opts.dialects.split(","):
            server, database = self._server(dialect)
            try:
                print(f"\n{dialect}: {self.opts.jobs} jobs a drain, 10 slots", flush=True)
                for name in self.shapes:
                    for variant in self.variants:
                        self._measure(dialect, name, variant, database)
            finally:
                server.stop()

    def _server(self, dialect: str) -> tuple[Any, Any]:
        if dialect == "postgres":
            from servers import PostgresServer

            pg = PostgresServer(durable=True)
            self.server_pid = int((pg.data_dir / "postmaster.pid").read_text().split()[0])
            return pg, pg.create_database
        from mariadb_server import MariaDBServer

        my = MariaDBServer("--skip-log-bin", "--innodb-flush-log-at-trx-commit=1")
        assert my._proc is not None
        self.server_pid = my._proc.pid
        return my, my.create_database

    def _shape(self, dialect: str, name: str, variant: str) -> Any:
        from conformance.axes import production

        form = ("lease" if variant in ("lease", "lease_kept", "lease_after", *TENANTS) else
                "advisory" if variant in ("advisory", "advisory_seats") else "row_lock")
        count = "false" if variant in ("row_lock", PAUSES, "row_lock_kept", "row_lock_after") \
            else "default"
        kept = variant in KEPT
        finished = production(name).finished
        return production(name, dialect=dialect, form=form, count_crashes=count,
                          error="text" if kept else "none",
                          result="json" if kept and finished == "kept" else "none",
                          pauses="table" if variant == PAUSES else "none",
                          after="root" if variant in WAITING else "none",
                          limits={KEY_LIMITS: "key", SKEWED: "key", FAIR: "fair",
                                  FAIR_SKEWED: "fair", WEIGHTED: "weighted",
                                  "row_lock_seats": "queue",
                                  "advisory_seats": "key"}.get(variant, "none"))

    def _build(self, shape: Any, release: Path | None) -> Path:
        """Build the shape's project with this checkout (`release` None) or a release; the
        generated module's path."""
        from conformance import shapes

        where = self.root / f"{shape.name}-{'now' if release is None else 'before'}"
        (where / "migrations").mkdir(parents=True, exist_ok=True)  # a shape of two variants
        migration = where / "migrations" / f"{shape.name}.sql"
        migration.write_text(shapes.ddl(shape))
        spec = shapes.spec(shape).replace(f"lease = {shapes.LEASE_SECONDS}", "lease = 30")
        if shape.form != "lease":  # seats: a queue limit that holds no job back
            spec = spec.replace("concurrency = 3", f"concurrency = {SEAT_LIMIT}").replace(
                "key_concurrency = 2", f"key_concurrency = 2\nconcurrency = {SEAT_LIMIT}")
        (where / f"{shape.name}.toml").write_text(spec)
        env = dict(os.environ)
        build = [sys.executable, "-m", "inboxgen", "build", "."]
        # The storage settings this checkout's build asks for, for both releases' tables.
        advice = subprocess.run(build, cwd=where, env=env, capture_output=True, text=True,
                                check=True).stderr
        migration.write_text(migration.read_text() + "".join(
            f"{line.split(': ')[-1]};\n" for line in advice.splitlines()
            if "default storage settings" in line))
        if release is not None:
            env["PYTHONPATH"] = str(release)
        subprocess.run(build, cwd=where, env=env, capture_output=True, text=True, check=True)
        return where / "generated" / f"{shape.name}.py"

    def _measure(self, dialect: str, name: str, variant: str, create: Any) -> None:
        from conformance import shapes

        shape = self._shape(dialect, name, variant)
        now_path = self._build(shape, None)
        if variant == "row_lock_counted" and "count_crashes=True" not in now_path.read_text():
            return  # the shape does not count (a FIFO table's claim is its group's head)
        if variant in WAITING and (shape.id != "integer" or shape.dead == "none"):
            return  # the waiting jobs are written by integer id; `after` needs dead letters
        if shape.form == "advisory" and shape.group == "fifo":
            return  # the advisory form has no FIFO groups
        # "before": this checkout on the shape without the variant's feature, unless
        # --same-shape asks for release --previous on the same shape.
        if variant in (PAUSES, *TENANTS, *KEPT, *WAITING, *SEATS) and not self.opts.same_shape:
            other = self._shape(dialect, name, "row_lock"
                                if variant in (PAUSES, KEPT[0], WAITING[0]) else
                                FAIR if variant == WEIGHTED else
                                "row_lock_counted" if variant == SEATS[0] else
                                "advisory" if variant == SEATS[1] else "lease")
            release_before = None
            before_path = self._build(other, None)
        else:
            other, release_before = shape, self.previous
            before_path = self._build(shape, self.previous)
        ddl = (now_path.parent.parent / "migrations" / f"{shape.name}.sql").read_text()
        ddl_before = (before_path.parent.parent / "migrations" / f"{other.name}.sql").read_text()
        group = shapes.GROUP if shape.group != "none" else None
        for turn, batch in enumerate(self.batches):
            figures = {}
            # Each batch size takes the releases in the other order: neither always runs first.
            runs = [("now", shape, ddl, now_path, None),
                    ("before", other, ddl_before, before_path, release_before)]
            for label, table, made, path, release in runs[::-1] if turn % 2 else runs:
                # (The variant's number first: two variants may share a shape.)
                v = self.variants.index(variant)
                database = create(f"v{v}_{batch}_{label}_{table.name}"[:60])
                self._fill(table, database, made, path, group,
                           variant in (SKEWED, FAIR_SKEWED) and table.limits != "none")
                figures[label] = self._drain(table, database, path, batch, group, release,
                                             variant == SKEWED)
            self.rates[(dialect, name, variant, str(batch))] = figures["now"][0]
            line = (f"{name:18} {variant:17} batch {batch:2}: now {figures['now'][0]:7.0f}, "
                    f"before {figures['before'][0]:7.0f} jobs/s "
                    f"({figures['now'][0] / figures['before'][0]:.2f}x)")
            # (A FIFO table's claims take each group's head in turn: no plain loop to compare.)
            if dialect == "postgres" and variant == "row_lock" and shape.group != "fifo":
                bare = {}
                pairs = [("now", now_path), ("before", before_path)]
                for label, path in pairs[::-1] if turn % 2 else pairs:
                    database = create(f"{shape.name}_{batch}_bare_{label}"[:60])
                    self._fill(shape, database, ddl, path, group, False)
                    bare[label] = asyncio.run(_bare_drain(database, path, batch, group,
                                                          self.opts.jobs, shape.id == "uuid"))
                line += (f"; bare now {bare['now']:7.0f}, before {bare['before']:7.0f} "
                         f"(runtime / bare {figures['now'][0] / bare['now']:.2f}x)")
            uncounted = self.rates.get((dialect, name, "row_lock", str(batch)))
            if variant == "row_lock_counted" and uncounted:
                line += f"; counted / uncounted {figures['now'][0] / uncounted:.2f}x"
            line += (f"; CPU per job: server {figures['now'][1]:.0f} us "
                     f"(before {figures['before'][1]:.0f}), worker {figures['now'][2]:.0f} us "
                     f"(before {figures['before'][2]:.0f})")
            print(line, flush=True)

    def _fill(self, shape: Any, database: str, ddl: str, path: Path, group: str | None,
              skewed: bool) -> None:
        """Create the tables and enqueue the jobs through the module's insert_many (`skewed`:
        the first half by id, tenant "big")."""
        sys.path[:0] = [str(path.parent)]
        try:
            module = _load(path)
        finally:
            del sys.path[0]
        from conformance import shapes

        new_id = (lambda n: shapes.new_id(shape, n)) if shape.id != "integer" else None
        rows = []
        for n in range(self.opts.jobs):
            values: dict[str, Any] = {"payload": {"key": str(n), "kind": "ack"}}
            if new_id is not None:
                values["id"] = new_id(n)
            if group is not None:
                values["grp"] = group
            rows.append(module.NewRow(**values))
        if shape.dialect == "postgres":
            import psycopg

            with psycopg.connect(database) as conn:
                conn.execute(ddl)
                for chunk in range(0, len(rows), 5000):
                    module.insert_many(conn, rows[chunk:chunk + 5000])
                conn.commit()
                if shape.limits in ("key", "fair", "weighted"):
                    conn.execute(f"UPDATE {shape.name} SET tenant = "
                                 f"(abs(hashtext(id::text)) % {KEYS})::text")
                if shape.limits == "weighted":
                    conn.execute(f"INSERT INTO {shape.name}_weights (queue, fair_key, weight) "
                                 f"SELECT '{shape.name}', n::text, 4 "
                                 f"FROM generate_series(0, {KEYS - 1}, {WEIGHTY}) AS n")
                if skewed:
                    conn.execute(f"UPDATE {shape.name} SET tenant = 'big' WHERE id IN "
                                 f"(SELECT id FROM {shape.name} ORDER BY id "
                                 f"LIMIT {self.opts.jobs // 2})")
                for sql in _waiting(shape, self.opts.waits_every):
                    conn.execute(sql)
                conn.commit()
            with psycopg.connect(database, autocommit=True) as conn:
                conn.execute(f"VACUUM ANALYZE {shape.name}")
        else:
            import pymysql

            conn = pymysql.connect(**_mysql_args(database))
            try:
                with conn.cursor() as cur:
                    for statement in filter(str.strip, ddl.split(";")):
                        cur.execute(statement)
                for chunk in range(0, len(rows), 5000):
                    module.insert_many(conn, rows[chunk:chunk + 5000])
                if shape.limits in ("key", "fair", "weighted"):
                    with conn.cursor() as cur:
                        cur.execute(f"UPDATE {shape.name} SET tenant = "
                                    f"CAST(CRC32(id) % {KEYS} AS CHAR)")
                if shape.limits == "weighted":
                    with conn.cursor() as cur:
                        cur.executemany(f"INSERT INTO {shape.name}_weights (queue, fair_key, "
                                        f"weight) VALUES (%s, %s, 4)",
                                        [(shape.name, str(n)) for n in range(0, KEYS, WEIGHTY)])
                if skewed:
                    with conn.cursor() as cur:
                        cur.execute(f"UPDATE {shape.name} SET tenant = 'big' ORDER BY id "
                                    f"LIMIT {self.opts.jobs // 2}")
                with conn.cursor() as cur:
                    for sql in _waiting(shape, self.opts.waits_every):
                        cur.execute(sql)
                conn.commit()
                with conn.cursor() as cur:
                    cur.execute(f"ANALYZE TABLE {shape.name}")
            finally:
                conn.close()

    def _drain(self, shape: Any, database: str, path: Path, batch: int, group: str | None,
               release: Path | None, skewed: bool = False) -> tuple[float, float, float]:
        """jobs/s of one drain in a process of its own, and the server's and the worker
        process's CPU per job (us). `skewed`: the drain of a table behind one tenant's backlog,
        which ends when the other tenants' jobs are done (the jobs done by then count)."""
        from drain import server_cpu

        unfinished = ["processed_at IS NULL"] if shape.finished == "kept" else []
        # Behind one tenant's backlog at its limit, the drain lasts until the other tenants'
        # jobs are done: the big tenant's rest would then run two at a time, as its limit says.
        others = ["tenant <> 'big'"] if shape.limits == "key" and skewed else []

        def where(conds: list[str]) -> str:
            return f" WHERE {' AND '.join(conds)}" if conds else ""

        left = f"SELECT EXISTS (SELECT 1 FROM {shape.name}{where(unfinished + others)})"
        remaining = f"SELECT COUNT(*) FROM {shape.name}{where(unfinished)}"
        env = dict(os.environ)
        if release is not None:
            env["PYTHONPATH"] = str(release)
        args = {"module": str(path), "database": database, "batch": batch, "group": group,
                "dialect": shape.dialect, "left": left, "remaining": remaining}
        name = "postgres" if shape.dialect == "postgres" else "mariadbd"
        cpu = server_cpu(name, self.server_pid)
        done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child",
                               json.dumps(args)], cwd=path.parent, env=env,
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{shape.name} batch {batch}: {done.stderr.strip()[-2000:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        done = self.opts.jobs - result["remaining"]
        return (done / result["seconds"], (server_cpu(name, self.server_pid) - cpu) / done * 1e6,
                result["cpu"] / done * 1e6)


def _load(path: Path) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"shape_{path.stem}_{path.parent.parent.name}",
                                                  path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def _bare_drain(database: str, path: Path, batch: int, group: str | None,
                      jobs: int, uuid_ids: bool) -> float:
    """jobs/s of the plainest pipelined row-lock loop over the module's statements: 10
    connections, each round the last batch's acks (one FINISH_MANY), COMMIT, BEGIN and the
    next claim in one round trip (`uuid_ids`: the table's ids are uuids)."""
    import psycopg

    from inboxgen.values import FROM_THE_HEAD, FROM_THE_HEAD_UUID

    module = _load(path)
    now = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)
    # A claim that takes a start (from_id) reads from the head here: the plainest loop.
    claim = {"now": now, "limit": batch, "group": group, "row_key": "",
             **(FROM_THE_HEAD_UUID if uuid_ids else FROM_THE_HEAD)}
    claim = {k: v for k, v in claim.items() if f"%({k})s" in module.CLAIM}
    finish = "FINISH_MANY" if hasattr(module, "FINISH_MANY") else "FINISH"

    async def loop() -> int:
        done: list[Any] = []
        ran = 0
        async with await psycopg.AsyncConnection.connect(database, autocommit=True) as conn:
            while True:
                async with conn.pipeline():
                    if done:
                        await conn.execute(getattr(module, finish),
                                           {"id": done, "now": now})
                        await conn.execute("COMMIT")
                    await conn.execute("BEGIN")
                    cur = await conn.execute(module.CLAIM, claim)
                rows = await cur.fetchall()
                done = [module._claimed(r).id for r in rows]
                ran += len(done)
                if not rows:
                    await conn.execute("COMMIT")
                    return ran

    started = time.perf_counter()
    ran = sum(await asyncio.gather(*(loop() for _ in range(10))))
    return ran / (time.perf_counter() - started)


if __name__ == "__main__":
    main()
