"""Claim order and filters: priority, then due time, then id; rows not yet due, leased, settled or
of another group stay; the claim's plan uses the index."""

from __future__ import annotations

import asyncio
import datetime as dt
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from dbcases import (
    CLAIM_FORMS,
    DIALECTS,
    FROM_THE_HEAD,
    LEASE,
    T0,
    Layout,
    MakeQueue,
    Queue,
    at,
    call,
    commit_claim,
    finish,
    mariadb_pages,
    pg_index_blocks_read,
    spec_toml,
)
from genutil import build_module, ddl_of

ORDER_ROWS = [  # payload, priority, due (seconds from T0); inserted in this order
    ("p1-due-10", 1, -10),
    ("p0-due-5-first", 0, -5),
    ("p0-due-20", 0, -20),
    ("p1-due-20", 1, -20),
    ("p0-due-5-second", 0, -5),
]
CLAIM_ORDER = ["p0-due-20", "p0-due-5-first", "p0-due-5-second", "p1-due-20", "p1-due-10"]


def add_order_rows(q: Queue, conn: Any) -> None:
    for payload, priority, due in ORDER_ROWS:
        q.add(conn, payload=payload, priority=priority, retry_after=at(due))


@pytest.mark.parametrize(("dialect", "form"), CLAIM_FORMS)
def test_claims_one_at_a_time_follow_priority_then_retry_after_then_id(
        queue: MakeQueue, dialect: str, form: str) -> None:
    q = queue(dialect, Layout(form=form))
    conn = q.connect()
    add_order_rows(q, conn)
    order = []
    while rows := q.claim(conn, limit=1):
        order.append(rows[0].payload)
        commit_claim(q, conn)
        finish(q, conn, rows[0])
    assert order == CLAIM_ORDER


@pytest.mark.parametrize(("dialect", "form"), CLAIM_FORMS)
def test_batch_claim_takes_the_first_rows_in_claim_order(
        queue: MakeQueue, dialect: str, form: str) -> None:
    q = queue(dialect, Layout(form=form))
    conn = q.connect()
    add_order_rows(q, conn)
    rows = q.claim(conn, limit=3)
    assert [r.payload for r in rows] == CLAIM_ORDER[:3]


@pytest.mark.parametrize(("dialect", "form"), CLAIM_FORMS)
def test_claim_skips_rows_not_yet_due_until_their_time(
        queue: MakeQueue, dialect: str, form: str) -> None:
    q = queue(dialect, Layout(form=form))
    conn = q.connect()
    later = q.add(conn, retry_after=at(60), priority=0)
    due = q.add(conn, retry_after=at(-1), priority=5)
    rows = q.claim(conn, now=T0, limit=10)
    assert [q.id_of(r) for r in rows] == [due]
    commit_claim(q, conn)
    finish(q, conn, rows[0])
    assert q.claim(conn, now=at(59), limit=10) == []
    conn.rollback()
    assert [q.id_of(r) for r in q.claim(conn, now=at(60), limit=10)] == [later]


@pytest.mark.parametrize(("dialect", "form"), CLAIM_FORMS)
def test_claim_skips_processed_rows_which_are_kept(
        queue: MakeQueue, dialect: str, form: str) -> None:
    q = queue(dialect, Layout(form=form, processed=True))
    conn = q.connect()
    first = q.add(conn)
    second = q.add(conn)
    row = q.claim_one(conn)
    commit_claim(q, conn)
    assert q.settle("finish", conn, row, now=at(5))
    conn.commit()
    q.release(conn, row)

    assert [q.id_of(r) for r in q.claim(conn, now=at(10), limit=10)] == [second]
    kept = q.row(first)
    assert kept is not None and kept["processed_at"] == at(5)


@pytest.mark.parametrize(("dialect", "form"), CLAIM_FORMS)
def test_finish_deletes_the_row_when_there_is_no_processed_at(
        queue: MakeQueue, dialect: str, form: str) -> None:
    q = queue(dialect, Layout(form=form, processed=False))
    conn = q.connect()
    first = q.add(conn)
    second = q.add(conn)
    row = q.claim_one(conn)
    assert q.id_of(row) == first
    commit_claim(q, conn)
    finish(q, conn, row)
    assert q.ids() == [second]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_lease_claim_skips_a_live_lease_and_takes_an_expired_one(
        queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout(form="lease"))
    conn = q.connect()
    job = q.add(conn)
    q.claim_one(conn, now=T0, until=at(30))
    conn.commit()
    assert q.claim(conn, now=at(29), limit=10) == []
    conn.commit()
    again = q.claim_one(conn, now=at(30), until=at(60))
    assert (q.id_of(again), again.attempt, again.locked_until) == (job, 2, at(60))


def test_reports_example_returns_the_row_whose_lease_ran_out_not_the_live_one(
        queue: MakeQueue) -> None:
    q = queue("sqlite", "reports")
    m = q.mod
    conn = q.connect()
    m.insert_many(conn, [m.NewRow(payload=b"stale"), m.NewRow(payload=b"live")])
    conn.commit()
    (stale,) = m.claim(conn, now=T0, locked_until=at(60))
    (live,) = m.claim(conn, now=at(50), locked_until=at(110))
    conn.commit()
    back = m.claim(conn, now=at(60), locked_until=at(120), limit=10)
    assert [r.payload for r in back] == [b"stale"]
    assert back[0].id == stale.id != live.id


def plan_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The nodes of an EXPLAIN (FORMAT JSON) plan, leaving out InitPlans (run once, before)."""
    yield plan
    for child in plan.get("Plans", ()):
        if child.get("Parent Relationship") != "InitPlan":
            yield from plan_nodes(child)


@pytest.mark.parametrize("layout", [
    pytest.param(Layout(form="lease"), id="lease"),
    pytest.param(Layout(form="row_lock", count_crashes=True), id="row_lock-count_crashes"),
])
def test_postgres_claim_of_many_rows_finds_them_by_index_not_by_reading_the_whole_table(
        queue: MakeQueue, layout: Layout) -> None:
    """A lease worker claims for all of its slots in one statement. As `id IN (subquery)` the
    planner made that a hash join over a scan of the whole table once the LIMIT was large
    against the table (7 ms for 160 rows of 40,000 here); the picked ids as an array are each
    found by index, however many."""
    q = queue("postgres", layout)
    conn = q.connect()
    q.mod.insert_many(conn, [q.new() for _ in range(5000)])
    conn.execute(f"ANALYZE {q.table_sql()}")
    conn.commit()
    args = {"now": T0, "limit": 500, "locked_until": T0 + dt.timedelta(seconds=LEASE),
            **FROM_THE_HEAD}
    cur = conn.execute("EXPLAIN (FORMAT JSON) " + q.mod.CLAIM,
                       {k: args.get(k) for k in q.mod.DESCRIPTOR.statement_params["CLAIM"]})
    ((explained,),) = cur.fetchall()
    scans = [n for n in plan_nodes(explained[0]["Plan"]) if n["Node Type"] == "Seq Scan"]
    assert scans == []
    assert len(q.claim(conn, limit=500)) == 500


SCHEDULED_AHEAD = 50_000
BY_PRIORITY_LAYOUTS = [
    pytest.param(Layout(form="row_lock"), id="row_lock"),
    pytest.param(Layout(form="row_lock", count_crashes=True), id="row_lock-count_crashes"),
    pytest.param(Layout(form="lease"), id="lease"),
    pytest.param(Layout(form="advisory"), id="advisory"),
    # The production shapes: a group, finished rows deleted, dead letters to a table or a group.
    pytest.param(Layout(form="row_lock", group=True, processed=False, dead="table"),
                 id="row_lock-group-dead_table"),
    pytest.param(Layout(form="row_lock", count_crashes=True, group=True, dead="group"),
                 id="row_lock-count_crashes-group-dead_group"),
    # [flow] limits: a lease's limited claim, and tables whose jobs hold seats.
    pytest.param(Layout(form="lease", group=True, concurrency=50, key_concurrency=2),
                 id="lease-limits"),
    pytest.param(Layout(form="row_lock", count_crashes=True, concurrency=50),
                 id="row_lock-count_crashes-seats"),
    pytest.param(Layout(form="advisory", concurrency=50, key_concurrency=2),
                 id="advisory-seats"),
    # A partitioned table: its claims by priority keep to the list due_priorities() reads.
    pytest.param(Layout(form="row_lock", partitions=4), id="row_lock-partitioned"),
    pytest.param(Layout(form="row_lock", count_crashes=True, group=True, dead="group",
                        partitions=4), id="row_lock-count_crashes-group-partitioned"),
    pytest.param(Layout(form="lease", partitions=4), id="lease-partitioned"),
    pytest.param(Layout(form="advisory", partitions=4), id="advisory-partitioned"),
    pytest.param(Layout(form="lease", group=True, concurrency=50, key_concurrency=2,
                        partitions=4), id="lease-limits-partitioned"),
]


def schedule_ahead(q: Queue, conn: Any, scheduled: int) -> list[Any]:
    """`scheduled` rows due tomorrow at priority 0, then three due rows at priority 1 (their
    ids returned): in claim order every scheduled row sorts before the due ones."""
    later = T0 + dt.timedelta(days=1)
    q.mod.insert_many(conn, [q.new(payload="later", priority=0, retry_after=later)
                             for _ in range(scheduled)])
    conn.commit()
    due = [q.add(conn, payload=f"due-{i}", priority=1, retry_after=at(-10)) for i in range(3)]
    conn.execute(f"ANALYZE {q.table_sql()}")
    # No autovacuum: its pass over the indexes would count with the claims' reads. (A
    # partitioned table takes the setting on its partitions.)
    parts = [r[0] for r in conn.execute("SELECT inhrelid::regclass::text FROM pg_inherits "
                                        "WHERE inhparent = %s::regclass", (q.table_sql(),))]
    for table in parts or [q.table_sql()]:
        conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
    conn.commit()
    return due


def claim_buffers(q: Queue, conn: Any, statement: str) -> int:
    """The buffers claim statement `statement` reads for 2 rows (EXPLAIN, rolled back)."""
    args = {"now": T0, "limit": 2, "group": "g", "row_key": "inboxgen:jobs:",
            "locked_until": T0 + dt.timedelta(seconds=LEASE), **FROM_THE_HEAD,
            # A limited claim's: the limits, as its claim() binds them.
            "queue": q.mod.TABLE, "concurrency": getattr(q.mod, "CONCURRENCY", None),
            "key_concurrency": getattr(q.mod, "KEY_CONCURRENCY", None),
            "priorities": [1]}  # a claim kept to a list: the priority with due rows
    cur = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + q.mod.STATEMENTS[statement],
                       {k: args[k] for k in q.mod.DESCRIPTOR.statement_params[statement]})
    ((explained,),) = cur.fetchall()
    conn.rollback()
    top = explained[0]["Plan"]
    return int(top["Shared Hit Blocks"] + top["Shared Read Blocks"])


@pytest.mark.parametrize("layout", BY_PRIORITY_LAYOUTS)
def test_postgres_claim_by_priority_reads_no_scheduled_rows_of_a_more_urgent_priority(
        queue: MakeQueue, layout: Layout) -> None:
    """Rows due tomorrow at priority 0 sort before today's due rows at priority 1: the plain
    claim's one scan in claim order reads every one of them before it finds a due row
    (thousands of buffers at this size, growing with them). Its twin reads priority by
    priority (on a partitioned table, the priorities due_priorities() lists): a handful, and
    the same rows."""
    q = queue("postgres", layout)
    conn = q.connect()
    due = schedule_ahead(q, conn, SCHEDULED_AHEAD)
    name = "CANDIDATES" if layout.form == "advisory" else "CLAIM"
    assert claim_buffers(q, conn, name) > 100  # what the twin is for
    walked = claim_buffers(q, conn, f"{name}_BY_PRIORITY")
    assert walked < 100, f"{walked} buffers for a claim of 2 rows"
    assert sorted(q.id_of(r) for r in q.claim(conn, limit=2, by_priority=True)) == due[:2]


def test_postgres_scheduled_counts_the_rows_due_later_up_to_its_limit(
        queue: MakeQueue) -> None:
    """SCHEDULED counts unfinished rows due later, of every priority, of the worker's group
    only, and stops at `limit`."""
    q = queue("postgres", Layout(form="lease", group=True))
    conn = q.connect()
    later = T0 + dt.timedelta(hours=1)
    for priority in (0, 3, 7):
        for _ in range(4):
            q.add(conn, payload="later", priority=priority, retry_after=later)
    q.add(conn, payload="due", priority=0, retry_after=at(-10))
    q.add(conn, payload="other group", priority=0, retry_after=later, **{q.group_attr: "h"})
    assert q.mod.scheduled(conn, group="g", now=T0, limit=100) == 12
    assert q.mod.scheduled(conn, group="g", now=T0, limit=5) == 5
    assert q.mod.scheduled(conn, group="g", now=later, limit=100) == 0  # all due by then


@pytest.mark.parametrize("layout", BY_PRIORITY_LAYOUTS)
def test_postgres_worker_claims_by_priority_behind_many_rows_due_later(
        queue: MakeQueue, layout: Layout, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker on a table holding more rows due later than WALK_FROM claims by priority: all
    its claims and counts read fewer index blocks than one plain claim reads past them (as
    the server counts the blocks), and it runs the due rows. A row lock's claim by priority
    runs its generic plan: GENERIC_PLANS goes before it, in its transaction, and with a
    lease's claim and an advisory read, each sent with its setting in one round trip. On a
    partitioned table every claim carries the list of priorities it keeps to."""
    from inboxgen import Worker
    from inboxgen.runtime.backends.base import GENERIC_PLANS, Backend
    from inboxgen.runtime.backends.postgres import PostgresBackend
    from inboxgen.runtime.priorities import WALK_FROM
    from inboxgen.testing import FakeClock

    sent: list[list[Any]] = []  # the steps of every `together` the worker's forms send
    together = Backend.together

    async def recorded(self: Backend, conn: Any, steps: list[Any]) -> list[Any]:
        sent.append(list(steps))
        return await together(self, conn, steps)

    monkeypatch.setattr(Backend, "together", recorded)
    planned_once = PostgresBackend.planned_once

    async def recorded_planned_once(self: PostgresBackend, conn: Any, step: Any) -> Any:
        sent.append([GENERIC_PLANS, step])  # the setting goes with the call (one round trip)
        return await planned_once(self, conn, step)

    monkeypatch.setattr(PostgresBackend, "planned_once", recorded_planned_once)

    q = queue("postgres", layout)
    conn = q.connect()
    due = schedule_ahead(q, conn, SCHEDULED_AHEAD)
    assert SCHEDULED_AHEAD > 4 * WALK_FROM
    name = "CANDIDATES" if layout.form == "advisory" else "CLAIM"
    one_plain_claim = claim_buffers(q, conn, name)
    conn.close()  # and with it, its counts reported
    ran: list[Any] = []

    async def handler(job: Any) -> None:
        ran.append(job.id)

    def index_blocks_read() -> int:
        return pg_index_blocks_read(q.target, q.table_sql())

    before = index_blocks_read()
    worker = Worker(q.mod.DESCRIPTOR, handler, database=q.database, workers=2,
                    batch=2, poll_interval=3600, listen=False, clock=FakeClock(T0),
                    group="g" if layout.group else None)

    async def run_the_due_rows() -> None:
        await worker.start()
        try:
            for _ in range(600):
                if len(ran) == len(due):
                    break
                await asyncio.sleep(0.05)
        finally:
            await worker.shutdown()

    asyncio.run(run_the_due_rows())
    assert sorted(ran) == sorted(due)
    read = index_blocks_read() - before  # the worker's sessions reported theirs as they closed
    assert read < one_plain_claim, f"{read} index blocks read to claim 3 rows"
    claims = 0
    listed: list[int] = []
    for steps in sent:
        for n, step in enumerate(steps):
            if isinstance(step, tuple) and step[0] in ("claim", "candidates"):
                assert step[1].get("by_priority"), steps  # the worker chose the walk
                assert GENERIC_PLANS in steps[:n], steps
                # The priorities with due rows: 1, or none once the due rows are taken.
                assert ("priorities" in step[1]) == (layout.partitions > 0), step[1]
                assert set(step[1].get("priorities") or ()) <= {1}, step[1]
                listed += list(step[1].get("priorities") or ())
                claims += 1
    assert claims > 0, sent
    assert bool(listed) == (layout.partitions > 0)


KEPT = 20_000


@pytest.mark.parametrize("form", ["row_lock", "lease"])
def test_postgres_claim_reads_the_claim_index_however_stale_the_statistics(
        tmp_path: Path, pg_dsn: str, form: str) -> None:
    """A grouped table claimed in id order, analysed while its rows were unfinished (a burst
    about to be drained), then drained but for the last rows. By those statistics the primary
    key finds an unfinished row at once, so a claim ordered by id alone read it and every
    finished row before the first claimable one (the drain ran at a fifth of a deleting
    table's). Ordered by (group, id), only the claim index gives the order."""
    lease = {"locked_until": "locked_until"} if form == "lease" else {}
    mod = build_module(tmp_path, spec_toml(
        "kept_jobs", {"id": "id generated", "queue": "group", "processed_at": "processed_at",
                      **lease, "payload": "payload text"}, claim=form), f"""
        CREATE TABLE kept_jobs (
            id BIGSERIAL PRIMARY KEY,
            queue TEXT NOT NULL,
            processed_at TIMESTAMPTZ,
            {"locked_until TIMESTAMPTZ," if lease else ""}
            payload TEXT NOT NULL
        ) WITH (fillfactor = 70);
        CREATE INDEX kept_jobs_claim ON kept_jobs (queue, id) WHERE processed_at IS NULL;
    """)
    with psycopg.connect(pg_dsn) as conn:
        conn.execute(ddl_of(tmp_path))
        mod.insert_many(conn, [mod.NewRow(queue="q", payload="x") for _ in range(KEPT)])
        conn.commit()
        conn.autocommit = True
        conn.execute("VACUUM ANALYZE kept_jobs")
        conn.autocommit = False
        conn.execute("UPDATE kept_jobs SET processed_at = now() WHERE id <= %s", (KEPT - 5,))
        conn.commit()
        args = {"group": "q", "limit": 1, "now": T0, "from_id": -(2**63),
                "locked_until": T0 + dt.timedelta(seconds=LEASE)}
        params = {k: args[k] for k in mod.DESCRIPTOR.statement_params["CLAIM"]}
        # As in a drain, earlier claims have read past the finished rows' old versions and
        # marked them dead in the index they read; the statistics still say unfinished.
        conn.execute(mod.CLAIM, params)
        conn.rollback()
        # The plan a long-running worker gets: psycopg prepares a statement it runs often, and
        # the server settles on a generic plan, planned without the group's value.
        names = list(params)
        conn.execute("SET plan_cache_mode = force_generic_plan")
        types = {"group": "text", "limit": "bigint", "now": "timestamptz",
                 "locked_until": "timestamptz", "from_id": "bigint"}
        conn.execute(f"PREPARE claim({', '.join(types[n] for n in names)}) AS " + re.sub(
            r"%\((\w+)\)s", lambda m: f"${names.index(m.group(1)) + 1}", mod.CLAIM))
        cur = psycopg.ClientCursor(conn).execute(  # EXECUTE's arguments as literals
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE claim("
            + ", ".join(f"(%s)::{types[n]}" for n in names) + ")", list(params.values()))
        ((explained,),) = cur.fetchall()
        conn.rollback()
        top = explained[0]["Plan"]
        buffers = top["Shared Hit Blocks"] + top["Shared Read Blocks"]
        # the claim index's leaf pages, which still hold the finished rows' (dead) entries
        assert buffers < 500, f"{buffers} buffers for a claim of 1 row"
        claimed = mod.claim(conn, group="q", limit=1, **(
            {"now": T0, "locked_until": T0 + dt.timedelta(seconds=LEASE)} if lease else {}))
        assert [r.id for r in claimed] == [KEPT - 4]


# -- MySQL/MariaDB: claims kept to the priorities that have due rows -------------------------------

MYSQL_AHEAD = 20_000
MYSQL_BY_PRIORITY_LAYOUTS = [
    pytest.param(Layout(form="row_lock"), id="row_lock"),
    pytest.param(Layout(form="row_lock", count_crashes=True), id="row_lock-count_crashes"),
    pytest.param(Layout(form="lease"), id="lease"),
    pytest.param(Layout(form="advisory"), id="advisory"),
    pytest.param(Layout(form="row_lock", group=True, processed=False, dead="table"),
                 id="row_lock-group-dead_table"),
    pytest.param(Layout(form="lease", group=True, dead="group"), id="lease-group-dead_group"),
]


def schedule_around(q: Queue, conn: Any, scheduled: int, now: dt.datetime = T0
                          ) -> list[Any]:
    """`scheduled` rows due a day after `now` at priority 0 and as many at priority 2, and three
    due rows at priority 1 between them (their ids returned): the plain claim reads every row
    of priority 0 before a due row, and where it comes back short, every row of priority 2."""
    later = now + dt.timedelta(days=1)
    for priority in (0, 2):
        q.mod.insert_many(conn, [q.new(payload="later", priority=priority, retry_after=later)
                                 for _ in range(scheduled)])
    due = [q.add(conn, payload=f"due-{i}", priority=1,
                 retry_after=now - dt.timedelta(seconds=10)) for i in range(3)]
    conn.commit()
    return due


def mysql_rows_locked(conn: Any) -> int:
    """The row locks the session's open transaction holds (InnoDB's count, including those of
    rows a condition turned away). INNODB_TRX is a snapshot refreshed at most every 0.1 s."""
    time.sleep(0.2)
    with conn.cursor() as cur:
        cur.execute("SELECT trx_rows_locked FROM information_schema.INNODB_TRX "
                    "WHERE trx_mysql_thread_id = CONNECTION_ID()")
        row = cur.fetchone()
    return 0 if row is None else int(row[0])


@pytest.mark.parametrize("layout", MYSQL_BY_PRIORITY_LAYOUTS)
def test_mysql_claim_by_priority_reads_and_locks_no_row_due_later(
        queue: MakeQueue, layout: Layout) -> None:
    """MariaDB has no LATERAL: the claim by priority is the plain claim kept to the priorities
    that have due rows (due_priorities(), a probe per priority), one index range each, bounded
    by the due time. The plain claim's locking read locks every row due later that it reads
    (more urgent ones before the due rows, and less urgent ones after them when it comes back
    short), and keeps them locked to the end of its transaction; the twin locks a handful,
    and takes the same rows."""
    q = queue("mysql", layout)
    conn = q.connect()
    due = schedule_around(q, conn, MYSQL_AHEAD)
    assert call(q.mod.due_priorities, conn, group="g", now=T0) == [1]
    # The claim statement a worker runs (the advisory form's read of candidates), in an open
    # transaction, rolled back; a counted claim's keys are unlocked after it.
    fn = q.mod.candidates if layout.form == "advisory" else q.mod.claim
    args = {"now": T0, "limit": 5, "group": "g", "locked_until": T0 + dt.timedelta(seconds=LEASE)}
    taken, locked = {}, {}
    for by_priority in (False, True):
        rows = call(fn, conn, **args, by_priority=by_priority)
        taken[by_priority] = sorted(q.id_of(r) for r in rows)
        locked[by_priority] = mysql_rows_locked(conn)
        conn.rollback()
        if layout.count_crashes:
            q.mod.release(conn)
    assert taken[False] == taken[True] == due
    if layout.form != "advisory":  # (its read locks nothing)
        assert locked[False] > 2 * MYSQL_AHEAD, locked
        assert locked[True] < 50, locked


def test_mysql_held_back_by_priority_counts_the_same_rows_and_reads_none_due_later(
        queue: MakeQueue) -> None:
    """A key-limited lease counts, once a second, the due rows that wait behind their own key's
    (HELD_BACK, unlocked). The plain count reads the claim index in one scan, past every row
    due later at a more urgent priority; its twin keeps to the priorities that have due rows,
    as the claim does, and counts the same."""
    q = queue("mysql", Layout(form="lease", key_concurrency=2))
    conn = q.connect()
    later = T0 + dt.timedelta(days=1)
    for priority in (0, 2):
        q.mod.insert_many(conn, [q.new(payload="later", priority=priority, retry_after=later)
                                 for _ in range(MYSQL_AHEAD)])
    for i in range(3):  # one key's: the third waits behind its first two
        q.add(conn, payload=f"due-{i}", priority=1, retry_after=at(-10), account="a")
    conn.commit()
    counts = [q.mod.held_back(conn, now=T0, limit=1000),
              q.mod.held_back(conn, now=T0, limit=1000, by_priority=True),
              q.mod.held_back(conn, now=T0, limit=1000, by_priority=True, priorities=[1]),
              q.mod.held_back(conn, now=T0, limit=1000, by_priority=True, priorities=[])]
    assert counts == [1, 1, 1, 0]
    values = {"now": T0.replace(tzinfo=None), "limit": 1000, "key_concurrency": 2,
              "priorities": (1,)}
    pages = {}
    with conn.cursor() as cur:
        for name in ("HELD_BACK", "HELD_BACK_BY_PRIORITY"):
            bound = {k: values[k] for k in q.mod.DESCRIPTOR.statement_params[name]}
            pages[name] = mariadb_pages(cur, getattr(q.mod, name), bound)
    conn.rollback()
    assert pages["HELD_BACK"] > 5 * pages["HELD_BACK_BY_PRIORITY"], pages


# Where the claims by priority keep to a list of priorities: MySQL/MariaDB, and a partitioned
# PostgreSQL table.
LISTED = [pytest.param("mysql", Layout(form="lease", group=True), id="mysql"),
          pytest.param("postgres", Layout(form="lease", group=True, partitions=4),
                       id="postgres-partitioned")]


@pytest.mark.parametrize(("dialect", "layout"), LISTED)
def test_due_priorities_lists_those_with_a_due_row_of_the_group(
        queue: MakeQueue, dialect: str, layout: Layout) -> None:
    """due_priorities() walks the priorities of the worker's group's unfinished rows and keeps
    those whose first row is due (a row in work counts: its priority's claim passes over it)."""
    q = queue(dialect, layout)
    conn = q.connect()
    later = T0 + dt.timedelta(hours=1)
    for priority, due in ((-3, False), (0, True), (0, False), (4, False), (7, True)):
        q.add(conn, payload="x", priority=priority, retry_after=at(-10) if due else later)
    q.add(conn, payload="other group", priority=2, retry_after=at(-10), **{q.group_attr: "h"})
    conn.commit()
    assert q.mod.due_priorities(conn, group="g", now=T0) == [0, 7]
    assert q.mod.due_priorities(conn, group="g", now=later) == [-3, 0, 4, 7]
    assert q.mod.due_priorities(conn, group="h", now=T0) == [2]
    assert q.mod.due_priorities(conn, group="none", now=T0) == []


@pytest.mark.parametrize(("dialect", "layout"), [
    *(pytest.param("mysql", *p.values, id=f"mysql-{p.id}") for p in MYSQL_BY_PRIORITY_LAYOUTS[:4]),
    *(pytest.param("postgres", *p.values, id=f"postgres-{p.id}") for p in BY_PRIORITY_LAYOUTS
      if "partitioned" in str(p.id))])
def test_listed_worker_claims_by_priority_and_a_job_of_a_new_priority_runs(
        queue: MakeQueue, dialect: str, layout: Layout) -> None:
    """A worker on MySQL or on a partitioned PostgreSQL table claims by priority from its first
    claim on (the read of candidates too), each claim kept to the priorities due_priorities()
    listed; a claim that came back short has the list read again, so a job enqueued later at a
    priority no row had runs at the next poll. While no listed priority has due rows, a worker
    sends no claim (it would take nothing): its idle polls read the list."""
    from inboxgen import Worker

    q = queue(dialect, layout)
    conn = q.connect()
    now = dt.datetime.now(dt.UTC)  # the worker's clock: the real one
    due = schedule_around(q, conn, 5_000, now)
    ran: list[Any] = []
    claims: list[dict[str, Any]] = []

    async def handler(job: Any) -> None:
        ran.append(job.id)

    worker = Worker(q.mod.DESCRIPTOR, handler, database=q.database, workers=2, batch=2,
                    poll_interval=0.2, listen=False, group="g" if layout.group else None)
    original = worker.calls.args

    def recording(op: str, values: dict[str, Any]) -> dict[str, Any]:
        if op in ("claim", "candidates"):
            claims.append(dict(values))
        return original(op, values)

    worker.calls.args = recording  # type: ignore[method-assign]

    async def run() -> Any:
        await worker.start()
        try:
            for _ in range(200):
                if len(ran) == len(due):
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.2)  # idle polls behind the rows due later
            late = await asyncio.to_thread(
                lambda: q.add(conn, payload="urgent", priority=-5, retry_after=now))
            await asyncio.to_thread(conn.commit)
            for _ in range(200):
                if late in ran:
                    break
                await asyncio.sleep(0.05)
            return late
        finally:
            await worker.shutdown()

    late = asyncio.run(run())
    assert sorted(ran) == sorted([*due, late])
    assert claims and all(c["by_priority"] and "priorities" in c for c in claims), claims[:3]
    assert {p for c in claims for p in c["priorities"]} == {-5, 1}
    assert all(c["priorities"] for c in claims), [c["priorities"] for c in claims]


def test_mysql_key_limited_worker_counts_held_back_rows_by_priority(queue: MakeQueue) -> None:
    """A key-limited lease worker on MySQL counts its held-back rows (HELD_BACK, once a second)
    kept to the priorities its claims keep to, the list its last due_priorities() read."""
    from inboxgen import Worker

    q = queue("mysql", Layout(form="lease", key_concurrency=2))
    conn = q.connect()
    now = dt.datetime.now(dt.UTC)  # the worker's clock: the real one
    due = schedule_around(q, conn, 2_000, now)
    ran: list[Any] = []
    counts: list[dict[str, Any]] = []

    async def handler(job: Any) -> None:
        ran.append(job.id)

    worker = Worker(q.mod.DESCRIPTOR, handler, database=q.database, workers=2, batch=2,
                    poll_interval=0.2, listen=False)
    original = worker.calls.args

    def recording(op: str, values: dict[str, Any]) -> dict[str, Any]:
        if op == "held_back":
            counts.append(dict(values))
        return original(op, values)

    worker.calls.args = recording  # type: ignore[method-assign]

    async def run() -> None:
        await worker.start()
        try:
            for _ in range(200):
                if len(ran) == len(due):
                    break
                await asyncio.sleep(0.05)
        finally:
            await worker.shutdown()

    asyncio.run(run())
    assert sorted(ran) == due
    assert counts and all(c["by_priority"] and tuple(c["priorities"]) == (1,)
                          for c in counts), counts[:3]
