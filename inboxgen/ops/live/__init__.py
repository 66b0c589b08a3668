"""`inboxgen verify --database-url`: the committed modules against the live database. Every
generated statement is planned there (EXPLAIN, so nothing runs), each claim is checked for an
index that serves its order, and the live table is compared with the one the migrations build
(a column missing, its type or its nullability changed, the unique key's index gone), and the
claim index the build asks for is looked for (over unfinished rows only, where finished rows
are kept). Every finding is reported, each naming the table and the statement, column or key."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from inboxgen.descriptor import PARTITION_SLOT, names_a_partition
from inboxgen.generate import catalog as cat
from inboxgen.generate.catalog import load_catalog
from inboxgen.generate.model import Queue
from inboxgen.ops.live.base import LiveDatabase, LiveIndex
from inboxgen.ops.live.mysql import MySQLLive
from inboxgen.ops.live.postgres import PostgresLive
from inboxgen.ops.live.sqlite import SqliteLive
from inboxgen.runtime.connecting import first_line
from inboxgen.values import FROM_THE_HEAD, FROM_THE_HEAD_UUID

_BY_DIALECT: dict[str, type[LiveDatabase]] = {
    "postgres": PostgresLive, "mysql": MySQLLive, "sqlite": SqliteLive}

# The statements that read due rows in claim order: each should have an index serving it.
_CLAIMS = ("CLAIM", "CANDIDATES", "FIFO_HEAD")


def check(module: ModuleType, queue: Queue, conn: Any, database: str) -> list[str]:
    d = module.DESCRIPTOR
    db = _BY_DIALECT[d.dialect](conn)
    found: list[str] = []
    table = d.qualified_name
    live = db.columns(d.schema, d.table)
    if not live:
        return [f"table {table}: not in the database"]
    # Every finding, each on its own line: a column that changed must not hide an index that
    # went (a statement naming a missing column is reported too: it fails when it runs).
    engine = db.engine()
    refusal = (engine.refusal(d.form, counted=d.count_crashes) if engine is not None
               else None)
    if refusal is not None:
        found.append(f"table {table}: {database} {refusal}")
    found += _drift(queue, live, table)
    found += _unique(queue, db.unique_keys(d.schema, d.table), table)
    found += _claim_index(queue, db, (d.schema, d.table), table, database)
    # MySQL's limited CLAIM reads nothing unless the session holds the claim turn: it is
    # planned as the runtime runs it, under the turn.
    turn = d.statements.get("CLAIM_TURN") if "CLAIM_TURN_END" in d.statements else None
    if turn is not None:
        db.run(turn, {"queue": module.TABLE})
    try:
        found += _plans(d, queue, db, table, module.TABLE)
    finally:
        if turn is not None:
            db.run(d.statements["CLAIM_TURN_END"], {"queue": module.TABLE})
    return found


def _plans(d: Any, queue: Queue, db: LiveDatabase, table: str, name_of_queue: str
           ) -> list[str]:
    """Every statement planned (`name_of_queue`: the queue's name, as its statements bind
    it); each claim's plan read for an index in the claim order."""
    found: list[str] = []
    head = FROM_THE_HEAD_UUID if queue.id.column.kind == cat.UUID else FROM_THE_HEAD
    for name, sql in d.statements.items():
        if names_a_partition(sql):
            # prune --partitions' statements on one partition: its query is planned on the
            # table (a partition's columns are its table's); EXPLAIN takes no DDL.
            if sql.lstrip().startswith(("ALTER", "DROP")):
                continue
            sql = sql.replace(PARTITION_SLOT, queue.dialect.qualified(d.schema, d.table))
        params = d.statement_params[name]
        # A claim is planned with a group and a time, so its plan is the real one; the rest
        # only prepare, with every value NULL.
        bound = (_sample(params, head, db.sample_time()) if name in _CLAIMS
                 else _sample(params, head, None))
        if "queue" in bound and not name.startswith("INSERT"):  # not a column named queue
            bound["queue"] = name_of_queue
        try:
            plan = db.explain(sql, bound)
        except Exception as err:
            found.append(f"table {table}, statement {name}: does not prepare: {first_line(err)}")
            continue
        filters_rows = queue.role("group") is not None or queue.role("processed_at") is not None
        # The small tables a claim reads beside its own: the pause, rate and after tables.
        others = frozenset(t.name for t in (queue.pause_table, queue.limits and
                                            queue.limits.rate_table, queue.after_table) if t)
        if name in _CLAIMS and not db.ordered_by_index(plan, d.table, filters_rows=filters_rows,
                                                       others=others, walk="after" in params):
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


def _unique(queue: Queue, live: list[tuple[str, ...]], table: str) -> list[str]:
    """The spec's unique key needs a unique index on exactly its columns: PostgreSQL's and
    SQLite's ON CONFLICT name them, and on MySQL without one no duplicate-key error ever comes,
    so duplicates get in."""
    if not queue.unique:
        return []
    same = queue.dialect.same_name
    key = [f.name for f in queue.unique]
    if any(len(cols) == len(key) and all(any(same(k, c) for c in cols) for k in key)
           for cols in live):
        return []
    return [f"table {table}, unique key ({', '.join(key)}): no unique index on these columns "
            f"in the database, which enqueue's duplicate check needs"]


def _claim_index(queue: Queue, db: LiveDatabase, where: tuple[str | None, str], table: str,
                 database: str) -> list[str]:
    """The claim index the build asks for (see checks.indexes): one that serves the claim over
    unfinished rows only, where the table keeps finished rows. The CREATE INDEX it advises
    takes a name the database does not have (the index it replaces often has the first)."""
    wanted = queue.suggested_index
    d = queue.dialect
    live: list[LiveIndex] = db.indexes(*where)
    if wanted is None or any(wanted.served_by(d, i.columns, i.where_null) for i in live):
        return []
    advice = wanted.ddl(d, db.names_in_use(*where))
    order = ", ".join(wanted.order)
    if wanted.finished is None:
        return [f"table {table}, claim index: none serves the claim order ({order}) "
                f"({database}); claims will scan: {advice}"]
    near = next((i.name for i in live if wanted.ordered_by(i.columns)), None)
    what = (f"{near} holds finished rows too" if near else
            f"none serves the claim order ({order}) over unfinished rows only")
    return [f"table {table}, claim index: {what} ({database}); claims walk every finished row: "
            f"{advice}"]


_TIMES = ("now", "locked_until", "new_locked_until", "retry_after", "before")


def _sample(params: tuple[str, ...], head: dict[str, Any], time: Any) -> dict[str, Any]:
    """Values for EXPLAIN: NULL, except what a plan depends on (a NULL group or time makes the
    planner see that no row can match, and it plans nothing); `head`: what claim() binds for
    a claim from the head."""
    bound: dict[str, Any] = dict.fromkeys(params)
    for name in params:
        if name == "limit":
            bound[name] = 1  # MySQL takes no NULL in LIMIT
        elif name == "group":
            bound[name] = "a group"
        elif name == "row_key":
            bound[name] = "a table:"  # the prefix of a counted row's key
        elif name in head:
            bound[name] = head[name]
        elif name in ("concurrency", "key_concurrency", "rate", "rate_seconds"):
            bound[name] = 1  # [flow] limits: a NULL limit would admit no row
        elif name in _TIMES:
            bound[name] = time
    return bound
