"""What a generated module holds, dialect by dialect's hooks: the Python types of each column,
how values cross the driver boundary, and the bodies of the typed functions. Each dialect's
module (postgres.py, mysql.py, sqlite.py) overrides what its driver does otherwise."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence

import attrs

from inboxgen.descriptor import Operations
from inboxgen.errors import GeneratorBug
from inboxgen.generate import catalog as cat
from inboxgen.generate.dialects import LEASE
from inboxgen.generate.model import Field, Queue
from inboxgen.generate.render.text import (
    LINE_LENGTH,
    body_line,
    comment,
    docstring,
    fill,
    filled,
    py_str,
    sql_literal,
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

_NAME = re.compile(r"\b[A-Z][A-Z0-9_]*\b")

OPERATION_NAMES = frozenset(f.name for f in attrs.fields(Operations))

# claim()'s arguments for where it starts (Renderer.start_args).
START_ARGS = ("from_priority", "from_retry_after", "from_id")
# A fair claim's parameters for where its walk starts, kept by its KeyTurns (param_value).
WALK_ARGS = ("after", "resume", "spent")
# Keyword arguments of generated functions, in the order a reader expects them.
_ARG_ORDER = ["id", "group", "key", "wait", "fifo_key", "now", "locked_until", "attempt",
              "new_locked_until", "retry_after", "error", "result", "progress", "limit",
              *START_ARGS, "to_group", "reset_attempt", "before"]


# The functions a service calls in its own transaction, which take what it holds there besides
# the driver connection: a SQLAlchemy Connection or Session (their async twins in the twins) or
# Django's connection (docs/connections.md). The others are the runtime's and the operations
# commands', run on connections of their own: they take the driver connection only.
HELD = frozenset({"insert", "insert_unique", "insert_replace", "insert_debounced",
                  "insert_many", "notify", "state", "cancel", "insert_after", "insert_batch",
                  "after_state"})


# The kinds of result a step makes of its statement, each written by the template's macro of
# the same name (the one macro writes the plain function and its async twin):
#   exec          nothing read; the function returns `result` when there is one
#   rowcount      the number of rows the statement changed
#   changed       whether it changed exactly one row
#   one           `result` (made of `row`), or None when no row came back
#   many          a list of `result` (made of `r`), one per row
#   scalar        `result`, made of the one row read (`row`, None when there is none)
#   returned_id   `result`, made of the row INSERT ... RETURNING gives (`new`)
#   fetched_id    the same, read to the end (`new_id`): SQLite's statement must finish
#   last_id       the cursor's lastrowid
#   unless_duplicate  False when the row's key was already there, else True
KINDS = frozenset({"exec", "rowcount", "changed", "one", "many", "scalar", "returned_id",
                   "fetched_id", "last_id", "unless_duplicate"})


@attrs.frozen
class Step:
    """One statement run, and what the function makes of its result: `run` holds the lines that
    run it, leaving its cursor in `cur` ("AWAIT " marks where the async twin awaits), `after`
    the lines run once the result is read, before it is returned. With `when`, the step runs
    (and returns) only when that condition holds."""

    kind: str = attrs.field(validator=attrs.validators.in_(KINDS))
    run: tuple[str, ...]
    result: str = ""
    after: tuple[str, ...] = ()
    when: str = ""
    # A `many` step's rows as an expression of ROWS, the rows the statement returned.
    over: str = ""
    # A condition on each row `r` of a `many` step: the rows kept.
    keep: str = ""


@attrs.frozen
class Func:
    name: str
    args: str  # after `conn`, e.g. "*, now: datetime.datetime"
    returns: str
    doc: str
    steps: tuple[Step, ...]  # the last runs unconditionally
    before: tuple[str, ...] = ()  # lines run first (a guard, a first statement)
    # A function a service calls in its own transaction (HELD): its `conn` may also be a
    # SQLAlchemy or Django connection over the driver's (inboxgen.connections), turned into
    # the driver's first.
    held: bool = False

    def __attrs_post_init__(self) -> None:
        if not self.steps or self.steps[-1].when:
            raise GeneratorBug(f"{self.name}(): its last step must run unconditionally")

    def lines(self) -> list[str]:
        """Every line of the body that the generator writes (the template writes the rest)."""
        return [*self.before, *(line for s in self.steps for line in (*s.run, *s.after))]


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
    # Hook: the inboxgen.connections function that finds the driver connection in what an
    # enqueue function is given (its `_async` twin for the async twins).
    connection_helper = ""
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

    def result_type(self) -> str:
        """The class a typed result column's JSON decodes to (its name, imported)."""
        assert self.q.result_type
        return self.q.result_type.rpartition(":")[2]

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
            # Encoded and checked at the enqueue (inboxgen.values): JSON that the payload's
            # class refuses, or a value JSON cannot hold, fails there, naming the table.
            typed = f", {self.payload_type()}" if self.q.payload_type else ""
            if kind == cat.JSON and self.binds_jsonb:
                enc = f"_v.payload_jsonb({expr}, TABLE{typed})"
            elif kind == cat.BYTES:
                enc = f"_v.payload_bytes({expr}, TABLE{typed})"
            else:
                enc = f"_v.payload_text({expr}, TABLE{typed})"
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
        if name == "row_key":
            return 'f"inboxgen:{TABLE}:"'  # the prefix of a counted row's session lock key
        if name == "queue":
            return "TABLE"  # the queue's name in the pause table
        if name == "from_id":
            lowest = "LOWEST_UUID" if self.q.id.column.kind == cat.UUID else "LOWEST_ID"
            return f"_v.{lowest} if from_id is None else from_id"  # None: from the head
        if name == "from_priority":
            return "_v.lowest_or(from_priority)"
        if name == "from_retry_after":
            due = self.q.role("retry_after")
            if due is not None and self.q.time_text(due):
                # Text: the start's whole second sorts at or before every text of its time.
                return "_v.sqlite_second(_v.earliest_or(from_retry_after))"
            return self.time_encoder(due, "_v.earliest_or(from_retry_after)")
        if name in ("concurrency", "key_concurrency", "rate", "rate_seconds"):
            return name.upper()  # the module's constants, from the spec's [flow]
        if name == "error":  # cut to what the column holds (ERROR_CHARS)
            return "_v.clipped(error, ERROR_CHARS)"
        if name in ("result", "progress"):  # JSON: a jsonb (json) column takes psycopg's Jsonb
            f = self.q.role(name)
            assert f is not None
            jsonb = f.column.kind == cat.JSON and self.binds_jsonb
            return f"_v.{'jsonb_or_none' if jsonb else 'json_text_or_none'}({name})"
        if name in ("after", "resume", "spent"):
            return f"turns.{name}"  # [flow] fair: where this process's last walk stopped
        if name == "cancelled":
            return '"cancelled"'  # the error a cancelled job's dead letter keeps
        return name

    def ids_of(self, generator: str) -> str:
        """Hook: the `ids` parameter of a claim from a generator expression of the claimed
        rows' ids."""
        return self.array(f"[{generator}]")

    def ids_from(self, name: str) -> str:
        """Hook: the `ids` parameter from the sequence argument `name`."""
        return self.array(f"list({name})")

    def array(self, value: str) -> str:
        """Hook: a list value bound as one array parameter."""
        return value

    def params(self, st: Statement) -> list[str]:
        out = [f"{py_str(p)}: {self.param_value(p)}" for p in st.params]
        # A claim whose twin by priority takes the priorities to keep to passes them to either
        # (the plain statement names no such parameter, and the drivers bind by name).
        twin = self.st.get(f"{st.name}_BY_PRIORITY")
        if twin is not None and "priorities" in twin.params:
            out.append(f'"priorities": {self.ids_from("priorities or ()")}')
        return out

    def run(self, head: str, name: str, items: list[str] | str) -> list[str]:
        """`head` + `conn.execute(NAME, {params})` (the dialect's `executor`), as one line: the
        template wraps it (text.body_line) where it is too long."""
        first = "".join(f"{a}, " for a in self.executor_args)
        params = items if isinstance(items, str) else f"{{{', '.join(items)}}}"
        return [f"{head}AWAIT {self.executor}({first}{name}, {params})"]

    def arg_types(self) -> dict[str, str]:
        types = {
            "now": "datetime.datetime", "locked_until": "datetime.datetime",
            "new_locked_until": "datetime.datetime", "retry_after": "datetime.datetime",
            "limit": "int", "attempt": "int", "key": "str", "fifo_key": "str", "wait": "float",
            "group": "str", "error": "str | None", "result": "object", "progress": "object",
        }
        types["id"] = self.raw_type(self.q.id).removesuffix(" | None")
        return types

    def args(self, st: Statement, *, skip: tuple[str, ...] = (), extra: str = "") -> str:
        types = self.arg_types()
        names = sorted((p for p in st.params
                        if p not in skip and p not in ("dead_group", "channel", "payload",
                                                       "ids", "row_key", "queue",
                                                       "concurrency", "key_concurrency",
                                                       "rate", "rate_seconds", "cancelled")),
                       key=_ARG_ORDER.index)
        parts = [f"{p}: {types[p]}" for p in names]
        if extra:
            parts.append(extra)
        return "*, " + ", ".join(parts) if parts else ""

    def cur(self, name: str, items: list[str] | str) -> tuple[str, ...]:
        """The lines that run statement `name`, its cursor in `cur`."""
        return tuple(self.run("cur = ", name, items))

    def functions(self) -> list[Func]:
        q = self.q
        out: list[Func] = []
        st = self.st
        lease_doc = (" Returns False when the lease is no longer held (the row is untouched)."
                     if q.lease else "")
        if "CLAIM" in st:
            out.append(self.claim_then_mark() if "CLAIM_MARK" in st else self.claim())
        if "CLAIM_TURN_END" in st:
            out.append(self.flag("CLAIM_TURN"))
            turn_end = st["CLAIM_TURN_END"]
            out.append(Func("claim_turn_end", "", "None", turn_end.doc, (
                Step("exec", tuple(self.run("", "CLAIM_TURN_END", self.params(turn_end)))),)))
        if "SCHEDULED" in st:
            out.append(self.scalar("scheduled", "SCHEDULED", "int",
                                   self.args(st["SCHEDULED"])))
        if "NEXT_PRIORITY" in st:
            out.append(self.due_priorities())
        if "HELD_BACK" in st:
            out.append(self.scalar("held_back", "HELD_BACK", "int", self.args(st["HELD_BACK"]),
                                   twin=True))
        if "RELEASE" in st:
            release = st["RELEASE"]
            id_t = self.raw_type(self.q.id).removesuffix(" | None")
            # MySQL's RELEASE unlocks every key of the session and names no rows.
            ids = f"*, id: Sequence[{id_t}]" if "id" in release.params else ""
            out.append(Func("release", ids, "None", release.doc, (
                Step("exec", tuple(self.run("", "RELEASE", [
                    f"{py_str(p)}: {self.param_value(p)}" if p != "id"
                    else f'"id": {self.batch_value("id")}' for p in release.params]))),)))
        if "CANDIDATES" in st:
            cand = st["CANDIDATES"]
            name, extra, doc, pick = self.by_priority("CANDIDATES")
            out.append(Func("candidates", self.args(cand, skip=("limit", *START_ARGS),
                                                    extra="limit: int = 1" + extra
                                                    + self.start_args(cand)),
                            "list[ClaimedRow]", cand.doc + doc, (
                                Step("many", self.cur(name, self.params(cand)),
                                     "_claimed(r)"),), before=pick))
            take = st["TAKE"]
            count = (tuple(self.run("", "TAKE_COUNT", self.params(st["TAKE_COUNT"])))
                     if "TAKE_COUNT" in st else ())
            out.append(Func("take", self.args(take), "ClaimedRow | None",
                            take.doc + (" Counts the attempt." if count else ""), (
                                Step("one", self.cur("TAKE", self.params(take)), "_claimed(row)",
                                     after=count),)))
        if "LOCK" in st:
            for name in ("LOCK", "UNLOCK"):
                out.append(self.flag(name))
        if "FIFO_HEAD" in st:
            out.append(self.fifo_head_claim())
        if "FIFO_CLAIM" in st:
            fc = st["FIFO_CLAIM"]
            guard: tuple[str, ...] = ()
            if "FIFO_GUARD" in st:
                guard = (*self.run("guard = ", "FIFO_GUARD", ['"fifo_key": TABLE + ":" + group']),
                         "held = AWAIT guard.fetchone()",
                         "if held is None or not held[0]:",
                         "    return None")
            doc = fc.doc + (" Takes the group's transaction-scoped guard first." if guard else "")
            out.append(Func("fifo_claim", self.args(fc), "ClaimedRow | None", doc, (
                Step("one", self.cur("FIFO_CLAIM", self.params(fc)), "_claimed(row)"),),
                before=guard))
        for name, fname in (("RENEW", "renew"), ("FINISH", "finish"), ("RETRY", "retry"),
                            ("RETRY_AFTER", "retry_after"), ("DEAD_LETTER", "dead_letter"),
                            ("DEAD_LETTER_MOVE", "dead_letter")):
            if name not in st:
                continue
            s = st[name]
            out.append(Func(fname, self.args(s), "bool", s.doc + lease_doc, (
                Step("changed", self.cur(name, self.params(s))),)))
        for name, fname in (("RENEW_MANY", "renew_many"), ("FINISH_MANY", "finish_many")):
            if name in st:
                out.append(self.batch_settlement(st[name], fname))
        if "DEAD_LETTER_COPY" in st:
            s = st["DEAD_LETTER_COPY"]
            out.append(Func("dead_letter", self.args(s), "bool",
                            "Move a spent row to the dead-letter table: copy, then delete. Run it "
                            "in one transaction and roll back when it returns False." + lease_doc,
                            (Step("changed", self.cur("DEAD_LETTER_DELETE",
                                                      self.params(st["DEAD_LETTER_DELETE"]))),),
                            before=(*self.cur("DEAD_LETTER_COPY", self.params(s)),
                                    "if cur.rowcount != 1:",
                                    "    return False")))
        out += self.inserts()
        out += self.operations()
        return [self.held(f) for f in out]

    def held(self, f: Func) -> Func:
        """A function of HELD, that first finds the driver connection in `conn`; any other as
        it is."""
        if f.name not in HELD:
            return f
        where = py_str(f"{self.q.table.name}.{f.name}")
        return attrs.evolve(f, held=True, before=(
            f"conn = AWAIT _c.{self.connection_helper}(conn, {where})", *f.before))

    def inserts(self) -> list[Func]:
        """insert(), insert_unique(), insert_many() and notify(), where the module has them."""
        q, st = self.q, self.st
        out: list[Func] = []
        ins_params = "_insert_params(row)" if q.insert_fields else "{}"
        returns, insert, gives_id = self.insert_id(ins_params)
        doc = ("Enqueue one row on the caller's connection and return its id; nothing is "
               "committed here." if gives_id else
               "Enqueue one row on the caller's connection; nothing is committed here.")
        # Every enqueue function takes the same options: `notify` where the dialect has NOTIFY.
        notifies = "NOTIFY" in st
        options = ", *, notify: bool = False" if notifies else ""
        woken = (" With notify, listening workers wake when the transaction commits."
                 if notifies else "")
        group = self.notify_group("row")
        if notifies:
            steps: tuple[Step, ...] = (insert,)
            if "INSERT_NOTIFY" in st:
                steps = (self.insert_notify(group, ins_params, returns), insert)
            else:
                steps = (attrs.evolve(insert, after=(
                    *insert.after, "if notify:", *indented(self.notify_lines(group)))),)
            out.append(Func("insert", "row: NewRow" + options, returns, doc + woken, steps))
        else:
            out.append(Func("insert", "row: NewRow", returns, doc, (insert,)))
        if q.unique and "INSERT_UNIQUE" not in st:
            out += self.insert_unique_by_error(ins_params)
        if "INSERT_UNIQUE" in st:
            # A duplicate is not enqueued: nobody to wake.
            wake = ("if notify and changed:", *indented(self.notify_lines(group))) \
                if notifies else ()
            out.append(Func("insert_unique", "row: NewRow" + options, "bool",
                            "Enqueue one row unless its unique key is already queued; "
                            "returns whether it was inserted." + woken, (
                                Step("changed", self.cur("INSERT_UNIQUE", ins_params),
                                     after=wake),)))
        if "REPLACE" in st:
            out += self.replacements(options, woken, group)
        if "AFTER_ADD" in st:
            out += self.after_functions(options, gives_id)
        many: Func | None = None
        if "INSERT_MANY" in st:
            many = self.insert_many()
        elif q.insert_fields:
            many = self.insert_many_by_executemany()
        if many is not None and notifies:
            g = q.role("group")
            if g is not None and not g.generated:
                each = self.notify_group("r")
                wake = ("if notify:", f"    for group in sorted({{{each} for r in rows}}):",
                        *indented(self.notify_lines("group"), 2))
                woken = woken.replace("workers wake", "workers of each group wake")
            else:
                wake = ("if notify and rows:", *indented(self.notify_lines('""')))
            *first, last = many.steps
            many = attrs.evolve(many, args=many.args + options, doc=many.doc + woken,
                                steps=(*first, attrs.evolve(last, after=(*last.after, *wake))))
        if many is not None:
            out.append(many)
        if "NOTIFY" in st:
            out.append(Func("notify", "group: str = \"\"", "None", st["NOTIFY"].doc, (
                Step("exec", tuple(self.run("", "NOTIFY", self.params(st["NOTIFY"])))),)))
        return out

    def replacements(self, options: str, woken: str, group: str) -> list[Func]:
        """insert_replace() and, where the module has DEBOUNCE, insert_debounced(): each tries
        the key's queued row, then an insert, and (a row of the key added by another
        transaction meanwhile) both once more; a key whose row neither finds is kept."""
        wake = ("if notify:", *indented(self.notify_lines(group))) if options else ()
        doc = ("Enqueue one row, or give the queued row of its unique key (where no worker holds "
               "it) the new row's values: its attempts count from the start again, and it keeps "
               "its id. A row of the key that is in work, finished or a dead letter is left as "
               "it is. Returns what it did (Replaced); nothing is committed here." + woken)
        out = [Func("insert_replace", "row: NewRow" + options, "Replaced", doc,
                    self.replace_steps("REPLACE", "REPLACE_INSERT", wake))]
        if "DEBOUNCE" in self.st:
            out.append(Func(
                "insert_debounced", "row: NewRow, *, wait: datetime.timedelta, "
                "max_wait: datetime.timedelta" + options.replace(", *", ""), "Replaced",
                "As insert_replace(), and the key's queued row (or the new one) falls due `wait` "
                "from now, but no later than `max_wait` after it was first enqueued: calls "
                "closer together than `wait` keep moving it later, up to `max_wait`. The due "
                "time is the database's clock." + woken,
                self.replace_steps("DEBOUNCE", "DEBOUNCE_INSERT", wake, debounce=True)))
        return out

    def replace_params(self, debounce: bool) -> list[str]:
        """The parameters every statement of a replacement takes: the new row's, and what the
        statements name besides (a counted row's key prefix, the dead-letter group, the
        debounce's seconds)."""
        names = sorted({p for name in ("REPLACE_PICK", "REPLACE", "DEBOUNCE", "KEY_ROW")
                        if name in self.st for p in self.st[name].params}
                       & {"row_key", "dead_group"})
        items = [f"{py_str(p)}: {self.param_value(p)}" for p in names]
        if debounce:
            items += ['"wait": wait.total_seconds()', '"max_wait": max_wait.total_seconds()',
                      '"first_wait": min(wait, max_wait).total_seconds()']
        if not items:
            return ["params = _insert_params(row)"]
        # At the body's indent, which the template adds.
        return [line[4:] for line in fill("params = {", ["**_insert_params(row)", *items], "}",
                                          "    ")]

    def replace_steps(self, update: str, insert: str, wake: tuple[str, ...], *,
                      debounce: bool = False) -> tuple[Step, ...]:
        """Hook: the body of insert_replace() (`update`, `insert`: REPLACE, REPLACE_INSERT) or
        insert_debounced(): both statements return the row's id (read to the end: SQLite's
        statement must finish)."""
        lines = [*self.replace_params(debounce),
                 "for _ in range(2):  # a row of the key added meanwhile: try it again",
                 *indented(self.run("cur = ", update, "params")),
                 "    found = AWAIT cur.fetchall()",
                 "    if found:",
                 *indented(wake, 2),
                 '        return Replaced(outcome="replaced", id=found[0][0])',
                 *indented(self.run("cur = ", insert, "params")),
                 "    found = AWAIT cur.fetchall()",
                 "    if found:",
                 *indented(wake, 2),
                 '        return Replaced(outcome="queued", id=found[0][0])']
        return (self.kept_step(lines),)

    def kept_step(self, before: list[str]) -> Step:
        """The last step of a replacement: `before`, then KEY_ROW finds the key's row, kept."""
        return Step("exec", (*before, *self.run("cur = ", "KEY_ROW", "params"),
                             "kept = AWAIT cur.fetchone()"),
                    'Replaced(outcome="kept", id=None if kept is None else kept[0])')

    def flag(self, name: str) -> Func:
        """A function returning whether its statement's one value is true (a lock taken)."""
        s = self.st[name]
        return Func(name.lower(), self.args(s), "bool", s.doc, (
            Step("scalar", self.cur(name, self.params(s)), "row is not None and bool(row[0])"),))

    def due_priorities(self) -> Func:
        """due_priorities(): the priorities that have due rows, walked by NEXT_PRIORITY, one
        probe each."""
        nxt = self.st["NEXT_PRIORITY"]
        return Func("due_priorities", self.args(nxt, skip=("above",)), "list[int]",
                    "The priorities that have due rows (a row in work counts), most urgent "
                    "first: NEXT_PRIORITY from each to the next.", (
                        Step("exec", (
                            "due: list[int] = []",
                            "above = _v.LOWEST_ID  # below every priority",
                            "while True:",
                            *indented(self.cur("NEXT_PRIORITY", self.params(nxt))),
                            "    row = AWAIT cur.fetchone()",
                            "    if row is None:",
                            "        return due",
                            "    if row[1]:",
                            "        due.append(int(row[0]))",
                            "    above = row[0]"),),))

    def scalar(self, fname: str, name: str, returns: str, args: str = "", *,
               twin: bool = False) -> Func:
        """A function returning the one value its statement selects (with `twin`, or its
        twin's by priority: by_priority())."""
        s = self.st[name]
        convert = "None if row is None or row[0] is None else float(row[0])" if \
            returns == "float | None" else "0 if row is None or row[0] is None else int(row[0])"
        run, walk, doc, pick = self.by_priority(name, none="0") if twin else (name, "", "", ())
        return Func(fname, args + walk, returns, s.doc + doc, (
            Step("scalar", self.cur(run, self.params(s)), convert),), before=pick)

    def status_oldest(self) -> str:
        """The oldest ready row's retry_after as _status() reads it from STATUS's row `r`."""
        ra = self.q.role("retry_after")
        if ra is None:
            return "None"
        # MIN() of no rows is NULL, whatever the column allows.
        conv = self.from_db(ra, "r[5]").replace("_or_none(", "(")
        return "r[5]" if conv == "r[5]" else f"None if r[5] is None else {conv}"

    def operations(self) -> list[Func]:
        """What inboxgen status, requeue and prune run."""
        st = self.st
        out: list[Func] = []
        s = st["STATUS"]
        out.append(Func("status", "*, now: datetime.datetime", "list[QueueStatus]", s.doc, (
            Step("many", self.cur("STATUS", self.params(s)), "_status(r)"),)))
        if "STATUS_DEAD" in st:
            out.append(self.scalar("dead_count", "STATUS_DEAD", "int"))
        if "OLDEST_TRANSACTION" in st:
            out.append(self.scalar("oldest_transaction", "OLDEST_TRANSACTION", "float | None"))
        if "ADVISORY_LOCKS" in st:
            out.append(self.scalar("advisory_locks", "ADVISORY_LOCKS", "int"))
        if "TABLE_HEALTH" in st:
            q = self.q
            table = py_str(q.dialect.qualified(q.table.schema, q.table.name))
            # None where no such table is on the search path.
            out.append(Func("table_health", "", "TableHealth | None", st["TABLE_HEALTH"].doc, (
                Step("one", self.cur("TABLE_HEALTH", [f'"table": {table}']),
                     "TableHealth.from_row(row)"),)))
        if "PRUNE" in st:
            out.append(Func("prune", "*, before: datetime.datetime, limit: int", "int",
                            st["PRUNE"].doc + " Returns how many it deleted.", (
                                Step("rowcount", self.cur("PRUNE", self.params(st["PRUNE"]))),)))
            out.append(self.scalar("prunable", "PRUNABLE", "int", "*, before: datetime.datetime"))
            out.extend(self.partition_functions())
        if "CANCEL" in st:
            out.append(self.cancel())
        out.append(self.state())
        if "PAUSE" in st:
            out.extend(self.pauses())
        if "AFTER_STATE" in st:
            out.append(self.after_state())
            out.append(self.after_states())
        if "DEAD_LIST" in st:
            out.append(self.dead_letters())
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

    def partition_functions(self) -> list[Func]:
        """prune --partitions' functions, where the dialect has partitions to drop."""
        return []

    def state(self) -> Func:
        """state(): STATE's one row as a JobState (_state), or None where no such job is kept."""
        s = self.st["STATE"]
        if "now" not in s.params:  # the state needs no time: keep the signature alike
            args = self.args(s, extra="now: datetime.datetime | None = None")
        else:
            args = self.args(s)
        return Func("state", args, "JobState | None", s.doc, (
            Step("one", self.cur("STATE", self.params(s)), "_state(row)"),))

    def dead_letters(self) -> Func:
        s = self.st["DEAD_LIST"]
        return Func("dead_letters", self.args(s), "list[JobState]", s.doc, (
            Step("many", self.cur("DEAD_LIST", self.params(s)), "_state(r)"),))

    def state_args(self) -> tuple[str, list[str]]:
        """What _state() calls to make a JobState of STATE's row `r`, and its arguments. A
        payload is decoded by JobState.with_payload, which keeps one that does not decode as
        stored, with its error, instead of raising."""
        q = self.q
        # NULL is checked here, as the dead-letter branch may give it whatever the column allows.
        due, finished_at = ["None" if f is None else f"None if r[{i}] is None else "
                            + self.from_db(f, f"r[{i}]").replace("_or_none(", "(")
                            for i, f in ((3, q.role("retry_after")), (4, q.role("processed_at")))]
        items = ["state=str(r[0])", "id=r[1]", "attempt=None if r[2] is None else int(r[2])",
                 f"due={due}", f"finished_at={finished_at}"]
        kept = [f for f in (q.role("error"), q.role("result"), q.role("progress"))
                if f is not None]
        for i, f in enumerate(kept, start=6):  # after the payload, as STATE selects them
            if f.role == "error":
                items.append(f"error=r[{i}]")
            elif f.role == "result" and q.result_type:
                items.append(f"result=_v.typed_result(r[{i}], {self.result_type()})")
            else:
                items.append(f"{f.role}=_v.parsed_json(r[{i}])")
        if q.role("payload") is None:
            return "JobState", [*items, "payload=None"]
        return "JobState.with_payload", [*items, "stored=r[5]", "decode=decode_payload"]

    def pauses(self) -> list[Func]:
        """pause(), resume() and paused(): [flow] pauses."""
        st = self.st
        grouped = "group" in st["PAUSE"].params
        args = "*, group: str | None = None" if grouped else ""
        # Where the database notifies, resume() wakes the listening workers as it commits.
        notify = self.notify_lines('group or ""' if grouped else '""') if "NOTIFY" in st else []
        wake = " Listening workers wake as it commits." if notify else ""
        return [
            Func("pause", args, "None", st["PAUSE"].doc, (
                Step("exec", tuple(self.run("", "PAUSE", self.params(st["PAUSE"])))),)),
            Func("resume", args, "bool", st["RESUME"].doc + wake, (
                Step("exec", self.cur("RESUME", self.params(st["RESUME"])), "lifted",
                     after=("lifted = cur.rowcount > 0", *notify)),)),
            Func("paused", "", "list[str | None]", st["PAUSED"].doc, (
                Step("many", self.cur("PAUSED", self.params(st["PAUSED"])),
                     "None if r[0] is None else str(r[0])"),)),
        ]

    def cancel(self) -> Func:
        s = self.st["CANCEL"]
        copy: tuple[str, ...] = ()
        if "CANCEL_COPY" in self.st:  # `after`: to the dead-letter table, copied first
            copy = tuple(self.run("", "CANCEL_COPY", self.params(self.st["CANCEL_COPY"])))
        return Func("cancel", self.args(s), "bool", s.doc, (
            Step("changed", (*copy, *self.cur("CANCEL", self.params(s)))),))

    def after_state(self) -> Func:
        """after_state(): AFTER_STATE's rows as an AfterState."""
        s = self.st["AFTER_STATE"]
        return Func("after_state", self.args(s), "AfterState", s.doc, (
            Step("exec", (*self.cur("AFTER_STATE", self.params(s)),
                          "found = AWAIT cur.fetchall()"), "AfterState.of(found)"),))

    def after_states(self) -> Func:
        """after_states(): AFTER_STATES' rows as an AfterState for each job of `ids`."""
        s = self.st["AFTER_STATES"]
        id_t = self.raw_type(self.q.id).removesuffix(" | None")
        items = [f'"ids": {self.ids_from("ids")}' if p == "ids" else
                 f"{py_str(p)}: {self.param_value(p)}" for p in s.params]
        return Func("after_states", f"*, ids: Sequence[{id_t}]", f"dict[{id_t}, AfterState]",
                    s.doc, (Step("exec", ("if not ids:", "    return {}",
                                          *self.cur("AFTER_STATES", items),
                                          "found = AWAIT cur.fetchall()"),
                                 "AfterState.by_job(ids, found)"),))

    def after_functions(self, options: str, gives_id: bool) -> list[Func]:
        """insert_after() and insert_batch(): `after`. The new row and the rows that say what
        it waits for go in on the caller's transaction, so a claim sees them together."""
        q = self.q
        id_t = self.raw_type(q.id).removesuffix(" | None")
        notify = ", notify=notify" if options else ""
        new = ((f"new = AWAIT_TWIN insert(conn, row{notify})",) if gives_id else
               (f"AWAIT_TWIN insert(conn, row{notify})", f"new = row.{q.id.attr}"))
        add = self.run("    ", "AFTER_ADD", '{"job_id": new, "after_id": parent, '
                                           '"on_failure": on_failure}')
        count = self.run("    ", "AFTER_SET", '{"parents": len(parents), "id": new}')
        after = (
            'if on_failure not in ("dead_letter", "run"):',
            '    raise ValueError(f"on_failure must be \'dead_letter\' or \'run\', not '
            '{on_failure!r}")',
            *new,
            "parents = list(dict.fromkeys(after))",
            "for parent in parents:", *add,
            "if parents:", *count)
        doc = ("Enqueue one row that waits for the jobs `after`: no claim takes it while any "
               "of them is queued unfinished. Should one fail (a dead letter, or cancelled), "
               "on_failure=\"dead_letter\" dead-letters this one without running it, \"run\" "
               "runs it all the same. Returns its id; nothing is committed here.")
        batch_doc = ("Enqueue `rows` and a callback row `then` that runs once every one of "
                     "them is finished or dead (on_failure=\"run\"); its handler reads how "
                     "they went with after_state(id=...). Returns the batch's ids and the "
                     "callback's; nothing is committed here.")
        kw = options.replace(", *", "")
        batch_ids = (f"ids = [AWAIT_TWIN insert(conn, r{notify}) for r in rows]" if gives_id else
                     None)
        funcs = [Func("insert_after", f"row: NewRow, *, after: Sequence[{id_t}], "
                                      f"on_failure: str = \"dead_letter\"{kw}", id_t, doc,
                      (Step("exec", after, "new"),))]
        if batch_ids is not None:
            funcs.append(Func("insert_batch", f"rows: Sequence[NewRow], *, then: NewRow{kw}",
                              f"tuple[list[{id_t}], {id_t}]", batch_doc, (
                                  Step("exec", (batch_ids,
                                                "last = AWAIT_TWIN insert_after(conn, then, "
                                                f"after=ids, on_failure=\"run\"{notify})"),
                                       "ids, last"),)))
        return funcs

    def requeue(self, name: str, first: str, doc: str, then: str | None = None) -> Func:
        """requeue(): statement `name` for every dead letter, `name`_IDS for those of `ids`;
        then, where given, statement `then` (the dead-letter table's delete)."""
        id_t = self.raw_type(self.q.id).removesuffix(" | None")
        ids = self.ids_from("ids")
        items = self.params(self.st[name])
        run = ("if ids is None:", *indented(self.cur(name, items)),
               "else:", *indented(self.cur(f"{name}_IDS", [*items, f'"ids": {ids}'])))
        args = (f"*, {first}now: datetime.datetime, reset_attempt: bool = False, "
                f"ids: Sequence[{id_t}] | None = None")
        return Func("requeue", args, "int", doc, (
            Step("rowcount", run, after=tuple(self.run("", then, "{}")) if then else ()),))

    # The parameters a batch statement takes one entry per row of (the guard's); the others
    # (now, new_locked_until) are one value for the whole batch.
    _GUARD = ("id", "locked_until", "attempt")
    _PER_ROW = (*_GUARD, "result", "progress")

    def batch_settlement(self, s: Statement, fname: str) -> Func:
        """A batch settlement: a sequence per guard parameter, one entry per row. A lease's
        returns the ids it changed; a row lock's (its rows are the transaction's) the count."""
        types = self.arg_types()
        held = [p for p in self._GUARD if p == "id" or self.q.role(p) is not None]
        # SQLite's statement reads the rows' guard values as one JSON array (`held`).
        params = [q for p in s.params for q in (held if p == "held" else [p])]
        names = sorted(params, key=_ARG_ORDER.index)
        args = "*, " + ", ".join(f"{p}: Sequence[{types[p]}]" if p in self._PER_ROW
                                 else f"{p}: {types[p]}" for p in names)
        items = [f"{py_str(p)}: {'_v.json_text(held)' if p == 'held' else self.batch_value(p)}"
                 for p in s.params]
        first = tuple(self.held_rows(held)) if "held" in s.params else ()
        if self.q.lease:
            t = self.raw_type(self.q.id).removesuffix(" | None")
            step = Step("many", self.cur(s.name, items), self.id_cast(t, "r[0]"))
            returns = f"list[{t}]"
        else:
            step = Step("rowcount", self.cur(s.name, items))
            returns = "int"
        return Func(fname, args, returns, s.doc + " The sequences hold one entry per row.",
                    (step,), before=first)

    def batch_value(self, name: str) -> str:
        if name not in self._PER_ROW:
            return self.param_value(name)
        if name == "locked_until":
            value = f"[{self.time_encoder(self.q.role('locked_until'), 't')} for t in {name}]"
        elif name in ("result", "progress"):
            value = f"[{self.param_value(name).replace(f'({name})', '(r)')} for r in {name}]"
        else:
            value = f"list({name})"
        return self.array(value)

    def held_rows(self, held: list[str]) -> list[str]:
        """SQLite: the lines that gather the rows' guard values into `held`, one
        [id, locked_until, attempt] entry per row (the statement reads it as one JSON array)."""
        short = {"id": "i", "locked_until": "t", "attempt": "a"}
        entry = {"id": "i", "locked_until": self.time_encoder(self.q.role("locked_until"), "t"),
                 "attempt": "a"}
        first = f"held = [[{', '.join(entry[p] for p in held)}]"
        then = f"for {', '.join(short[p] for p in held)} in zip({', '.join(held)}, strict=True)]"
        if len(f"    {first} {then}") <= LINE_LENGTH:  # the function body's indent
            return [f"{first} {then}"]
        return [first, f"        {then}"]

    def notify_group(self, row: str) -> str:
        """The NOTIFY payload for a new row: its group ("" wakes every worker)."""
        g = self.q.role("group")
        if g is None or g.generated:
            return '""'
        return f"{row}.{g.attr}" if not self.may_be_none(g) else f'{row}.{g.attr} or ""'

    def notify_lines(self, group: str) -> list[str]:
        return self.run("", "NOTIFY", ['"channel": CHANNEL', f'"payload": {group}'])

    def insert_notify(self, group: str, params: str, returns: str) -> Step:
        """insert(notify=True) as one statement (INSERT_NOTIFY)."""
        spread = [f"**{params}"] if params != "{}" else []
        items = [*spread, '"notify_channel": CHANNEL', f'"notify_group": {group}']
        return Step("returned_id", self.cur("INSERT_NOTIFY", items),
                    self.id_cast(returns, "new[0]"), when="notify")

    def insert_id(self, params: str) -> tuple[str, Step, bool]:
        """Hook: insert()'s return type, the step that runs INSERT and reads the id, and
        whether it returns one: here the id INSERT ... RETURNING gives."""
        t = self.raw_type(self.q.id).removesuffix(" | None")
        return t, Step("returned_id", self.cur("INSERT", params), self.id_cast(t, "new[0]")), True

    def insert_unique_by_error(self, params: str) -> list[Func]:
        """Hook: insert_unique() where the dialect has no INSERT_UNIQUE statement."""
        return []

    def insert_many(self) -> Func:
        """insert_many() on the dialect's INSERT_MANY statement (hook)."""
        cols = [f"{py_str(f.attr)}: [{self.to_db(f, 'r.' + f.attr)} for r in rows]"
                for f in self.q.insert_fields]
        return Func("insert_many", "rows: Sequence[NewRow]", "None",
                    self.st["INSERT_MANY"].doc + " Nothing is committed here.",
                    (Step("exec", tuple(self.run("", "INSERT_MANY", cols))),))

    def insert_many_by_executemany(self) -> Func:
        """Hook: insert_many() as INSERT run by the driver's executemany."""
        return Func("insert_many", "rows: Sequence[NewRow]", "None",
                    "Enqueue many rows in one call (executemany); nothing is committed here.",
                    (Step("exec", (
                        "conn.executemany(INSERT, [_insert_params(r) for r in rows])",)),))

    def claim(self) -> Func:
        """Hook: claim(), on a CLAIM that writes and returns the rows it claims."""
        q, claim = self.q, self.st["CLAIM"]
        order = (("rows.sort(key=_claim_order)  # RETURNING keeps no order",)
                 if q.form == LEASE or q.count_crashes else ())
        extra = "limit: int = 1" + self.start_args(claim)
        name, walk, doc, pick = self.by_priority("CLAIM")
        if "after" in claim.params:  # [flow] fair alone: the walk orders the rows
            return Func("claim", self.args(claim, skip=("limit", *WALK_ARGS), extra=extra),
                        "list[ClaimedRow]", claim.doc + " " + self.fair_says(), (
                            Step("many", self.cur(name, self.params(claim)), self.claimed("r"),
                                 over=self.fair_over()),), before=(self.fair_turns(claim),))
        return Func("claim", self.args(claim, skip=("limit", *START_ARGS), extra=extra + walk),
                    "list[ClaimedRow]", claim.doc + doc, (
                        Step("many", self.cur(name, self.params(claim)), "_claimed(r)",
                             after=order),), before=pick)

    def start_args(self, claim: Statement) -> str:
        """claim()'s arguments for where it starts, where CLAIM takes a start: the row to
        start after, its id plus one, and its priority and due time where the claim order has
        them (None: from the head)."""
        types = {"from_id": self.driver_type(self.q.id.column.kind), "from_priority": "int",
                 "from_retry_after": "datetime.datetime"}
        return "".join(f", {name}: {types[name]} | None = None" for name in START_ARGS
                       if name in claim.params)

    @staticmethod
    def start_says(claim: Statement) -> str:
        """What claim()'s docstring says of its start."""
        of = [what for name, what in (("from_priority", "its priority `from_priority`"),
                                      ("from_retry_after", "its due time `from_retry_after`"))
              if name in claim.params]
        if of:
            return (" from the row after the one last claimed (its id plus one `from_id`, and "
                    + " and ".join(of) + "; None: from the head)")
        if "from_id" in claim.params:
            return " from id `from_id` on (None: from the head)"
        return ""

    fair_doc = ("Claims take turns across the values of the key: each walks on from where this "
                "process's last claim stopped.")

    def fair_says(self) -> str:
        """What a fair claim()'s docstring says of its turns."""
        limits = self.q.limits
        if limits is None or limits.weights_table is None:
            return self.fair_doc
        return (self.fair_doc + " A key's turns in each round are its weight in "
                + limits.weights_table.name + ".")

    @staticmethod
    def fair_turns(claim: Statement, name: str = "CLAIM") -> str:
        """The line that finds where this process's claims by statement `name` (a walk over
        the key's values) stopped walking."""
        group = "group" if "group" in claim.params else "None"
        return f"turns = _v.key_turns({name}, {group})"

    # What a limited claim() makes of the rows CLAIM read (ROWS): those the limits leave room for.
    within_limits = "_v.within_limits(ROWS, CONCURRENCY, KEY_CONCURRENCY, RATE, RATE_PER_KEY)"

    def fair_over(self) -> str:
        """What a fair claim() makes of ROWS: its walk's rows, within the limits, `limit` at
        most."""
        weighted = self.q.limits is not None and self.q.limits.weights_table is not None
        walked = "weighted_walk" if weighted else "walked"
        return f"{self.within_limits.replace('ROWS', f'turns.{walked}(ROWS, limit)')}[:limit]"

    def claim_then_mark(self) -> Func:
        """claim() on a CLAIM that reads and locks the rows, then CLAIM_MARK that writes their
        leases (MySQL, which has no UPDATE ... RETURNING; and a limited queue's claim, which
        keeps only the rows its limits leave room for, after CLAIM_TURN where the claim takes
        its turn itself)."""
        st = self.st
        claim = st["CLAIM"]
        marks = [*self.run("", "CLAIM_MARK", self.params(st["CLAIM_MARK"]))]
        if "CLAIM_RECORD" in st:
            marks += self.run("", "CLAIM_RECORD", self.params(st["CLAIM_RECORD"]))
        then = ("if rows:", *("    " + line for line in marks))
        args = self.args(claim, skip=("limit", *WALK_ARGS, *START_ARGS),
                         extra="locked_until: datetime.datetime, limit: int = 1"
                         + self.start_args(claim))
        doc = ("Claim up to `limit` rows" + self.start_says(claim)
               + " under a lease ending at `locked_until`; run it in a transaction and commit.")
        over = ""
        turn: tuple[str, ...] = ()
        if self.q.limits is not None:
            over = self.within_limits
            doc = ("Claim up to `limit` rows" + self.start_says(claim) + ", as many as the "
                   "limits leave room for, under a lease ending at `locked_until`; run it in a "
                   "transaction and commit.")
            if "CLAIM_TURN_END" in st:
                doc += (" Call claim_turn() before the transaction and claim_turn_end() after "
                        "its commit.")
            elif "CLAIM_TURN" in st:
                turn = tuple(self.run("", "CLAIM_TURN", self.params(st["CLAIM_TURN"])))
                doc += " Takes the claim turn first, held until then."
            if "CLAIM_FORGET" in st:
                turn += tuple(self.run("", "CLAIM_FORGET", self.params(st["CLAIM_FORGET"])))
                doc += " Records each claim for the rate, and forgets those of past windows."
            if self.q.limits.fair:
                turn = (self.fair_turns(claim), *turn)
                over = self.fair_over()
                doc += " " + self.fair_says()
        params = self.params(claim)
        limits = self.q.limits
        if limits is not None and limits.key is None and (limits.concurrency or limits.rate):
            # No claim can keep more rows than the queue's limit or the rate: it reads no more
            # (with a key limit, rows it passes over make it read further).
            params = [p if p != '"limit": limit' else
                      '"limit": _v.at_most(limit, CONCURRENCY, RATE)' for p in params]
        name, walk, walk_doc, pick = self.by_priority("CLAIM")
        args += walk
        doc += walk_doc
        run = self.cur(name, params)
        if "CLAIM_BY_KEY" in st:
            by_key = st["CLAIM_BY_KEY"]
            args += ", by_key: bool = False"
            doc += (" With `by_key`, CLAIM_BY_KEY: claims take turns across the values of the "
                    "key, for a table where many due rows wait behind keys at their limit "
                    "(`held_back()`).")
            turn = (self.fair_turns(by_key, "CLAIM_BY_KEY"), *turn)
            run = ("if by_key:", *indented(self.cur("CLAIM_BY_KEY", self.params(by_key))),
                   "else:", *indented(run))
            over = self.within_limits.replace(
                "ROWS", "turns.walked(ROWS, limit) if by_key else ROWS") + "[:limit]"
        return Func("claim", args, "list[ClaimedRow]", doc, (
            Step("many", run, self.claimed("r"), after=then, over=over),), before=(*pick, *turn))

    def by_priority(self, name: str, none: str = "[]") -> tuple[str, str, str, tuple[str, ...]]:
        """Where the table has a twin of claim statement `name` that reads the due rows
        priority by priority: the statement to run, the argument that picks the twin, what the
        docstring says of it and the lines that pick it (`none`: what the function returns
        where no priority has a due row, for a twin that takes the list); else `name` and
        nothing."""
        twin = self.st.get(f"{name}_BY_PRIORITY")
        if twin is None:
            return name, "", "", ()
        pick = (f"statement = {name}_BY_PRIORITY if by_priority else {name}",)
        if "priorities" not in twin.params:
            return ("statement", ", by_priority: bool = False",
                    f" With `by_priority`, {name}_BY_PRIORITY: the due rows read priority by "
                    "priority, for a table holding many rows due later (`scheduled()`).", pick)
        nxt = self.st["NEXT_PRIORITY"]
        args = ", ".join(f"{p}={p}" for p in nxt.params if p != "above")
        return ("statement",
                ", by_priority: bool = False, priorities: Sequence[int] | None = None",
                f" With `by_priority`, {name}_BY_PRIORITY: the due rows of `priorities` alone "
                "(None: those `due_priorities()` lists), so that no row due later is read.",
                (*pick, "if by_priority and priorities is None:",
                 f"    priorities = AWAIT_TWIN due_priorities(conn, {args})",
                 "if by_priority and not priorities:",
                 f"    return {none}  # no priority has a due row"))

    def fifo_head_claim(self) -> Func:
        """Hook: fifo_claim() on FIFO_HEAD, for dialects whose statements have it."""
        raise NotImplementedError

    # Hook: whether a lease claim reads its rows before it writes the lease, so that
    # `_claimed` takes the new expiry instead of the column's old value.
    reads_before_leasing = False

    @property
    def lease_after_read(self) -> bool:
        return (self.reads_before_leasing or self.q.limits is not None) and self.q.lease

    @staticmethod
    def id_cast(t: str, value: str) -> str:
        """The id `value` as its type (the driver hands back Any)."""
        return f"cast({t}, {value})"

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
        twins = self.async_connection_type is not None
        decode = self.decode_payload()
        key = self.advisory_key_expr()
        roles = {f.role: f.name for f in q.fields if f.role}
        d_table = q.dead_letter_table
        ctx: dict[str, object] = {
            "q": q,
            "limits": q.limits,
            "spec_path": q.spec.display,
            "table_name": q.table.name,
            "qualified": qualified,
            "summary": self.summary(),
            "table_literal": (py_str(qualified) if len(qualified) < 80 else
                              f"(\n    {py_str(f'{q.table.schema}.')}\n    "
                              f"{py_str(q.table.name)}\n)"),
            "sections": [([(n, sql_literal(self.st[n].sql), self.st[n].doc) for n in names], f)
                         for names, f in self.sections(funcs)],
            "status_oldest": self.status_oldest(),
            "state_args": self.state_args(),
            "rows": rows,
            "new_rows": new_rows,
            "claimed_args": ", locked_until: datetime.datetime" if self.lease_after_read else "",
            "order_key": ", ".join(f"row.{f.attr}" for f in order) + ("," if len(order) == 1
                                                                         else ""),
            "op_items": [f"{f.name}={f.name}" for f in funcs if f.name in OPERATION_NAMES],
            "async_op_items": [f"{f.name}={f.name}_async" for f in funcs
                               if f.name in OPERATION_NAMES],
            "statement_items": [f"{py_str(s.name)}: {s.name}" for s in self.st.values()],
            "claimed_items": [f"{f.attr}={self.from_db(f, f'r[{i}]')}"
                              for i, f in enumerate(q.fields)],
            "insert_items": [f"{py_str(f.attr)}: {self.to_db(f, 'row.' + f.attr)}"
                             for f in q.insert_fields],
            "signature": signature,
            "docstring": docstring,
            "comment": comment,
            "conn": self.connection_type,
            "async_conn": self.async_connection_type,
            "holder": "_c.ConnectionHolder",
            "async_holder": "_c.AsyncHolder",
            "code": lambda line, is_async, indent: body_line(line, is_async, indent, twins),
            "fill": lambda head, items, close, indent="": "\n".join(
                fill(head, items, close, indent)),
            "items": lambda items: "\n".join(filled(items, "    ")),
            "twins": twins,
            "decode_payload": decode,
            "advisory_key": key,
            "py_str": py_str,
            "roles": [f"{py_str(k)}: {py_str(v)}" for k, v in roles.items()],
            # A tuple of one needs its comma.
            "columns": [py_str(f.name) + ("," if len(q.fields) == 1 else "") for f in q.fields],
            "dead_letter_table": py_str(f"{d_table.schema}.{d_table.name}" if d_table and
                                        d_table.schema else d_table.name) if d_table else "None",
            "dead_letter_group": py_str(q.dead_letter_group) if q.dead_letter_group else "None",
            "codec": py_str(q.codec) if q.codec else "None",
            "rt": q.runtime,
            "lease_form": q.form == LEASE or q.count_crashes,
            "count_crashes": q.count_crashes,
            "error_chars": error_chars(q.role("error")),
            "seats": self.seats(),
        }
        return ctx

    def seats(self) -> str | None:
        """The descriptor's `seats` of a row-lock or advisory table with limits (a lease
        table's claim counts its leases)."""
        limits = self.q.limits
        if limits is None or self.q.form == LEASE:
            return None
        key = next((f.attr for f in self.q.fields
                    if limits.key is not None and f.name == limits.key), None)
        return (f"Seats(concurrency=CONCURRENCY, key={py_str(key) if key else 'None'}, "
                f"key_concurrency=KEY_CONCURRENCY)")

    def sections(self, funcs: list[Func]) -> list[tuple[list[str], Func | None]]:
        """The module's statements, each followed by the function that runs it: (the names of
        the constants written just above the function, the function), in the statements'
        order. A function's own statements (those its steps run) go above it, and so does a
        statement it runs besides them (a guard, a follow-up) unless a later function runs
        that one as its own. The statements no function runs come last."""
        uses = {f.name: self.statements_in(f.lines()) for f in funcs}
        own = {f.name: set(self.statements_in([line for s in f.steps for line in s.run]))
               for f in funcs}
        placed: set[str] = set()
        out: list[tuple[list[str], Func | None]] = []
        for i, f in enumerate(funcs):
            later = {n for g in funcs[i + 1:] for n in own[g.name]}
            here = [n for n in uses[f.name]
                    if n not in placed and (n in own[f.name] or n not in later)]
            placed.update(here)
            out.append((here, f))
        rest = [n for n in self.st if n not in placed]
        if rest:
            out.append((rest, None))
        return out

    def statements_in(self, lines: list[str]) -> list[str]:
        """The statement constants that lines of code name, in the statements' order."""
        code = re.sub(r'"(?:[^"\\]|\\.)*"', '""', "\n".join(lines))  # not inside strings
        named = set(_NAME.findall(code))
        return [n for n in self.st if n in named]

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


# The most of a failure a worker writes down: the type and message, then the frames nearest the
# raise. A column declared shorter keeps less (MySQL's TINYTEXT: 255 bytes, 4 a character).
ERROR_CHARS = 2000
_DECLARED_LENGTH = re.compile(r"\(\s*(\d+)\s*\)")


def error_chars(f: Field | None) -> int | None:
    """What the error column `f` keeps, in characters; None where the table has none."""
    if f is None:
        return None
    declared = _DECLARED_LENGTH.search(f.column.type_sql)
    if declared is not None:
        return min(ERROR_CHARS, int(declared.group(1)))
    if f.column.type_sql.upper().startswith("TINYTEXT"):
        return 255 // 4
    return ERROR_CHARS


def signature(f: Func, conn: str, is_async: bool) -> str:
    """The `def` line of a generated function; when it gets long, its arguments fill the lines
    below it."""
    prefix = "async def" if is_async else "def"
    name = f"{f.name}_async" if is_async else f.name
    args = [f"conn: {conn}"] + ([a.strip() for a in _split_args(f.args)] if f.args else [])
    return "\n".join(fill(f"{prefix} {name}(", args, f") -> {f.returns}:"))


def indented(lines: Sequence[str], levels: int = 1) -> tuple[str, ...]:
    return tuple("    " * levels + line for line in lines)


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


