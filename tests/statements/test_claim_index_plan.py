"""The claim index the build asks for, on a table that keeps its finished rows, read by the real
servers: the generated claim reads it, and reads unfinished rows only, however many finished
rows the table keeps (PostgreSQL: the partial index, `WHERE processed_at IS NULL`; MariaDB:
processed_at after the group in the key, named by the claim's FORCE INDEX)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import psycopg
import pytest
from dbcases import (
    FROM_THE_HEAD,
    T0,
    Layout,
    MakeQueue,
    mariadb_accesses,
    mysql_connect,
    mysql_statements,
    spec_toml,
)
from genutil import build_module, ddl_of

FINISHED = 200_000
DUE = 50
LIMIT = 10
# Blocks (8 kB pages, index and table) the search for LIMIT due rows may touch: the index's root
# and a leaf or two, and the heap pages of the rows it locks.
FEW_BLOCKS = 32
# A whole claim also updates the rows it found (lease: by id, through the primary key) and
# writes their index entries.
PER_ROW = 16

FILL = """
INSERT INTO jobs (grp, priority, retry_after, attempt, processed_at, account, payload)
SELECT 'g', 0, %(t0)s - interval '1 day' + n * interval '1 ms', 1,
       CASE WHEN n <= %(finished)s THEN %(t0)s - interval '1 hour' END, 'a', 'x'
FROM generate_series(1, %(rows)s) AS n
"""


def _bound(q: Any, name: str) -> dict[str, Any]:
    values = {"group": "g", "now": T0, "limit": LIMIT,
              "locked_until": T0 + dt.timedelta(seconds=30), **FROM_THE_HEAD}
    return {p: values[p] for p in q.mod.DESCRIPTOR.statement_params[name]}


def _claim_plan(conn: psycopg.Connection[Any], q: Any) -> dict[str, Any]:
    """The CLAIM's plan as it ran (EXPLAIN ANALYZE runs it: rolled back after)."""
    try:
        rows = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + q.mod.CLAIM,
                            _bound(q, "CLAIM")).fetchone()
        assert rows is not None
        plan: dict[str, Any] = rows[0][0]
        return plan
    finally:
        conn.rollback()


def _nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [node] + [n for child in node.get("Plans", []) for n in _nodes(child)]


def _blocks(node: dict[str, Any]) -> int:
    return int(node["Shared Hit Blocks"] + node["Shared Read Blocks"])


def _search(plan: dict[str, Any]) -> dict[str, Any]:
    """The part of the plan that finds the rows to claim: its LIMIT (with what it reads)."""
    return next(n for n in _nodes(plan["Plan"]) if n["Node Type"] == "Limit")


@pytest.mark.parametrize("form", ["lease", "row_lock"])
def test_a_postgres_claim_reads_the_partial_index_and_never_the_finished_rows(
        queue: MakeQueue, form: str) -> None:
    q = queue("postgres", Layout(form=form, group=True))
    with psycopg.connect(q.target) as conn:
        conn.execute(FILL, {"t0": T0, "finished": FINISHED, "rows": FINISHED + DUE})
        conn.commit()
        conn.autocommit = True
        conn.execute("VACUUM ANALYZE jobs")
        conn.autocommit = False

        plan = _claim_plan(conn, q)
        scans = [n for n in _nodes(plan["Plan"]) if n.get("Relation Name") == "jobs"
                 and n["Node Type"].startswith("Index")]
        assert any(n.get("Index Name") == "jobs_claim" for n in scans), json.dumps(plan)
        claimed = [n for n in _nodes(plan["Plan"]) if n.get("Index Name") == "jobs_claim"]
        assert all(n["Actual Rows"] <= LIMIT for n in claimed), json.dumps(plan)
        partial = _blocks(_search(plan))
        assert partial < FEW_BLOCKS, json.dumps(plan)
        assert _blocks(plan["Plan"]) < PER_ROW * LIMIT, json.dumps(plan)

        # The index the build used to suggest holds the finished rows too: the same claim
        # walks them (or scans the table), and its buffers grow with them.
        conn.execute("DROP INDEX jobs_claim")
        conn.execute("CREATE INDEX jobs_claim_all ON jobs (grp, priority, retry_after, id)")
        conn.commit()
        conn.autocommit = True
        conn.execute("ANALYZE jobs")
        conn.autocommit = False
        full = _blocks(_search(_claim_plan(conn, q)))
        assert full > 100 * partial, (partial, full)


MYSQL_FILL = """
INSERT INTO jobs (grp, priority, retry_after, attempt, processed_at, account, payload)
SELECT 'g', 0, %(t0)s - INTERVAL 1 DAY + INTERVAL seq MICROSECOND, 1,
       IF(seq <= %(finished)s, %(t0)s - INTERVAL 1 HOUR, NULL), 'a', 'x'
FROM seq_1_to_{rows}
"""


@pytest.mark.parametrize("form", ["lease", "row_lock"])
def test_a_mariadb_claim_reads_the_index_keyed_by_processed_at_without_a_sort(
        queue: MakeQueue, form: str) -> None:
    q = queue("mysql", Layout(form=form, group=True))
    assert "FORCE INDEX (`jobs_claim`)" in q.mod.CLAIM
    conn: Any = mysql_connect(q.target, autocommit=True)
    try:
        with conn.cursor() as cur:
            naive = T0.replace(tzinfo=None)
            cur.execute(MYSQL_FILL.format(rows=FINISHED // 10 + DUE),
                        {"t0": naive, "finished": FINISHED // 10})
            cur.execute("ANALYZE TABLE jobs")
            cur.fetchall()
            bound = _bound(q, "CLAIM")
            bound.update(now=naive, locked_until=naive + dt.timedelta(seconds=30))
            cur.execute("EXPLAIN " + q.mod.CLAIM, bound)
            cols = [c[0] for c in cur.description]
            (row,) = [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    finally:
        conn.close()
    assert row["key"] == "jobs_claim", row
    # Both leading parts bound (group = ?, processed_at IS NULL), and the claim's start (from
    # the head here) the range's lower end on the parts after them; read in order.
    assert row["type"] == "range", row
    assert "filesort" not in str(row["Extra"]), row
    # The rows it expects to read are the unfinished ones, not the finished.
    assert int(row["rows"]) < FINISHED // 100, row


# -- MariaDB: a claim from a start, behind a snapshot held open ------------------------------------

HELD_AHEAD = 200_000
# Pages (16 kB) a claim of LIMIT rows from its start may access: the claim index's path to the
# start and a leaf or two, and the pages of the rows it reads (22-44 here); a read from the
# group's head past the settled rows' entries accessed 168.
FEW_PAGES = 100


@pytest.mark.parametrize("kept", [False, True], ids=["deleted", "kept"])
@pytest.mark.parametrize("form", ["advisory", "row_lock", "lease"])
def test_a_mariadb_claim_from_a_start_reads_none_of_the_rows_a_held_snapshot_keeps_ahead(
        tmp_path: Path, mysql_url: str, form: str, kept: bool) -> None:
    """While a snapshot stays open (a report, a backup, a replica's query), InnoDB's purge keeps
    the index entries of every row a drain settled, ahead of the due rows in claim order. A
    claim from a start (after the last row claimed) seeks to it, and touches a few pages
    however many entries lie ahead. Left to choose, MariaDB read a group's rows claimed in id
    order from the group's head instead, the start a mere filter, once its statistics counted
    the kept entries: the advisory form's 1,000,000-job drain fell to a sixth of its rate."""
    lease = {"locked_until": "locked_until"} if form == "lease" else {}
    finished = {"processed_at": "processed_at"} if kept else {}
    advisory = {"advisory_key": "job-{id}"} if form == "advisory" else {}
    mod = build_module(tmp_path, spec_toml(
        "jobs", {"id": "id generated", "queue": "group", "attempt": "attempt generated",
                 **finished, **lease, "payload": "payload text"},
        dialect="mysql", claim=form, **advisory), f"""
        CREATE TABLE jobs (
            id BIGINT AUTO_INCREMENT PRIMARY KEY,
            queue VARCHAR(64) NOT NULL,
            attempt INTEGER NOT NULL DEFAULT 1,
            {"processed_at DATETIME(6) NULL," if kept else ""}
            {"locked_until DATETIME NULL," if lease else ""}
            payload TEXT NOT NULL
        );
        CREATE INDEX jobs_claim ON jobs (queue, {"processed_at, " if kept else ""}id);
    """)
    name = "CANDIDATES" if form == "advisory" else "CLAIM"
    naive = T0.replace(tzinfo=None)
    values = {"group": "q", "now": naive, "limit": LIMIT, "from_id": HELD_AHEAD + 1,
              "locked_until": naive + dt.timedelta(seconds=30)}
    bound = {p: values[p] for p in mod.DESCRIPTOR.statement_params[name]}
    assert "from_id" in bound, getattr(mod, name)
    conn: Any = mysql_connect(mysql_url, autocommit=True)
    holder: Any = mysql_connect(mysql_url, autocommit=True)
    try:
        with conn.cursor() as cur, holder.cursor() as held:
            for sql in mysql_statements(ddl_of(tmp_path)):
                cur.execute(sql)
            for _ in range((HELD_AHEAD + DUE) // 50_000 + 1):
                cur.execute("INSERT INTO jobs (queue, payload) "
                            "SELECT 'q', 'x' FROM seq_1_to_50000")
            held.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            held.execute("SELECT COUNT(*) FROM jobs")
            # The drain's settlements, a thousand a transaction.
            settle = "UPDATE jobs SET processed_at = %(t0)s" if kept else "DELETE FROM jobs"
            for low in range(0, HELD_AHEAD, 1000):
                cur.execute(f"{settle} WHERE id > %(low)s AND id <= %(high)s",
                            {"t0": naive, "low": low, "high": low + 1000})
            cur.execute("ANALYZE TABLE jobs")
            cur.fetchall()
            statement = getattr(mod, name)
            (read,) = mariadb_accesses(cur, statement, bound)
            cur.execute(statement, bound)
            ids = [row[0] for row in cur.fetchall()]
    finally:
        holder.close()
        conn.close()
    assert ids == list(range(HELD_AHEAD + 1, HELD_AHEAD + 1 + LIMIT))
    # A range of the claim index whose lower end is the start (the id its last part), not the
    # group's head with the start a filter; and pages a handful, not the settled rows' many.
    assert (read["key"], read["access_type"], read["used_key_parts"][-1]) == (
        "jobs_claim", "range", "id"), read
    pages = int(read["r_engine_stats"].get("pages_accessed", 0))
    assert pages < FEW_PAGES, f"{name} accessed {pages} pages"
