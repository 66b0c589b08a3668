"""`inboxgen verify --database-url`: the committed modules against the live database. Every
generated statement is planned there (EXPLAIN, so nothing runs), each claim is checked for an
index that serves its order, and the live table is compared with the one the migrations build
(a column missing, its type or its nullability changed). Each finding names the table and the
statement or column."""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Callable
from types import ModuleType
from typing import Any

from inboxgen.generate.catalog import load_catalog
from inboxgen.generate.model import Queue
from inboxgen.runtime.connecting import first_line

# The statements that read due rows in claim order: each should have an index serving it.
_CLAIMS = ("CLAIM", "CANDIDATES", "FIFO_HEAD")


def check(module: ModuleType, queue: Queue, conn: Any) -> list[str]:
    d = module.DESCRIPTOR
    dialect = d.dialect
    found: list[str] = []
    table = d.qualified_name
    live = _LIVE_COLUMNS[dialect](conn, d.schema, d.table)
    if not live:
        return [f"table {table}: not in the database"]
    found += _drift(queue, live, table)
    if found:
        return found  # statements naming a missing column would only repeat it
    for name, sql in d.statements.items():
        params = d.statement_params[name]
        # A claim is planned with a group and a time, so its plan is the real one; the rest
        # only prepare, with every value NULL.
        bound = (_sample(params, _SAMPLE_TIME[dialect]()) if name in _CLAIMS
                 else _sample(params, None))
        try:
            plan = _EXPLAIN[dialect](conn, sql, bound)
        except Exception as err:
            found.append(f"table {table}, statement {name}: does not prepare: {first_line(err)}")
            continue
        if name in _CLAIMS and not _ordered_by_index[dialect](plan, d.table):
            found.append(f"table {table}, statement {name}: no index serves the claim order "
                         f"(the plan sorts or scans the table): every claim reads all due rows")
    return found


def _drift(queue: Queue, live: list[tuple[str, str, bool]], table: str) -> list[str]:
    """Compare the columns the module uses with the live ones: names, broad types (through
    the same reading of DDL the build uses) and nullability."""
    d = queue.dialect
    q = d.quote
    ddl = "CREATE TABLE live_table (\n" + ",\n".join(
        f"{q(name)} {type_} {'NULL' if nullable else 'NOT NULL'}" for name, type_, nullable in live
    ) + "\n);"
    catalog = load_catalog([("(the live database)", ddl)], d)
    live_table = catalog.table(None, "live_table")
    out: list[str] = []
    for f in queue.fields:
        col = live_table.column(f.name, d) if live_table is not None else None
        if col is None:
            out.append(f"table {table}, column {f.name}: missing in the database")
            continue
        if col.kind != f.column.kind:
            out.append(f"table {table}, column {f.name}: is {col.type_sql} in the database, "
                       f"{f.column.type_sql} in the migrations")
        if col.nullable != f.column.nullable:
            now = "nullable" if col.nullable else "NOT NULL"
            was = "nullable" if f.column.nullable else "NOT NULL"
            out.append(f"table {table}, column {f.name}: is {now} in the database, {was} in "
                       f"the migrations")
    return out


# -- per dialect --------------------------------------------------------------------------------

def _pg_columns(conn: Any, schema: str | None, table: str) -> list[tuple[str, str, bool]]:
    name = f'"{schema}"."{table}"' if schema else f'"{table}"'
    rows = conn.execute(
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod), NOT a.attnotnull "
        "FROM pg_attribute a WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 "
        "AND NOT a.attisdropped ORDER BY a.attnum", (name,)).fetchall()
    conn.rollback()
    return [(r[0], r[1], bool(r[2])) for r in rows]


def _pg_explain(conn: Any, sql: str, bound: dict[str, Any]) -> Any:
    try:
        # Off, so that the plan shows whether an index can serve the order at all (on a small
        # table a sequential scan and a sort would win on cost alone).
        conn.execute("SET LOCAL enable_seqscan = off")
        conn.execute("SET LOCAL enable_sort = off")
        rows = conn.execute("EXPLAIN " + sql, bound).fetchall()
        return "\n".join(str(r[0]) for r in rows)
    finally:
        conn.rollback()


def _pg_ordered(plan: Any, table: str) -> bool:
    # With sequential scans and sorts priced out, a plan that still has one has no index
    # that serves the claim order (a claim reads only its own table).
    return "Sort" not in plan and "Seq Scan" not in plan


def _mysql_columns(conn: Any, schema: str | None, table: str) -> list[tuple[str, str, bool]]:
    with conn.cursor() as cur:
        cur.execute("SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE = 'YES' FROM "
                    "information_schema.COLUMNS WHERE TABLE_SCHEMA = COALESCE(%s, DATABASE()) "
                    "AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION", (schema, table))
        rows = cur.fetchall()
    conn.rollback()
    return [(r[0], r[1], bool(r[2])) for r in rows]


def _mysql_explain(conn: Any, sql: str, bound: dict[str, Any]) -> Any:
    from inboxgen.runtime.backends.mysql import bind_lists

    bound = bind_lists(sql, bound)
    try:
        with conn.cursor() as cur:
            cur.execute("EXPLAIN " + sql, bound)
            cols = [c[0] for c in cur.description]
            return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    finally:
        conn.rollback()


def _mysql_ordered(plan: Any, table: str) -> bool:
    mine = [r for r in plan if r.get("table") == table]
    return bool(mine) and all(r.get("key") and "filesort" not in str(r.get("Extra") or "")
                              for r in mine)


def _sqlite_columns(conn: Any, schema: str | None, table: str) -> list[tuple[str, str, bool]]:
    rows = conn.execute(f'PRAGMA table_info("{table}")').fetchall()
    return [(r[1], r[2] or "BLOB", not r[3] and not r[5]) for r in rows]


def _sqlite_explain(conn: Any, sql: str, bound: dict[str, Any]) -> Any:
    rows = conn.execute("EXPLAIN QUERY PLAN " + sql, bound).fetchall()
    return "\n".join(str(r[-1]) for r in rows)


def _sqlite_ordered(plan: Any, table: str) -> bool:
    return "TEMP B-TREE FOR ORDER BY" not in plan and not re.search(
        rf"\bSCAN {re.escape(table)}\b(?! USING)", plan)


_TIMES = ("now", "locked_until", "new_locked_until", "retry_after", "before")


def _sample(params: tuple[str, ...], time: Any) -> dict[str, Any]:
    """Values for EXPLAIN: NULL, except what a plan depends on (a NULL group or time makes the
    planner see that no row can match, and it plans nothing)."""
    bound: dict[str, Any] = dict.fromkeys(params)
    for name in params:
        if name == "limit":
            bound[name] = 1  # MySQL takes no NULL in LIMIT
        elif name == "group":
            bound[name] = "a group"
        elif name in _TIMES:
            bound[name] = time
    return bound




_LIVE_COLUMNS: dict[str, Callable[[Any, str | None, str], list[tuple[str, str, bool]]]] = {
    "postgres": _pg_columns, "mysql": _mysql_columns, "sqlite": _sqlite_columns}
# A time as each driver takes it: PostgreSQL aware, MySQL naive UTC, SQLite text.
_SAMPLE_TIME: dict[str, Callable[[], Any]] = {
    "postgres": lambda: _dt.datetime.now(_dt.UTC),
    "mysql": lambda: _dt.datetime.now(_dt.UTC).replace(tzinfo=None),
    "sqlite": lambda: _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f"),
}
_EXPLAIN: dict[str, Callable[[Any, str, dict[str, Any]], Any]] = {
    "postgres": _pg_explain, "mysql": _mysql_explain, "sqlite": _sqlite_explain}
_ordered_by_index: dict[str, Callable[[Any, str], bool]] = {
    "postgres": _pg_ordered, "mysql": _mysql_ordered, "sqlite": _sqlite_ordered}
