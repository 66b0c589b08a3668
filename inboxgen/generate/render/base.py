"""What a generated module holds, dialect by dialect's hooks: the Python types of each column,
how values cross the driver boundary, and the bodies of the typed functions. Each dialect's
module (postgres.py, mysql.py, sqlite.py) overrides what its driver does otherwise."""

from __future__ import annotations

import textwrap

import attrs

from inboxgen.descriptor import Operations
from inboxgen.generate import catalog as cat
from inboxgen.generate.dialects import LEASE
from inboxgen.generate.model import Field, Queue
from inboxgen.generate.render.text import (
    LINE_LENGTH,
    async_line,
    comment,
    docstring,
    py_str,
    sql_literal,
    sync_line,
)
from inboxgen.generate.statements import Statement

_PY_TYPES = {
    cat.INT: "int",
    cat.BOOL: "bool",
    cat.TEXT: "str",
    cat.BYTES: "bytes",
    cat.TIMESTAMP: "datetime.datetime",
    cat.TIMESTAMPTZ: "datetime.datetime",
    cat.FLOAT: "float",
    cat.DECIMAL: "decimal.Decimal",
    cat.DATE: "datetime.date",
    cat.TIME: "datetime.time",
    cat.UUID: "uuid.UUID",
}

OPERATION_NAMES = frozenset(f.name for f in attrs.fields(Operations))

# Keyword arguments of generated functions, in the order a reader expects them.
_ARG_ORDER = ["id", "group", "key", "wait", "fifo_key", "now", "locked_until", "attempt",
              "new_locked_until", "retry_after", "limit", "to_group", "reset_attempt", "before"]


@attrs.frozen
class Func:
    name: str
    args: str  # after `conn`, e.g. "*, now: datetime.datetime"
    returns: str
    doc: str
    body: tuple[str, ...]  # lines; "AWAIT " marks where the async twin awaits


@attrs.frozen
class RowField:
    attr: str
    claimed_type: str
    new_type: str
    new_default: str | None


class Renderer:
    """The pieces of one queue's module. A dialect's renderer overrides the hooks (class
    attributes and methods marked as such) where its driver differs."""

    # Hook: what the plain functions' `conn` is, and the async twins' (None: no twins).
    connection_type = ""
    async_connection_type: str | None = None
    # Hook: the column kinds whose values travel as naive UTC datetimes.
    naive_utc_kinds: frozenset[str] = frozenset({cat.TIMESTAMP})
    # Hook: whether JSON columns are bound as Jsonb and arrive decoded (psycopg).
    binds_jsonb = False
    # Hook: the function a statement is run with, and the arguments that precede the statement.
    executor = "conn.execute"
    executor_args: tuple[str, ...] = ()

    def __init__(self, q: Queue, statements: list[Statement]) -> None:
        self.q = q
        self.d = q.dialect
        self.st = {s.name: s for s in statements}

    # -- types and conversions --------------------------------------------------------------

    def payload_type(self) -> str:
        if self.q.payload_type:
            return self.q.payload_type.rpartition(":")[2]
        return {"bytes": "bytes", "text": "str", "json": "_v.JSONValue"}.get(self.q.codec or "",
                                                                              "object")

    def raw_type(self, f: Field) -> str:
        """The type of the value the driver hands back for this column."""
        kind = f.column.kind
        base = "datetime.datetime" if self.q.time_text(f) else self.driver_type(kind)
        return base if not f.column.nullable or base == "object" else f"{base} | None"

    def driver_type(self, kind: str) -> str:
        """Hook: the Python type the driver hands back for a column of `kind`."""
        return _PY_TYPES.get(kind, "object")

    def new_type(self, f: Field) -> str:
        if f.role == "payload":
            t = self.payload_type()
        elif f.role == "headers":
            t = "Mapping[str, str]"
        else:
            t = self.raw_type(f).removesuffix(" | None")
        return f"{t} | None" if self.may_be_none(f) and t != "object" else t

    @staticmethod
    def may_be_none(f: Field) -> bool:
        """Whether a NewRow attribute may be None: NULL, or the DDL default where there is one."""
        return f.column.nullable or f.optional

    def held_lease(self, f: Field) -> bool:
        """The lease expiry of a claimed row: every claim writes it, so it is never None."""
        return self.q.lease and f.role == "locked_until"

    def claimed_type(self, f: Field) -> str:
        t = self.raw_type(f)
        return t.removesuffix(" | None") if self.held_lease(f) else t

    def from_db(self, f: Field, expr: str) -> str:
        if self.held_lease(f) and self.lease_after_read:
            return "locked_until"
        none = "_or_none" if f.column.nullable and not self.held_lease(f) else ""
        if self.q.time_text(f):
            return f"_v.parse_sqlite_time{none}({expr})"
        if f.column.kind in self.naive_utc_kinds:
            return f"_v.aware{none}({expr})"
        return expr

    def time_encoder(self, f: Field | None, expr: str) -> str:
        if f is None:
            return expr
        if self.q.time_text(f):
            return f"_v.sqlite_time({expr})"
        if f.column.kind in self.naive_utc_kinds:
            return f"_v.naive_utc({expr})"
        return expr

    def to_db(self, f: Field, expr: str) -> str:
        """Encode a NewRow attribute for insert; None stays None (SQL NULL, or the default)."""
        kind = f.column.kind
        nullable = self.may_be_none(f)
        if f.role == "payload" and self.q.codec == "json":
            if kind == cat.JSON and self.binds_jsonb:
                enc = f"Jsonb({expr}, dumps=_v.json_text)"
            elif kind == cat.BYTES:
                enc = f"_v.json_bytes({expr})"
            else:
                enc = f"_v.json_text({expr})"
            return f"None if {expr} is None else {enc}" if nullable else enc
        if f.role == "headers":
            if kind == cat.JSON and self.binds_jsonb:
                enc = f"Jsonb(dict({expr}))"
            else:
                enc = f"_v.json_text(dict({expr}))"
            return f"None if {expr} is None else {enc}" if nullable else enc
        if kind == cat.JSON and self.binds_jsonb:
            # Jsonb(None) would be JSON null, not SQL NULL.
            return f"None if {expr} is None else Jsonb({expr})" if nullable else f"Jsonb({expr})"
        if self.q.time_text(f):
            return f"_v.sqlite_time{'_or_none' if nullable else ''}({expr})"
        if kind in self.naive_utc_kinds:
            return f"_v.naive_utc{'_or_none' if nullable else ''}({expr})"
        return expr

    # -- functions ----------------------------------------------------------------------------

    def param_value(self, name: str) -> str:
        role_of = {"now": None, "locked_until": "locked_until", "new_locked_until": "locked_until",
                   "retry_after": "retry_after"}
        if name == "now":
            f = next((self.q.role(r) for r in ("retry_after", "locked_until", "processed_at")
                      if self.q.role(r)), None)
            return self.time_encoder(f, "now")
        if name in role_of:
            return self.time_encoder(self.q.role(role_of[name] or ""), name)
        if name == "before":
            return self.time_encoder(self.q.role("processed_at"), name)
        if name == "dead_group":
            return py_str(self.q.dead_letter_group or "")
        if name == "channel":
            return "CHANNEL"
        if name == "payload":
            return "group"
        if name == "ids":
            return self.ids_of(f"r.{self.q.id.attr} for r in rows")
        return name

    def ids_of(self, generator: str) -> str:
        """Hook: the `ids` parameter of a claim from a generator expression of the claimed
        rows' ids."""
        return f"[{generator}]"

    def ids_from(self, name: str) -> str:
        """Hook: the `ids` parameter from the sequence argument `name`."""
        return self.array(f"list({name})")

    def array(self, value: str) -> str:
        """Hook: a list value bound as one array parameter."""
        return value

    def params(self, st: Statement) -> list[str]:
        return [f"{py_str(p)}: {self.param_value(p)}" for p in st.params]

    def run(self, head: str, name: str, items: list[str] | str) -> list[str]:
        """`head` + `conn.execute(NAME, {params})` (the dialect's `executor`), wrapped when the
        line gets long (in the async twin, the longer of the two)."""
        first = "".join(f"{a}, " for a in self.executor_args)
        params = items if isinstance(items, str) else f"{{{', '.join(items)}}}"
        one = f"{head}AWAIT {self.executor}({first}{name}, {params})"
        if len(async_line(one)) + 8 <= 100 or isinstance(items, str):
            return [one]
        return [f"{head}AWAIT {self.executor}(", *[f"    {a}," for a in self.executor_args],
                f"    {name},", "    {", *[f"        {i}," for i in items], "    },", ")"]

    def arg_types(self) -> dict[str, str]:
        types = {
            "now": "datetime.datetime", "locked_until": "datetime.datetime",
            "new_locked_until": "datetime.datetime", "retry_after": "datetime.datetime",
            "limit": "int", "attempt": "int", "key": "str", "fifo_key": "str", "wait": "float",
            "group": "str",
        }
        types["id"] = self.raw_type(self.q.id).removesuffix(" | None")
        return types

    def args(self, st: Statement, *, skip: tuple[str, ...] = (), extra: str = "") -> str:
        types = self.arg_types()
        names = sorted((p for p in st.params
                        if p not in skip and p not in ("dead_group", "channel", "payload",
                                                       "ids")),
                       key=_ARG_ORDER.index)
        parts = [f"{p}: {types[p]}" for p in names]
        if extra:
            parts.append(extra)
        return "*, " + ", ".join(parts) if parts else ""

    def functions(self) -> list[Func]:
        q = self.q
        out: list[Func] = []
        st = self.st
        lease_doc = (" Returns False when the lease is no longer held (the row is untouched)."
                     if q.lease else "")
        if "CLAIM" in st:
            out.append(self.claim())
        if "CLAIM_GUARD" in st:
            for name in ("CLAIM_GUARD", "CLAIM_UNGUARD"):
                turn = st[name]
                out.append(Func(name.lower(), self.args(turn), "bool", turn.doc, (
                    *self.run("cur = ", name, self.params(turn)),
                    "row = AWAIT cur.fetchone()",
                    "return row is not None and bool(row[0])")))
        if "RELOCK" in st:
            relock = st["RELOCK"]
            out.append(Func("relock", self.args(relock), "ClaimedRow | None", relock.doc, (
                *self.run("cur = ", "RELOCK", self.params(relock)),
                "row = AWAIT cur.fetchone()",
                "return None if row is None else _claimed(row)")))
        if "CANDIDATES" in st:
            cand = st["CANDIDATES"]
            out.append(Func("candidates", self.args(cand, skip=("limit",),
                                                    extra="limit: int = 1"),
                            "list[ClaimedRow]", cand.doc, (
                                *self.run("cur = ", "CANDIDATES", self.params(cand)),
                                "return [_claimed(r) for r in AWAIT cur.fetchall()]")))
            take = st["TAKE"]
            body = [*self.run("cur = ", "TAKE", self.params(take)),
                    "row = AWAIT cur.fetchone()"]
            if "TAKE_COUNT" in st:
                body += ["if row is None:", "    return None",
                         *self.run("", "TAKE_COUNT", self.params(st["TAKE_COUNT"])),
                         "return _claimed(row)"]
            else:
                body.append("return None if row is None else _claimed(row)")
            out.append(Func("take", self.args(take), "ClaimedRow | None",
                            take.doc + (" Counts the attempt." if "TAKE_COUNT" in st else ""),
                            tuple(body)))
        if "LOCK" in st:
            for name in ("LOCK", "UNLOCK"):
                s = st[name]
                out.append(Func(name.lower(), self.args(s), "bool", s.doc, (
                    *self.run("cur = ", name, self.params(s)),
                    "row = AWAIT cur.fetchone()",
                    "return row is not None and bool(row[0])")))
        if "FIFO_HEAD" in st:
            out.append(self.fifo_head_claim())
        if "FIFO_CLAIM" in st:
            fc = st["FIFO_CLAIM"]
            body = []
            if "FIFO_GUARD" in st:
                body += [*self.run("guard = ", "FIFO_GUARD", ['"fifo_key": TABLE + ":" + group']),
                         "held = AWAIT guard.fetchone()",
                         "if held is None or not held[0]:",
                         "    return None"]
            body += [*self.run("cur = ", "FIFO_CLAIM", self.params(fc)),
                     "row = AWAIT cur.fetchone()",
                     "return None if row is None else _claimed(row)"]
            doc = fc.doc + (" Takes the group's transaction-scoped guard first."
                            if "FIFO_GUARD" in st else "")
            out.append(Func("fifo_claim", self.args(fc), "ClaimedRow | None", doc, tuple(body)))
        for name, fname in (("RENEW", "renew"), ("FINISH", "finish"), ("RETRY", "retry"),
                            ("RETRY_AFTER", "retry_after"), ("DEAD_LETTER", "dead_letter")):
            if name not in st:
                continue
            s = st[name]
            out.append(Func(fname, self.args(s), "bool", s.doc + lease_doc, (
                *self.run("cur = ", name, self.params(s)),
                "return cur.rowcount == 1")))
        for name, fname in (("RENEW_MANY", "renew_many"), ("FINISH_MANY", "finish_many")):
            if name in st:
                out.append(self.batch_settlement(st[name], fname))
        if "DEAD_LETTER_COPY" in st:
            s = st["DEAD_LETTER_COPY"]
            out.append(Func("dead_letter", self.args(s), "bool",
                            "Move a spent row to the dead-letter table: copy, then delete. Run it "
                            "in one transaction and roll back when it returns False." + lease_doc,
                            (*self.run("cur = ", "DEAD_LETTER_COPY", self.params(s)),
                             "if cur.rowcount != 1:",
                             "    return False",
                             *self.run("cur = ", "DEAD_LETTER_DELETE",
                                       self.params(st["DEAD_LETTER_DELETE"])),
                             "return cur.rowcount == 1")))
        ins_params = "_insert_params(row)" if q.insert_fields else "{}"
        returns, run_insert, give_id = self.insert_id(ins_params)
        doc = ("Enqueue one row on the caller's connection and return its id; nothing is "
               "committed here." if give_id else
               "Enqueue one row on the caller's connection; nothing is committed here.")
        # Every enqueue function takes the same options: `notify` where the dialect has NOTIFY.
        notifies = "NOTIFY" in st
        options = ", *, notify: bool = False" if notifies else ""
        woken = (" With notify, listening workers wake when the transaction commits."
                 if notifies else "")
        group = self.notify_group("row")
        if notifies:
            out.append(Func("insert", "row: NewRow" + options, returns, doc + woken,
                            (*self.insert_notify(group, ins_params, returns), *run_insert,
                             *(() if "INSERT_NOTIFY" in st else (
                                 "if notify:",
                                 *("    " + line for line in self.notify_lines(group)))),
                             *give_id)))
        else:
            out.append(Func("insert", "row: NewRow", returns, doc, (*run_insert, *give_id)))
        if q.unique and "INSERT_UNIQUE" not in st:
            out += self.insert_unique_by_error(ins_params)
        if "INSERT_UNIQUE" in st:
            unique: tuple[str, ...] = (*self.run("cur = ", "INSERT_UNIQUE", ins_params),
                                       "return cur.rowcount == 1")
            if notifies:  # a duplicate is not enqueued: nobody to wake
                unique = (*self.run("cur = ", "INSERT_UNIQUE", ins_params),
                        "inserted = cur.rowcount == 1",
                        "if notify and inserted:",
                        *("    " + line for line in self.notify_lines(group)),
                        "return inserted")
            out.append(Func("insert_unique", "row: NewRow" + options, "bool",
                            "Enqueue one row unless its unique key is already queued; "
                            "returns whether it was inserted." + woken, unique))
        many: Func | None = None
        if "INSERT_MANY" in st:
            many = self.insert_many()
        elif q.insert_fields:
            many = self.insert_many_by_executemany()
        if many is not None and notifies:
            g = q.role("group")
            if g is not None and not g.generated:
                each = self.notify_group("r")
                wake = ["if notify:", f"    for group in sorted({{{each} for r in rows}}):",
                        *("        " + line for line in self.notify_lines("group"))]
                woken = woken.replace("workers wake", "workers of each group wake")
            else:
                wake = ["if notify and rows:",
                        *("    " + line for line in self.notify_lines('""'))]
            many = attrs.evolve(many, args=many.args + options, doc=many.doc + woken,
                                body=(*many.body, *wake))
        if many is not None:
            out.append(many)
        if "NOTIFY" in st:
            out.append(Func("notify", "group: str = \"\"", "None", st["NOTIFY"].doc,
                            tuple(self.run("", "NOTIFY", self.params(st["NOTIFY"])))))
        out += self.operations()
        return out

    def scalar(self, fname: str, name: str, returns: str, args: str = "") -> Func:
        """A function returning the one value its statement selects."""
        s = self.st[name]
        convert = "None if row is None or row[0] is None else float(row[0])" if \
            returns == "float | None" else "0 if row is None or row[0] is None else int(row[0])"
        return Func(fname, args, returns, s.doc, (
            *self.run("cur = ", name, self.params(s)),
            "row = AWAIT cur.fetchone()",
            f"return {convert}"))

    def operations(self) -> list[Func]:
        """What inboxgen status, requeue and prune run."""
        q, st = self.q, self.st
        out: list[Func] = []
        s = st["STATUS"]
        ra = q.role("retry_after")
        oldest = "None"
        if ra is not None:  # MIN() of no rows is NULL, whatever the column allows
            conv = self.from_db(ra, "r[5]").replace("_or_none(", "(")
            oldest = "r[5]" if conv == "r[5]" else f"None if r[5] is None else {conv}"
        out.append(Func("status", "*, now: datetime.datetime", "list[QueueStatus]", s.doc, (
            *self.run("cur = ", "STATUS", self.params(s)),
            "return [",
            "    QueueStatus(",
            "        group=r[0],",
            "        ready=int(r[1] or 0),",
            "        scheduled=int(r[2] or 0),",
            "        in_work=None if r[3] is None else int(r[3]),",
            "        finished=None if r[4] is None else int(r[4]),",
            f"        oldest_ready={oldest},",
            "    )",
            "    for r in AWAIT cur.fetchall()",
            "]")))
        if "STATUS_DEAD" in st:
            out.append(self.scalar("dead_count", "STATUS_DEAD", "int"))
        if "OLDEST_TRANSACTION" in st:
            out.append(self.scalar("oldest_transaction", "OLDEST_TRANSACTION", "float | None"))
        if "ADVISORY_LOCKS" in st:
            out.append(self.scalar("advisory_locks", "ADVISORY_LOCKS", "int"))
        if "TABLE_HEALTH" in st:
            table = py_str(q.dialect.qualified(q.table.schema, q.table.name))
            out.append(Func("table_health", "", "TableHealth | None", st["TABLE_HEALTH"].doc, (
                *self.run("cur = ", "TABLE_HEALTH", [f'"table": {table}']),
                "row = AWAIT cur.fetchone()",
                "if row is None:  # no such table on the search path",
                "    return None",
                "return TableHealth(",
                "    dead_tuples=int(row[0]),",
                "    live_tuples=int(row[1]),",
                "    hot_share=None if row[2] is None else float(row[2]),",
                "    last_autovacuum=row[3],",
                ")")))
        if "PRUNE" in st:
            out.append(Func("prune", "*, before: datetime.datetime, limit: int", "int",
                            st["PRUNE"].doc + " Returns how many it deleted.", (
                                *self.run("cur = ", "PRUNE", self.params(st["PRUNE"])),
                                "return cur.rowcount")))
            out.append(self.scalar("prunable", "PRUNABLE", "int", "*, before: datetime.datetime"))
        moved = ("Move dead letters (all, or those of `ids`) from the dead-letter table back "
                 "into the queue, due at `now`; returns how many.")
        again = " With `reset_attempt` their attempt count starts again."
        if "REQUEUE" in st:
            out.append(self.requeue("REQUEUE", "to_group: str, ",
                                    "Put dead letters (all, or those of `ids`) back into group "
                                    "`to_group`, due at `now`; returns how many." + again))
        elif "REQUEUE_MOVE" in st:
            out.append(self.requeue("REQUEUE_MOVE", "", moved + again))
        elif "REQUEUE_COPY" in st:
            out.append(self.requeue("REQUEUE_COPY", "", moved + " Run it in one transaction."
                                    + again, then="REQUEUE_DELETE"))
        return out

    def requeue(self, name: str, first: str, doc: str, then: str | None = None) -> Func:
        """requeue(): statement `name` for every dead letter, `name`_IDS for those of `ids`;
        then, where given, statement `then` (the dead-letter table's delete)."""
        id_t = self.raw_type(self.q.id).removesuffix(" | None")
        ids = self.ids_from("ids")
        items = self.params(self.st[name])
        body = ["if ids is None:",
                *("    " + line for line in self.run("cur = ", name, items)),
                "else:",
                *("    " + line for line in self.run("cur = ", f"{name}_IDS",
                                                     [*items, f'"ids": {ids}'])),
                *(("moved = cur.rowcount", *self.run("", then, "{}"), "return moved")
                  if then else ("return cur.rowcount",))]
        args = (f"*, {first}now: datetime.datetime, reset_attempt: bool = False, "
                f"ids: Sequence[{id_t}] | None = None")
        return Func("requeue", args, "int", doc, tuple(body))

    # The parameters a batch statement takes one entry per row of (the guard's); the others
    # (now, new_locked_until) are one value for the whole batch.
    _PER_ROW = ("id", "locked_until", "attempt")

    def batch_settlement(self, s: Statement, fname: str) -> Func:
        """A batch settlement: a sequence per guard parameter, one entry per row. A lease's
        returns the ids it changed; a row lock's (its rows are the transaction's) the count."""
        types = self.arg_types()
        held = [p for p in self._PER_ROW if p == "id" or self.q.role(p) is not None]
        # SQLite's statement reads the rows' guard values as one JSON array (`held`).
        params = [q for p in s.params for q in (held if p == "held" else [p])]
        names = sorted(params, key=_ARG_ORDER.index)
        args = "*, " + ", ".join(f"{p}: Sequence[{types[p]}]" if p in self._PER_ROW
                                 else f"{p}: {types[p]}" for p in names)
        items = [f"{py_str(p)}: {'_v.json_text(held)' if p == 'held' else self.batch_value(p)}"
                 for p in s.params]
        first = self.held_rows(held) if "held" in s.params else []
        if self.q.lease:
            t = self.raw_type(self.q.id).removesuffix(" | None")
            body = (*first, *self.run("cur = ", s.name, items),
                    f"return [{self.id_cast(t).replace('new_id', 'r[0]')} for r in "
                    f"AWAIT cur.fetchall()]")
            returns = f"list[{t}]"
        else:
            body = (*first, *self.run("cur = ", s.name, items), "return cur.rowcount")
            returns = "int"
        return Func(fname, args, returns, s.doc + " The sequences hold one entry per row.", body)

    def batch_value(self, name: str) -> str:
        if name not in self._PER_ROW:
            return self.param_value(name)
        if name == "locked_until":
            value = f"[{self.time_encoder(self.q.role('locked_until'), 't')} for t in {name}]"
        else:
            value = f"list({name})"
        return self.array(value)

    def held_rows(self, held: list[str]) -> list[str]:
        """SQLite: the lines that gather the rows' guard values into `held`, one
        [id, locked_until, attempt] entry per row (the statement reads it as one JSON array)."""
        short = {"id": "i", "locked_until": "t", "attempt": "a"}
        entry = {"id": "i", "locked_until": self.time_encoder(self.q.role("locked_until"), "t"),
                 "attempt": "a"}
        return [f"held = [[{', '.join(entry[p] for p in held)}]",
                f"        for {', '.join(short[p] for p in held)} in zip({', '.join(held)}, "
                f"strict=True)]"]

    def notify_group(self, row: str) -> str:
        """The NOTIFY payload for a new row: its group ("" wakes every worker)."""
        g = self.q.role("group")
        if g is None or g.generated:
            return '""'
        return f"{row}.{g.attr}" if not self.may_be_none(g) else f'{row}.{g.attr} or ""'

    def notify_lines(self, group: str) -> list[str]:
        return self.run("", "NOTIFY", ['"channel": CHANNEL', f'"payload": {group}'])

    def insert_notify(self, group: str, params: str, returns: str) -> list[str]:
        """insert(notify=True) as one statement, where the module has it."""
        if "INSERT_NOTIFY" not in self.st:
            return []
        spread = [f"**{params}"] if params != "{}" else []
        items = [*spread, '"notify_channel": CHANNEL', f'"notify_group": {group}']
        return ["if notify:",
                *("    " + line for line in self.run("cur = ", "INSERT_NOTIFY", items)),
                "    new = AWAIT cur.fetchone()",
                "    assert new is not None  # RETURNING gives the inserted row",
                f"    return {self.id_cast(returns).replace('new_id', 'new[0]')}"]

    def insert_id(self, params: str) -> tuple[str, list[str], list[str]]:
        """Hook: insert()'s return type, the lines that run INSERT, and those that return the
        id: here from INSERT ... RETURNING."""
        t = self.raw_type(self.q.id).removesuffix(" | None")
        return t, [*self.run("cur = ", "INSERT", params),
                   "new = AWAIT cur.fetchone()",
                   "assert new is not None  # RETURNING gives the inserted row",
                   "new_id = new[0]"], [f"return {self.id_cast(t)}"]

    def insert_unique_by_error(self, params: str) -> list[Func]:
        """Hook: insert_unique() where the dialect has no INSERT_UNIQUE statement."""
        return []

    def insert_many(self) -> Func:
        """insert_many() on the dialect's INSERT_MANY statement (hook)."""
        cols = [f"{py_str(f.attr)}: [{self.to_db(f, 'r.' + f.attr)} for r in rows]"
                for f in self.q.insert_fields]
        return Func("insert_many", "rows: Sequence[NewRow]", "None",
                    self.st["INSERT_MANY"].doc + " Nothing is committed here.",
                    tuple(self.run("", "INSERT_MANY", cols)))

    def insert_many_by_executemany(self) -> Func:
        """Hook: insert_many() as INSERT run by the driver's executemany."""
        return Func("insert_many", "rows: Sequence[NewRow]", "None",
                    "Enqueue many rows in one call (executemany); nothing is committed here.",
                    ("conn.executemany(INSERT, [_insert_params(r) for r in rows])",))

    def claim(self) -> Func:
        """Hook: claim(), on a CLAIM that writes and returns the rows it claims."""
        q, claim = self.q, self.st["CLAIM"]
        body = [*self.run("cur = ", "CLAIM", self.params(claim)),
                "rows = [_claimed(r) for r in AWAIT cur.fetchall()]"]
        if q.form == LEASE or q.count_crashes:
            body.append("rows.sort(key=_claim_order)  # RETURNING keeps no order")
        body.append("return rows")
        return Func("claim", self.args(claim, skip=("limit",), extra="limit: int = 1"),
                    "list[ClaimedRow]", claim.doc, tuple(body))

    def fifo_head_claim(self) -> Func:
        """Hook: fifo_claim() on FIFO_HEAD, for dialects whose statements have it."""
        raise NotImplementedError

    # Hook: whether a lease claim reads its rows before it writes the lease, so that
    # `_claimed` takes the new expiry instead of the column's old value.
    reads_before_leasing = False

    @property
    def lease_after_read(self) -> bool:
        return self.reads_before_leasing and self.q.lease

    @staticmethod
    def id_cast(t: str) -> str:
        """The id as its type (the driver hands back Any)."""
        return f"cast({t}, new_id)"

    def claimed(self, row: str) -> str:
        return f"_claimed({row}, locked_until)" if self.lease_after_read else f"_claimed({row})"

    # -- module -------------------------------------------------------------------------------

    def summary(self) -> str:
        """The module docstring's first line (or lines, for names near the servers' limits)."""
        q = self.q
        what = (f"{q.dialect.name}, claimed by {q.form.replace('_', ' ')}"
                + (", FIFO groups" if q.fifo else "") + ".")
        qualified = f"{q.table.schema}.{q.table.name}" if q.table.schema else q.table.name
        one = f"Queue table {qualified}: {what}"
        if len(one) + 3 <= LINE_LENGTH:
            return one
        where = f" in schema {q.table.schema}" if q.table.schema else ""
        return "\n".join(textwrap.wrap(f"Queue table {q.table.name}{where}: {what}", width=96,
                                        break_long_words=False))

    def context(self) -> dict[str, object]:
        q = self.q
        qualified = f"{q.table.schema}.{q.table.name}" if q.table.schema else q.table.name
        rows = [
            RowField(f.attr, self.claimed_type(f), self.new_type(f),
                     "None" if self.may_be_none(f) else None)
            for f in q.fields
        ]
        new_rows = [r for r, f in zip(rows, q.fields, strict=True) if not f.generated]
        # Required attributes first: attrs needs defaults last.
        new_rows.sort(key=lambda r: r.new_default is not None)
        order = [f for f in (q.role(r) for r in ("priority", "retry_after", "id")) if f]
        funcs = self.functions()
        decode = self.decode_payload()
        key = self.advisory_key_expr()
        roles = {f.role: f.name for f in q.fields if f.role}
        d_table = q.dead_letter_table
        ctx: dict[str, object] = {
            "q": q,
            "spec_path": q.spec.display,
            "table_name": q.table.name,
            "qualified": qualified,
            "summary": self.summary(),
            "table_literal": (py_str(qualified) if len(qualified) < 80 else
                              f"(\n    {py_str(f'{q.table.schema}.')}\n    "
                              f"{py_str(q.table.name)}\n)"),
            "statements": [(s.name, sql_literal(s.sql), s.doc) for s in self.st.values()],
            "rows": rows,
            "new_rows": new_rows,
            "claimed_from_db": [self.from_db(f, f"r[{i}]") for i, f in enumerate(q.fields)],
            "claimed_args": ", locked_until: datetime.datetime" if self.lease_after_read else "",
            "insert_params": [(f.attr, self.to_db(f, "row." + f.attr)) for f in
                              q.insert_fields],
            "order_key": ", ".join(f"row.{f.attr}" for f in order) + ("," if len(order) == 1
                                                                         else ""),
            "funcs": funcs,
            "signature": signature,
            "op_names": OPERATION_NAMES,
            "docstring": docstring,
            "comment": comment,
            "conn": self.connection_type,
            "async_conn": self.async_connection_type,
            "sync_line": sync_line,
            "async_line": async_line,
            "twins": self.async_connection_type is not None,
            "decode_payload": decode,
            "advisory_key": key,
            "py_str": py_str,
            "roles": [(py_str(k), py_str(v)) for k, v in roles.items()],
            "columns": [py_str(f.name) for f in q.fields],
            "dead_letter_table": py_str(f"{d_table.schema}.{d_table.name}" if d_table and
                                        d_table.schema else d_table.name) if d_table else "None",
            "dead_letter_group": py_str(q.dead_letter_group) if q.dead_letter_group else "None",
            "codec": py_str(q.codec) if q.codec else "None",
            "rt": q.runtime,
            "lease_form": q.form == LEASE or q.count_crashes,
            "count_crashes": q.count_crashes,
        }
        return ctx

    def decode_payload(self) -> tuple[str, str, list[str]] | None:
        """(raw argument type, return type, body lines) of decode_payload, if there is one."""
        payload = self.q.role("payload")
        if payload is None:
            return None
        raw = self.raw_type(payload)
        ret = self.payload_type()
        if self.q.codec != "json":
            return raw, raw, ["return raw"]
        target = ret if self.q.payload_type else "_v.JSONValue"
        lines = []
        if payload.column.nullable:
            raw_nn = raw.removesuffix(" | None")
            ret = f"{ret} | None"
            lines.append("if raw is None:")
            lines.append("    return None")
            raw = f"{raw_nn} | None"
        text = "raw"
        decoded = payload.column.kind == cat.JSON and self.binds_jsonb  # by the driver
        if raw.removesuffix(" | None") == "object" and not decoded:
            # A column the driver hands back as stored (SQLite's JSON has NUMERIC affinity, so
            # the text of a bare number comes back as that number).
            lines.append("text = raw if isinstance(raw, str | bytes) else str(raw)")
            text = "text"
        if decoded:
            call = f"msgspec.convert(raw, type={target})"
        else:
            call = f"msgspec.json.decode({text}, type={target})"
        if not self.q.payload_type:
            # msgspec decodes any JSON without a target type; the alias documents the result.
            call = ("cast(\"_v.JSONValue\", raw)" if "convert" in call else
                    f"cast(\"_v.JSONValue\", msgspec.json.decode({text}))")
        lines.append(f"return {call}")
        return raw, ret, lines

    def advisory_key_expr(self) -> str | None:
        if not self.q.advisory_key:
            return None
        parts = []
        for literal, attr in self.q.advisory_key:
            if literal:
                parts.append(py_str(literal))
            if attr:
                parts.append(f"str(row.{attr})")
        return " + ".join(parts)


def signature(f: Func, conn: str, is_async: bool) -> str:
    """The `def` line of a generated function, one argument a line when it gets long."""
    prefix = "async def" if is_async else "def"
    name = f"{f.name}_async" if is_async else f.name
    args = [f"conn: {conn}"] + ([a.strip() for a in _split_args(f.args)] if f.args else [])
    one = f"{prefix} {name}({', '.join(args)}) -> {f.returns}:"
    if len(one) <= 100:
        return one
    inner = "".join(f"    {a},\n" for a in args)
    return f"{prefix} {name}(\n{inner}) -> {f.returns}:"


def _split_args(args: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    current = ""
    for ch in args:
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        depth += ch in "[("
        depth -= ch in "])"
        current += ch
    parts.append(current)
    return [p for p in parts if p.strip()]


