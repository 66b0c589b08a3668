"""A table claimed in id order, under a lease, a row lock (counted or not) or advisory locks, on
PostgreSQL, MariaDB and SQLite: a worker's claims (the advisory form's reads of candidates)
start after the last row claimed, so they do not read past the index entries its finished rows
left at the head, nor past rows due later at a more urgent priority; a row behind the start (a
retry) is still delivered, and nothing waits past a short claim."""

from __future__ import annotations

import asyncio
import datetime as dt
import random
import time
import uuid
from typing import Any

import pytest
from dbcases import MakeQueue, spec_toml

from inboxgen import Job, Outcome, Worker, ack, retry
from inboxgen.runtime.claimstart import ClaimStart

DDL = {
    "postgres": """
CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    name TEXT NOT NULL DEFAULT 'work',
    attempt INTEGER NOT NULL DEFAULT 1,
    locked_until TIMESTAMPTZ,
    payload JSONB NOT NULL
);
CREATE INDEX jobs_claim ON jobs (name, id);
""",
    "mysql": """
CREATE TABLE jobs (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    name VARCHAR(64) NOT NULL DEFAULT 'work',
    attempt INTEGER NOT NULL DEFAULT 1,
    locked_until DATETIME NULL,
    payload JSON NOT NULL,
    KEY jobs_claim (name, id)
);
""",
    "sqlite": """
CREATE TABLE jobs (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL DEFAULT 'work',
    attempt INTEGER NOT NULL DEFAULT 1,
    locked_until TEXT,
    payload TEXT NOT NULL
);
CREATE INDEX jobs_claim ON jobs (name, id);
""",
}
# The forms SQLite offers: no row locks.
SQLITE_FORMS = ("lease", "advisory")


def for_dialect(spec: str, dialect: str) -> str:
    """`spec` for `dialect`: SQLite keeps a JSON payload as text, encoded by the json codec."""
    if dialect != "sqlite":
        return spec
    return spec.replace('payload = "payload"', 'payload = { role = "payload", codec = "json" }')
# PostgreSQL's uuid ids sort as their numbers: a claim starts after the last one too.
UUID_DDL = DDL["postgres"].replace("id BIGSERIAL PRIMARY KEY", "id UUID PRIMARY KEY")
COLUMNS = {"id": "id generated", "name": "group", "attempt": "attempt generated",
           "payload": "payload"}
SPECS = {
    "lease": spec_toml("jobs", {**COLUMNS, "locked_until": "locked_until"},
                       runtime={"lease": 30}),
    "row_lock": spec_toml("jobs", COLUMNS, claim="row_lock"),
    "row_lock_counted": spec_toml("jobs", COLUMNS, claim="row_lock", count_crashes=True),
    "advisory": spec_toml("jobs", COLUMNS, claim="advisory", advisory_key="job-{id}"),
}
# The same, written as the row lock claims by one statement a batch in its own transaction
# (a transactional handler's), rather than pipelined with the batch's settlements.
TRANSACTIONAL = ("row_lock", "row_lock_counted")


def claim_params(q: Any) -> tuple[str, ...]:
    """The parameters of the statement that reads a claim's rows (the advisory form's
    CANDIDATES)."""
    params = q.mod.DESCRIPTOR.statement_params
    return tuple(params.get("CLAIM") or params["CANDIDATES"])


def _drain(q: Any, worker: Worker, starts: list[Any], within: float) -> float:
    """Run `worker` until the table is empty (at most `within` seconds), noting in `starts`
    the `from_id` each claim (or read of candidates) took (None: from the head); returns the
    seconds it took."""
    original = worker.calls.args

    def recording(op: str, values: dict[str, Any]) -> dict[str, Any]:
        if op in ("claim", "candidates"):
            starts.append(values.get("from_id"))
        return original(op, values)

    worker.calls.args = recording  # type: ignore[method-assign]

    async def drain() -> float:
        await worker.start()
        began = time.monotonic()
        try:
            while await asyncio.to_thread(q.ids) and time.monotonic() - began < within:
                await asyncio.sleep(0.02)
            return time.monotonic() - began
        finally:
            await worker.shutdown()

    return asyncio.run(drain())


@pytest.mark.parametrize(("dialect", "ids", "form", "transactional"), [
    (dialect, ids, form, transactional)
    for dialect, ids in (("postgres", "integer"), ("mysql", "integer"), ("postgres", "uuid"),
                         ("sqlite", "integer"))
    for form, transactional in (*((form, False) for form in SPECS),
                                *((form, True) for form in TRANSACTIONAL))
    if dialect != "sqlite" or form in SQLITE_FORMS])
def test_claims_start_after_the_last_and_a_retry_behind_it_still_runs(
        dialect: str, ids: str, form: str, transactional: bool, queue: MakeQueue) -> None:
    uuids = ids == "uuid"
    # A uuid id is the caller's, given at insert.
    spec = (SPECS[form].replace('id = { role = "id", generated = true }', 'id = "id"')
            if uuids else SPECS[form])
    q = queue(dialect, spec=for_dialect(spec, dialect), ddl=UUID_DDL if uuids else DDL[dialect])
    assert "from_id" in claim_params(q)
    total = 400
    with q.db.transaction() as conn:
        q.mod.insert_many(conn, [q.mod.NewRow(name="work", payload={"n": i},
                                              **({"id": uuid.uuid4()} if uuids else {}))
                                 for i in range(total)])
    runs: dict[int, int] = {}
    starts: list[Any] = []
    retried: list[float] = []  # when job 3 asked for a retry, and when it ran again

    def handler(job: Job[Any], *conn: Any) -> Outcome:
        n = job.payload["n"]
        runs[n] = runs.get(n, 0) + 1
        time.sleep(0.002)
        if n == 3:
            retried.append(time.monotonic())
            if runs[n] == 1:
                return retry()  # back in the queue, behind where the claims now start
        return ack()

    poll = 30
    worker = Worker(q.mod.DESCRIPTOR, handler, database=q.db.database, group="work", workers=2,
                    batch=2, listen=False, poll_interval=poll, transactional=transactional)
    _drain(q, worker, starts, within=2 * poll)
    assert q.ids() == []
    assert runs == {n: 2 if n == 3 else 1 for n in range(total)}
    # Most claims started after the last claimed row rather than at the head.
    assert sum(s is not None for s in starts) > len(starts) // 2
    assert all(isinstance(s, uuid.UUID if uuids else int) for s in starts if s is not None)
    # The retried row ran again at a claim from the head, long before the poll would come.
    first, again = retried
    assert again - first < poll / 3, again - first


# The table a new user writes: claimed in (priority, due time, id) order.
ORDERED_DDL = {
    "postgres": """
CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    name TEXT NOT NULL DEFAULT 'work',
    priority INTEGER NOT NULL DEFAULT 0,
    retry_after TIMESTAMPTZ NOT NULL DEFAULT now(),
    attempt INTEGER NOT NULL DEFAULT 1,
    locked_until TIMESTAMPTZ,
    payload JSONB NOT NULL
);
CREATE INDEX jobs_claim ON jobs (name, priority, retry_after, id);
""",
    "mysql": """
CREATE TABLE jobs (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    name VARCHAR(64) NOT NULL DEFAULT 'work',
    priority INTEGER NOT NULL DEFAULT 0,
    retry_after DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    attempt INTEGER NOT NULL DEFAULT 1,
    locked_until DATETIME NULL,
    payload JSON NOT NULL,
    KEY jobs_claim (name, priority, retry_after, id)
);
""",
    # Due times as SQLite's strftime writes them (milliseconds), where the worker writes
    # microseconds: a start must not pass over the rows of its own millisecond either.
    "sqlite": """
CREATE TABLE jobs (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL DEFAULT 'work',
    priority INTEGER NOT NULL DEFAULT 0,
    retry_after TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    attempt INTEGER NOT NULL DEFAULT 1,
    locked_until TEXT,
    payload TEXT NOT NULL
);
CREATE INDEX jobs_claim ON jobs (name, priority, retry_after, id);
""",
}
ORDERED = {"priority": "priority", "retry_after": "retry_after"}
ORDERED_SPECS = {
    "lease": spec_toml("jobs", {**COLUMNS, **ORDERED, "locked_until": "locked_until"},
                       runtime={"lease": 30}),
    "row_lock": spec_toml("jobs", {**COLUMNS, **ORDERED}, claim="row_lock"),
    "row_lock_counted": spec_toml("jobs", {**COLUMNS, **ORDERED}, claim="row_lock",
                                  count_crashes=True),
    "advisory": spec_toml("jobs", {**COLUMNS, **ORDERED}, claim="advisory",
                          advisory_key="job-{id}"),
}


@pytest.mark.parametrize(("dialect", "form"), [
    (dialect, form) for dialect in ("postgres", "mysql", "sqlite") for form in ORDERED_SPECS
    if dialect != "sqlite" or form in SQLITE_FORMS])
def test_claims_of_a_table_in_priority_and_due_order_start_after_the_last_and_an_urgent_job_runs(
        dialect: str, form: str, queue: MakeQueue) -> None:
    """In (priority, due time, id) order a claim starts after the last row claimed too; a job
    enqueued mid-drain at a more urgent priority sits ahead of that start, and still runs
    within the once-a-second claim from the head (not the 5 s poll), ahead of the backlog's
    rest."""
    q = queue(dialect, spec=for_dialect(ORDERED_SPECS[form], dialect), ddl=ORDERED_DDL[dialect])
    assert {"from_priority", "from_retry_after", "from_id"} <= set(claim_params(q))
    total = 1200
    with q.db.transaction() as conn:
        q.mod.insert_many(conn, [q.mod.NewRow(name="work", payload={"n": i})
                                 for i in range(total)])
    order: list[int] = []
    starts: list[Any] = []

    def handler(job: Job[Any], *conn: Any) -> Outcome:
        n = job.payload["n"]
        order.append(n)
        time.sleep(0.004)  # 1,200 jobs on 2 slots: a drain of 2.4 s at least
        if n == 100:
            with q.db.transaction() as c:
                q.mod.insert(c, q.mod.NewRow(name="work", priority=-1, payload={"n": -1}))
        return ack()

    worker = Worker(q.mod.DESCRIPTOR, handler, database=q.db.database, group="work", workers=2,
                    batch=2, listen=False, poll_interval=5)
    _drain(q, worker, starts, within=60)
    assert q.ids() == []
    assert sorted(order) == list(range(-1, total))
    # Most claims started after the last claimed row rather than at the head.
    assert sum(s is not None for s in starts) > len(starts) // 2
    # The urgent job ran well before the backlog was done: at the next claim from the head,
    # within a second of its insert (the claims from the start pass over it until then).
    urgent = order.index(-1)
    assert order.index(100) < urgent < 0.8 * len(order), (urgent, len(order))


def test_postgresql_sorts_uuids_as_their_numbers_so_one_past_is_the_next_id(pg_dsn: str) -> None:
    """A claim from a start binds the last uuid plus one (one_past) and reads `id >= from_id`:
    right only if PostgreSQL orders uuids as their 128-bit numbers, edges included."""
    import psycopg

    from inboxgen.runtime.claimstart import one_past

    rng = random.Random(7)
    ids = [uuid.UUID(int=rng.getrandbits(128)) for _ in range(500)]
    ids += [uuid.UUID(int=0), uuid.UUID(int=2**128 - 1), uuid.UUID(int=2**64 - 1),
            uuid.UUID(int=2**64)]
    with psycopg.connect(pg_dsn) as conn:
        rows = conn.execute("SELECT id FROM unnest(%s::uuid[]) AS t(id) ORDER BY id",
                            [ids]).fetchall()
        assert [r[0] for r in rows] == sorted(ids, key=lambda u: u.int)
        for u in ids[:50] + [uuid.UUID(int=2**64 - 1)]:
            (after,) = conn.execute("SELECT %s::uuid > %s::uuid", [one_past(u), u]).fetchone()
            assert after


def test_claims_from_the_head_come_no_more_often_than_their_extra_cost_allows(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Behind a snapshot held open a claim from the head reads every entry the drain left
    there, so its cost grows with the drain: the periodic claim from the head comes once a
    second while it costs little, and no more often than keeps its extra cost within
    HEAD_SHARE of the time between two once it costs more. A short claim from a start still
    goes back to the head at once."""
    from types import SimpleNamespace

    from generated_examples import mailer
    from inboxgen.runtime import claimstart

    clock = [1000.0]
    monkeypatch.setattr(claimstart.time, "monotonic", lambda: clock[0])
    start = claimstart.ClaimStart(mailer.DESCRIPTOR)
    rows = [SimpleNamespace(job_id=i) for i in range(10)]

    def claim(seconds: float, head_seconds: float | None = None,
              limit: int = 10) -> claimstart.Start:
        at = start.at()
        took = head_seconds if at is None and head_seconds is not None else seconds
        clock[0] += took
        start.took(at, rows, limit, took)
        return at

    def seconds_between_claims_from_the_head(claim_seconds: float,
                                             head_seconds: float) -> float:
        heads = []
        for _ in range(20_000):
            if claim(claim_seconds, head_seconds) is None:
                heads.append(clock[0])
            if len(heads) == 4:
                break
        return (heads[-1] - heads[1]) / 2

    assert claim(0.002) is None  # the first claim reads from the head
    assert claim(0.002) is not None
    # Claims from the head that cost what the others do: once a second.
    assert seconds_between_claims_from_the_head(0.002, 0.002) == pytest.approx(1.0, abs=0.01)
    # A claim from the head 0.5 s dearer than one from a start: its extra cost takes about
    # HEAD_SHARE of the time, no more.
    share = 0.5 / seconds_between_claims_from_the_head(0.002, 0.502)
    assert 0.9 * claimstart.HEAD_SHARE <= share <= claimstart.HEAD_SHARE
    # Cheap again (the snapshot ended, vacuum ran): once a second again.
    assert seconds_between_claims_from_the_head(0.002, 0.002) == pytest.approx(1.0, abs=0.01)
    # However dear the head, a short claim from a start goes back there at once.
    seconds_between_claims_from_the_head(0.002, 0.502)
    assert start.key is not None
    claim(0.002, limit=11)  # short (from a start)
    assert start.at() is None


def test_a_sqlite_claim_from_a_start_takes_the_rows_of_its_own_millisecond(
        queue: MakeQueue) -> None:
    """SQLite keeps due times as text: the DDL's default writes milliseconds where the worker
    writes microseconds. A claim that starts after a row still takes the rows due in the same
    millisecond after it, not only those of later ones (which a start written in microseconds
    would sort after them)."""
    q = queue("sqlite", spec=for_dialect(ORDERED_SPECS["lease"], "sqlite"),
              ddl=ORDERED_DDL["sqlite"])
    with q.db.transaction() as conn:
        # One statement: SQLite's 'now' is one instant for all its rows.
        conn.execute("INSERT INTO jobs (payload) VALUES ('{}'), ('{}'), ('{}'), ('{}')")
    (due,) = {r[0] for r in q.db.rows("SELECT retry_after FROM jobs")}
    assert len(due.rpartition(".")[2]) == 3, due  # milliseconds
    start = ClaimStart(q.mod.DESCRIPTOR)
    now = dt.datetime.now(dt.UTC)
    lease = now + dt.timedelta(seconds=30)
    taken = []
    for limit in (1, 2, 1):
        at = start.at()
        with q.db.transaction() as conn:
            rows = q.mod.claim(conn, group="work", now=now, locked_until=lease, limit=limit,
                               **(at or {}))
        start.took(at, rows, limit, 0.001)
        taken.append([r.id for r in rows])
    assert taken == [[1], [2, 3], [4]]
