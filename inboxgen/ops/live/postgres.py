"""PostgreSQL: pg_attribute for the columns, pg_index for the unique keys, EXPLAIN (FORMAT JSON)
with scans and sorts priced out."""

from __future__ import annotations

import datetime as _dt
import json
from typing import Any

from inboxgen.generate.catalog import null_column
from inboxgen.generate.dialects import POSTGRES
from inboxgen.ops.live.base import LiveDatabase, LiveIndex
from inboxgen.runtime.engines import (
    POSTGRES_STATE,
    POSTGRES_VERSION,
    Engine,
    asks_state,
    postgres_engine,
)


class PostgresLive(LiveDatabase):
    def columns(self, schema: str | None, table: str) -> list[tuple[str, str, bool]]:
        name = f'"{schema}"."{table}"' if schema else f'"{table}"'
        rows = self.conn.execute(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod), NOT a.attnotnull "
            "FROM pg_attribute a WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 "
            "AND NOT a.attisdropped ORDER BY a.attnum", (name,)).fetchall()
        self.conn.rollback()
        return [(r[0], r[1], bool(r[2])) for r in rows]

    def unique_keys(self, schema: str | None, table: str) -> list[tuple[str, ...]]:
        name = f'"{schema}"."{table}"' if schema else f'"{table}"'
        # Key columns only (not INCLUDE ones); an index over an expression (attnum 0) is none.
        rows = self.conn.execute(
            "SELECT array_agg(a.attname ORDER BY k.n) FROM pg_index i "
            "CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n) "
            "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
            "WHERE i.indrelid = to_regclass(%s) AND i.indisunique AND i.indisvalid "
            "AND i.indpred IS NULL AND NOT 0 = ANY (i.indkey) AND k.n <= i.indnkeyatts "
            "GROUP BY i.indexrelid", (name,)).fetchall()
        self.conn.rollback()
        return [tuple(r[0]) for r in rows]

    def indexes(self, schema: str | None, table: str) -> list[LiveIndex]:
        name = f'"{schema}"."{table}"' if schema else f'"{table}"'
        rows = self.conn.execute(
            "SELECT c.relname, ARRAY(SELECT COALESCE(a.attname, '(expression)') "
            "FROM unnest(i.indkey) WITH ORDINALITY AS k(attnum, n) "
            "LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
            "WHERE k.n <= i.indnkeyatts ORDER BY k.n), pg_get_expr(i.indpred, i.indrelid) "
            "FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE i.indrelid = to_regclass(%s) AND i.indisvalid ORDER BY c.relname",
            (name,)).fetchall()
        self.conn.rollback()
        return [LiveIndex(r[0], list(r[1]), null_column(r[2], POSTGRES) if r[2] else None)
                for r in rows]

    def names_in_use(self, schema: str | None, table: str) -> list[str]:
        # An index's name is taken by any relation of the table's schema: tables, indexes,
        # sequences, views.
        name = f'"{schema}"."{table}"' if schema else f'"{table}"'
        rows = self.conn.execute(
            "SELECT relname FROM pg_class WHERE relnamespace = "
            "(SELECT relnamespace FROM pg_class WHERE oid = to_regclass(%s))",
            (name,)).fetchall()
        self.conn.rollback()
        return [r[0] for r in rows]

    def engine(self) -> Engine:
        (version,) = self.conn.execute(POSTGRES_VERSION).fetchone()
        state = self.conn.execute(POSTGRES_STATE).fetchone() if asks_state(version) else None
        self.conn.rollback()
        return postgres_engine(str(version), state)

    def sample_time(self) -> Any:
        return _dt.datetime.now(_dt.UTC)

    def explain(self, sql: str, bound: dict[str, Any]) -> Any:
        try:
            # Off, so that the plan shows whether an index can serve the order at all (on a
            # small table a sequential scan and a sort would win on cost alone).
            self.conn.execute("SET LOCAL enable_seqscan = off")
            self.conn.execute("SET LOCAL enable_sort = off")
            row = self.conn.execute("EXPLAIN (FORMAT JSON) " + sql, bound).fetchone()
            return row[0] if row is not None else []
        finally:
            self.conn.rollback()

    def ordered_by_index(self, plan: Any, table: str, *, filters_rows: bool = True,
                         others: frozenset[str] = frozenset(), walk: bool = False) -> bool:
        # With sequential scans and sorts priced out, a plan that still has one has no index
        # that serves the claim order (a claim reads only its own table). By node type: a
        # partitioned table's Merge Append of index scans names its order as "Sort Key". The
        # other tables a claim reads (`others`: a pause table of a few rows) may be scanned.
        bad = {"Seq Scan"} if walk else _NOT_IN_ORDER
        return not any(node.get("Node Type") in bad
                       and node.get("Relation Name") not in others for node in _nodes(plan))


# Plan nodes that mean the rows are not read in the claim's order from an index.
_NOT_IN_ORDER = frozenset({"Sort", "Incremental Sort", "Seq Scan"})


def _nodes(plan: Any) -> list[dict[str, Any]]:
    """Every node of an EXPLAIN (FORMAT JSON) plan, subplans and InitPlans included."""
    if isinstance(plan, str):  # a driver that hands JSON back as text
        plan = json.loads(plan)
    todo = [entry["Plan"] for entry in plan if isinstance(entry, dict) and "Plan" in entry]
    found: list[dict[str, Any]] = []
    while todo:
        node = todo.pop()
        found.append(node)
        todo.extend(node.get("Plans") or [])
    return found
