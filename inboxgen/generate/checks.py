"""The offline checks: a spec against the catalog its migrations build.

`resolve` returns the resolved `Queue` (or None when an error makes one impossible) and every
diagnostic found, so that one run reports all the problems of a spec at once.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3

from inboxgen.errors import Diagnostic
from inboxgen.generate import catalog as cat
from inboxgen.generate.catalog import Catalog, Column, Table
from inboxgen.generate.dialects import ADVISORY, LEASE, ROW_LOCK
from inboxgen.generate.model import ClaimIndex, Field, Limits, Queue, TableRef, attr_name
from inboxgen.generate.spec import FlowLimits, RoleBinding, Spec

_PAUSE_COLUMNS = "columns queue (text, NOT NULL) and paused_group (text, NULL)"
_AFTER_COLUMNS = ("columns job_id and after_id (NOT NULL, of the id's type) and on_failure "
                  "(text, NOT NULL)")

# Which column kinds each role accepts (SQLite keeps its times as TEXT).
_ROLE_KINDS: dict[str, tuple[str, ...]] = {
    "id": (cat.INT, cat.TEXT, cat.UUID),
    "group": (cat.TEXT,),
    "priority": (cat.INT,),
    "attempt": (cat.INT,),
    "retry_after": (cat.TIMESTAMP, cat.TIMESTAMPTZ),
    "processed_at": (cat.TIMESTAMP, cat.TIMESTAMPTZ),
    "locked_until": (cat.TIMESTAMP, cat.TIMESTAMPTZ),
    "headers": (cat.JSON, cat.TEXT),
    "payload": (cat.BYTES, cat.TEXT, cat.JSON),
    "error": (cat.TEXT,),
    "result": (cat.JSON, cat.TEXT),
    "progress": (cat.JSON, cat.TEXT),
    "enqueued_at": (cat.TIMESTAMP, cat.TIMESTAMPTZ),
    "parents": (cat.INT,),
}
_ROLE_WANTS = {
    "id": "an integer, text or uuid",
    "group": "text",
    "priority": "an integer",
    "attempt": "an integer",
    "retry_after": "a timestamp",
    "processed_at": "a timestamp",
    "locked_until": "a timestamp",
    "headers": "json or text",
    "payload": "bytes, text or json",
    "error": "text",
    "result": "json or text",
    "progress": "json or text",
    "enqueued_at": "a timestamp",
    "parents": "an integer",
}
_SQLITE_TIME_ROLES = ("retry_after", "processed_at", "locked_until", "enqueued_at")
# Roles only the runtime writes: nullable, left out of inserts (a new row starts with NULL).
_RUNTIME_ROLES = ("locked_until", "processed_at", "error", "result", "progress")
# The text SQLite time roles hold (inboxgen.values.SQLITE_TIME_FORMAT; fewer fraction digits,
# or none as CURRENT_TIMESTAMP writes, still sort right against it).
_SQLITE_TIME_TEXT = "YYYY-MM-DD HH:MM:SS.ffffff"
_SQLITE_TIME_VALUE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d{1,6})?")
_CODEC_KINDS = {"bytes": (cat.BYTES,), "text": (cat.TEXT,),
                "json": (cat.JSON, cat.TEXT, cat.BYTES)}
_DEFAULT_CODEC = {cat.BYTES: "bytes", cat.TEXT: "text", cat.JSON: "json"}
_KEY_FIELD = re.compile(r"\{([^{}]*)\}")
# Statements that cannot touch any table's columns or indexes, whatever they name: pg_dump's
# session settings, ownership, grants, comments, sequences, function definitions and the like.
# They are passed over without a word.
_NO_TABLE_CHANGE = re.compile(
    r"^\s*(SET|RESET|GRANT|REVOKE|COMMENT\s+ON|SECURITY\s+LABEL|ANALYZE|VACUUM|CHECKPOINT|"
    r"DISCARD|BEGIN|START\s+TRANSACTION|COMMIT|END|ROLLBACK|SAVEPOINT|RELEASE|PRAGMA|USE|"
    r"SELECT\s+pg_catalog\.(set_config|setval)|"
    r"CREATE\s+(OR\s+REPLACE\s+)?(EXTENSION|SCHEMA|SEQUENCE|FUNCTION|PROCEDURE|ROLE|USER|"
    r"COLLATION|AGGREGATE|OPERATOR|TEXT\s+SEARCH|CAST)|"
    r"ALTER\s+(SEQUENCE|FUNCTION|PROCEDURE|SCHEMA|ROLE|USER|EXTENSION|DEFAULT\s+PRIVILEGES|"
    r"DATABASE|AGGREGATE|OPERATOR|COLLATION|TEXT\s+SEARCH)|"
    r"ALTER\s+\w+(\s+\w+)?\s+[\w.\"`]+(\s*\([^)]*\))?\s+OWNER\s+TO)\b",
    re.IGNORECASE | re.DOTALL)
# Statements sqlglot cannot read that still leave a table's columns and indexes as they were.
_HARMLESS = re.compile(
    r"^\s*(ALTER\s+TABLE\s+.*\b(OWNER\s+TO|SET\s+STORAGE|SET\s+STATISTICS|SET\s+COMPRESSION|"
    r"(ENABLE|DISABLE)\s+(ALWAYS\s+|REPLICA\s+)?TRIGGER|REPLICA\s+IDENTITY|SET\s*\(|RESET\s*\(|"
    r"CLUSTER\s+ON|SET\s+(UN)?LOGGED|(ENABLE|DISABLE|FORCE|NO\s+FORCE)\s+ROW\s+LEVEL\s+SECURITY)"
    r"|(GRANT|REVOKE|COMMENT\s+ON|ANALYZE|VACUUM|CLUSTER|REINDEX|CREATE\s+(OR\s+REPLACE\s+)?"
    r"(TRIGGER|POLICY|RULE|FUNCTION|PROCEDURE)|SECURITY\s+LABEL)\b)",
    re.IGNORECASE | re.DOTALL)


# What in a statement is not code: comments and single-quoted strings (a dollar-quoted body, as
# in DO or CREATE FUNCTION, is code and stays).
_NOT_CODE = re.compile(r"--[^\n]*|/\*.*?\*/|[EeNnXxBb]?'(?:[^']|'')*'", re.DOTALL)


def _names(name: str, text: str) -> bool:
    return re.search(r"(?<![\w$])" + re.escape(name) + r"(?![\w$])", text,
                     re.IGNORECASE) is not None


def _snippet(text: str, width: int = 80) -> str:
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    return flat[:width].rsplit(" ", 1)[0] + " ..."


class _Checker:
    def __init__(self, spec: Spec, catalog: Catalog) -> None:
        self.spec = spec
        self.catalog = catalog
        self.d = spec.dialect
        self.found: list[Diagnostic] = list(catalog.diagnostics)
        # The roles the spec binds, found in the table or not: a role whose column is missing
        # is reported once, not again by every check that needs the role.
        self.declared = {b.role for b in spec.bindings}

    def err(self, line: int, message: str, path: str | None = None) -> None:
        self.found.append(Diagnostic(path or self.spec.display, line, message))

    def warn(self, line: int, message: str, path: str | None = None) -> None:
        self.found.append(Diagnostic(path or self.spec.display, line, message, "warning"))

    # -----------------------------------------------------------------------------------------

    def run(self) -> Queue | None:
        spec = self.spec
        self.opaque_statements()
        table = self.catalog.table(spec.schema, spec.table)
        tname = f'"{spec.schema}.{spec.table}"' if spec.schema else f'"{spec.table}"'
        if table is None:
            known = ", ".join(sorted(t.name for t in self.catalog.tables)) or "none"
            dropped = self.catalog.dropped_at(spec.schema, spec.table)
            how = (f"is dropped by the DDL ({dropped[0]}:{dropped[1]})" if dropped else
                   f"is not created by the DDL ({self.ddl_names()})")
            self.err(spec.line("table"), f"table {tname} {how}; tables there: {known}")
            self.bound_roles()  # report the spec's own role mistakes too
            return None
        for part, what in ((table.schema, "schema"), (table.name, "table")):
            if part:
                self.check_identifier(part, spec.line("table"), what)
        if table.partitioned and not self.d.partitions:
            self.err(spec.line("table"), f"table {tname} is partitioned ({table.path}:"
                                         f"{table.line}, PARTITION BY), but SQLite has no "
                                         f"partitioned tables: it refuses that CREATE TABLE")
        roles = self.bind_roles(table)
        self.time_roles_agree(table, roles)
        form = self.claim_form(roles)
        self.result_kept(roles)
        self.progress_leased(roles, form)
        fields = self.fields(table, roles)
        payload = roles.get("payload")
        codec = self.codec(payload) if payload else None
        key = self.advisory_key(form, fields)
        dead_table = self.dead_letter(table, roles)
        pause_table = self.pauses(table, "group" in roles)
        after_table = self.after(table, roles, form)
        limits = self.limits(table, roles, form)
        unique = self.unique(table, fields)
        # Roles whose column is missing were reported; the index advice would be off by them.
        claim_index, suggested = (self.indexes(table, roles, form)
                                  if self.declared <= roles.keys() else (None, None))
        if any(d.severity == "error" for d in self.found):
            return None
        self.table_settings(table)  # advice for a table that builds
        return Queue(
            spec=spec, dialect=self.d, table=TableRef(table.schema, table.name), form=form,
            fifo=spec.fifo, count_crashes=self.counts_crashes(form, roles), fields=tuple(fields),
            codec=codec,
            payload_type=next((b.type for b in spec.bindings if b.role == "payload"), None),
            result_type=next((b.type for b in spec.bindings if b.role == "result"), None),
            advisory_key=key, dead_letter_group=spec.dead_letter_group,
            dead_letter_table=dead_table, unique=unique, runtime=spec.runtime,
            claim_index=claim_index, suggested_index=suggested, pause_table=pause_table,
            limits=limits, partitioned=table.partitioned, after_table=after_table,
            numbers_inserts=any(c.auto and not c.db_only for c in table.columns),
        )

    def ddl_names(self) -> str:
        return ", ".join(self.spec.ddl_shown)

    def opaque_statements(self) -> None:
        """Statements the catalog could not replay. One that can touch a queue table blocks the
        build until a person reviews it and lists it in the spec's `reviewed`."""
        names = [self.spec.table]
        if self.spec.dead_letter_table:
            names.append(self.spec.dead_letter_table.partition(".")[2] or
                         self.spec.dead_letter_table)
        pending = list(self.spec.reviewed)
        for op in self.catalog.opaque:
            snippet = _snippet(op.text)
            # SQL run as text is code, its strings included: it can change any table.
            runs = next((n for n in names if _names(n, op.runs)), None)
            if _NO_TABLE_CHANGE.match(op.text) and runs is None:
                continue
            code = _NOT_CODE.sub(" ", cat.body_as_code(op.text))
            hit = next((n for n in names if _names(n, code)), None)
            in_string = next((n for n in names if _names(n, op.text)), None)
            reviewed = next((r for r in pending if r.line == op.line and op.path in r.files),
                            None)
            if reviewed is not None:
                pending.remove(reviewed)
            elif runs is not None:
                self.err(op.line, f"statement {op.runs_how} queue table \"{runs}\"; inboxgen "
                                  f"cannot replay that SQL, so its effect on the table is unknown "
                                  f"(once checked, add \"{op.path}:{op.line}\" to the spec's "
                                  f"reviewed list): {snippet}", op.path)
            elif hit is not None and _HARMLESS.search(op.text):
                self.warn(op.line, f"statement ignored: it cannot change the columns or indexes "
                                   f"of queue table \"{hit}\": {snippet}", op.path)
            elif hit is not None:
                self.err(op.line, f"statement names queue table \"{hit}\" but was not replayed: "
                                  f"{op.reason}; its effect on the table is unknown (once "
                                  f"checked, add \"{op.path}:{op.line}\" to the spec's "
                                  f"reviewed list): {snippet}", op.path)
            elif in_string is not None:
                self.warn(op.line, f"statement ignored: {op.reason}; it names queue table "
                                   f"\"{in_string}\" only inside a string: {snippet}", op.path)
            else:
                self.warn(op.line, f"statement ignored: {op.reason}: {snippet}", op.path)
        for r in pending:
            self.warn(self.spec.line("reviewed"), f"reviewed entry \"{r.text}\" names no "
                                                  f"statement that needs a review: remove it")

    def bound_roles(self) -> dict[str, RoleBinding]:
        seen: dict[str, RoleBinding] = {}
        for b in self.spec.bindings:
            if b.role in seen:
                first = seen[b.role]
                self.err(b.line, f"role \"{b.role}\" is bound twice: to column \"{first.column}\""
                                 f" (line {first.line}) and to column \"{b.column}\"")
                continue
            seen[b.role] = b
        if "id" not in seen:
            self.err(self.spec.line("columns"), f"no column of table \"{self.spec.table}\" has "
                                                f"role \"id\": every settlement targets a row by "
                                                f"its id, so one is required")
        return seen

    def bind_roles(self, table: Table) -> dict[str, tuple[RoleBinding, Column]]:
        out: dict[str, tuple[RoleBinding, Column]] = {}
        for role, b in self.bound_roles().items():
            col = table.column(b.column, self.d)
            if col is None:
                gone = table.gone_column(b.column, self.d)
                if gone is not None:
                    path, line, what = gone
                    self.err(b.line, f"column \"{table.name}.{b.column}\" (role {role}) is "
                                     f"{what} by the DDL ({path}:{line})")
                    continue
                names = ", ".join(c.name for c in table.columns)
                self.err(b.line, f"table \"{table.name}\" has no column \"{b.column}\" "
                                 f"(role {role}); its columns: {names}")
                continue
            self.check_identifier(col.name, b.line, "column")
            if not self.check_writable(table, b, col):
                continue  # its type and nullability are beside the point
            self.check_type(table, b, col)
            self.check_sqlite_time_default(table, b, col)
            self.check_nullability(table, b, col)
            if b.generated and not (col.has_default or col.auto):
                if self.integer_key_without_rowid(table, col):
                    self.err(b.line, f"column \"{table.name}.{col.name}\" (role {role}) is "
                                     f"marked generated, but table {table.name} is WITHOUT ROWID "
                                     f"({table.path}:{table.line}), and there SQLite does not "
                                     f"fill an INTEGER PRIMARY KEY: drop generated and give the "
                                     f"{role} in NewRow, or drop WITHOUT ROWID")
                else:
                    self.err(b.line, f"column \"{table.name}.{col.name}\" (role {role}) is "
                                     f"marked generated, but the DDL ({col.path}:{col.line}) "
                                     f"gives it no default, identity or autoincrement")
            out[role] = (b, col)
        return out

    def integer_key_without_rowid(self, table: Table, col: Column) -> bool:
        """The one-column integer primary key of a SQLite WITHOUT ROWID table: an ordinary
        column there, where a rowid table's would alias the rowid."""
        return (table.without_rowid and col.kind == cat.INT and len(table.primary_key) == 1
                and self.d.same_name(table.primary_key[0], col.name))

    def check_writable(self, table: Table, b: RoleBinding, col: Column) -> bool:
        """Only the database writes a computed or GENERATED ALWAYS identity column: the id may
        be one (the insert leaves it out); any other role is written by enqueue or settlement."""
        if not col.db_only or b.role == "id":
            return True
        self.err(b.line, f"column \"{table.name}.{col.name}\" (role {b.role}) is written only "
                         f"by the database (computed or GENERATED ALWAYS, {col.path}:{col.line}), "
                         f"but inboxgen writes role {b.role}: bind it to a plain column")
        return False

    def check_sqlite_time_default(self, table: Table, b: RoleBinding, col: Column) -> None:
        """SQLite compares the time roles as text: a default in another format (ISO's `T` and
        `Z`, epoch numbers) sorts wrong against the worker's `now`, and rows stay unclaimable.
        The default is evaluated on an empty in-memory database to see what it gives, at a fixed
        'now' so that the message is the same at every build."""
        if not self.d.times_as_text or b.role not in _SQLITE_TIME_ROLES or not col.default_sql:
            return
        where = f"column \"{table.name}.{col.name}\" (role {b.role}, {col.path}:{col.line})"
        try:
            with contextlib.closing(sqlite3.connect(":memory:")) as db:
                sql = re.sub(r"'now'", "'2030-01-02 03:04:05.678'", col.default_sql,
                             flags=re.IGNORECASE)
                value = db.execute(f"SELECT {sql}").fetchone()[0]
        except sqlite3.Error:
            self.warn(b.line, f"{where}: inboxgen cannot evaluate its DEFAULT "
                              f"{col.default_sql} to check that it gives {_SQLITE_TIME_TEXT} "
                              f"text")
            return
        if not (isinstance(value, str) and _SQLITE_TIME_VALUE.fullmatch(value)):
            self.err(b.line, f"{where} defaults to {col.default_sql}, which gives {value!r}, "
                             f"not UTC text as {_SQLITE_TIME_TEXT}: the text comparison with "
                             f"the worker's time would be wrong; use DEFAULT "
                             f"(strftime('%Y-%m-%d %H:%M:%f', 'now'))")

    def check_type(self, table: Table, b: RoleBinding, col: Column) -> None:
        allowed = _ROLE_KINDS[b.role]
        wants = _ROLE_WANTS[b.role]
        if self.d.times_as_text and b.role in _SQLITE_TIME_ROLES:
            allowed, wants = (cat.TEXT,), "TEXT (SQLite keeps times as fixed-format UTC text)"
        if col.kind not in allowed:
            self.err(b.line, f"column \"{table.name}.{col.name}\" is {col.type_sql} "
                             f"({col.path}:{col.line}), but role {b.role} needs {wants}")

    def check_nullability(self, table: Table, b: RoleBinding, col: Column) -> None:
        where = f"column \"{table.name}.{col.name}\" ({col.path}:{col.line})"
        if b.role in _RUNTIME_ROLES and not col.nullable:
            meaning = {"locked_until": "not leased", "processed_at": "not processed",
                       "error": "no failure recorded", "result": "no result",
                       "progress": "none reported"}[b.role]
            self.err(b.line, f"{where} is NOT NULL, but role {b.role} must be nullable "
                             f"(NULL means {meaning})")
        if b.role in ("retry_after", "id", "attempt", "priority", "group",
                      "enqueued_at", "parents") and col.nullable:
            self.err(b.line, f"{where} is nullable, but role {b.role} must be NOT NULL")
        if b.role == "parents" and not col.has_default:
            self.err(b.line, f"{where} has no DEFAULT, but role parents is left out of every "
                             f"insert but insert_after()'s: give it DEFAULT 0")
        if b.role == "enqueued_at" and not col.has_default:
            self.err(b.line, f"{where} has no DEFAULT, but role enqueued_at is filled by the "
                             f"database when a row is inserted: give it one, such as "
                             f"{self.d.now_default}")

    def time_roles_agree(self, table: Table, roles: dict[str, tuple[RoleBinding, Column]]
                         ) -> None:
        """`now` is bound once per statement, so the time roles must share one type: a
        TIMESTAMPTZ compared with a TIMESTAMP is read in the session's time zone."""
        if not self.d.time_types_must_match:
            return
        timed = [(b, c) for r, (b, c) in roles.items()
                 if r in ("retry_after", "processed_at", "locked_until", "enqueued_at")
                 and c.kind in (cat.TIMESTAMP, cat.TIMESTAMPTZ)]
        kinds = {c.kind for _, c in timed}
        if len(kinds) > 1:
            first_b, first = timed[0]
            for b, c in timed[1:]:
                if c.kind != first.kind:
                    self.err(b.line, f"column \"{table.name}.{c.name}\" is {c.type_sql} but "
                                     f"\"{table.name}.{first.name}\" ({first_b.role}) is "
                                     f"{first.type_sql}: the time roles must share one type")
                    break

    def check_identifier(self, name: str, line: int, what: str) -> None:
        bad = self.d.placeholder_chars(name)
        if bad:
            self.err(line, f"{what} name \"{name}\" holds {bad!r}, which {self.d.driver} reads as "
                           f"a placeholder even inside quotes: rename the {what}")
        if self.d.identifier_too_long(name):
            unit = "bytes" if self.d.limit_in_bytes else "characters"
            self.err(line, f"{what} name \"{name}\" is longer than {self.d.name} allows "
                           f"({self.d.max_identifier} {unit})")

    def result_kept(self, roles: dict[str, tuple[RoleBinding, Column]]) -> None:
        """A result is written by the ack that marks the row processed: a table that deletes
        its finished rows has nowhere to keep one."""
        if "result" in roles and "processed_at" not in roles:
            b, col = roles["result"]
            self.err(b.line, f"column \"{self.spec.table}.{col.name}\" has role result, which "
                             f"needs a processed_at column: a result is kept on the finished "
                             f"row, and this table deletes finished rows")

    def progress_leased(self, roles: dict[str, tuple[RoleBinding, Column]], form: str) -> None:
        """Progress travels with the lease's renewals: no other form renews anything."""
        if "progress" in roles and form != LEASE:
            b, col = roles["progress"]
            self.err(b.line, f"column \"{self.spec.table}.{col.name}\" has role progress, which "
                             f"is written with the lease's renewals: it needs the lease form "
                             f"(a locked_until column), but claim = \"{form}\"")

    def claim_form(self, roles: dict[str, tuple[RoleBinding, Column]]) -> str:
        spec = self.spec
        line = spec.line("claim")
        form = spec.claim
        if form is None:
            form = (LEASE if "locked_until" in self.declared else
                    ADVISORY if spec.advisory_key else ROW_LOCK)
            if form == ROW_LOCK and ROW_LOCK not in self.d.forms:
                self.err(spec.line("dialect"), f"{self.d.name} has no row lock, so the table "
                         "needs a claim form: bind a locked_until column (lease) or set "
                         "claim = \"advisory\" with an advisory_key")
                return form
        if form not in self.d.forms:
            self.err(line, f"claim form {form} does not exist on {self.d.name} (it has: "
                           f"{', '.join(self.d.forms)})")
        if form == LEASE and "locked_until" not in self.declared:
            self.err(line, "claim = \"lease\" needs a column with role locked_until")
        if form != LEASE and "locked_until" in roles:
            b, col = roles["locked_until"]
            self.err(b.line, f"column \"{spec.table}.{col.name}\" has role locked_until, which "
                             f"makes the claim a lease, but claim = \"{form}\"")
        if form == ADVISORY and not spec.advisory_key:
            self.err(line, "claim = \"advisory\" needs advisory_key, a template naming "
                           "columns such as \"jobs-{id}\"")
        if form != ADVISORY and spec.advisory_key:
            self.err(spec.line("advisory_key"), f"advisory_key is only used by claim = "
                                                f"\"advisory\", but the claim form is {form}")
        if spec.fifo and "group" not in self.declared:
            self.err(spec.line("fifo"), f"fifo = true needs a column of table \"{spec.table}\" "
                                        f"with role group")
        if spec.fifo and form == ADVISORY:
            self.err(spec.line("fifo"), "fifo = true cannot be combined with the advisory "
                                        "claim form (FIFO needs row lock or lease)")
        if spec.count_crashes is False and form != ROW_LOCK:
            self.err(spec.line("count_crashes"), f"count_crashes = false is for the row lock "
                                                 f"form; the {form} form counts every claim, so "
                                                 f"a crash always spends its attempt")
        if spec.count_crashes:
            line = spec.line("count_crashes")
            if form != ROW_LOCK:
                self.err(line, f"count_crashes = true is for the row lock form; the {form} "
                               f"form counts every claim already")
            elif "attempt" not in self.declared:
                self.err(line, f"count_crashes = true needs a column of table "
                               f"\"{spec.table}\" with role attempt")
            elif spec.fifo:
                self.err(line, "count_crashes = true cannot be combined with fifo = true")
        self.server_version(form)
        return form

    def counts_crashes(self, form: str, roles: dict[str, tuple[RoleBinding, Column]]) -> bool:
        """Whether the row lock claim counts the attempt in a transaction of its own. Unless
        the spec says, it does wherever there are attempts to spend (max_attempts with an
        attempt column): otherwise a job that kills its worker rolls its delivery back and
        comes back at the head of the queue for ever, stopping it."""
        if self.spec.count_crashes is not None:
            return self.spec.count_crashes
        return (form == ROW_LOCK and not self.spec.fifo and "attempt" in roles
                and self.spec.runtime.max_attempts is not None)

    def server_version(self, form: str) -> None:
        v = self.spec.server_version
        if v is None:
            return
        line = self.spec.line("server_version")
        hashing = ("the advisory claim form needs" if form == ADVISORY else
                   "FIFO groups need" if self.spec.fifo else "")
        problem = self.d.too_old(v, hashing)
        if problem is not None:
            self.err(line, problem)

    def fields(self, table: Table,
               roles: dict[str, tuple[RoleBinding, Column]]) -> list[Field]:
        by_column = {col.name: b for b, col in roles.values()}
        fields: list[Field] = []
        attrs_seen: dict[str, str] = {}
        for col in table.columns:
            b = by_column.get(col.name)
            role = b.role if b else None
            if role in _RUNTIME_ROLES:
                generated = True  # the runtime owns them; a new row starts with NULL
            elif role == "enqueued_at":
                generated = True  # the column's default: the database's time of the insert
            elif role == "parents":
                generated = True  # 0, the column's default; insert_after() writes the count
            elif b is not None:
                generated = b.generated or col.db_only
            else:
                generated = col.auto
            if b is None and self.d.placeholder_chars(col.name):
                self.err(col.line, f"column name \"{col.name}\" of table \"{table.name}\" holds "
                                   f"'%', which {self.d.driver} reads as a placeholder even inside "
                                   f"quotes: rename the column", col.path)
            attr = attr_name(col.name)
            if attr in attrs_seen:
                self.err(col.line, f"columns \"{attrs_seen[attr]}\" and \"{col.name}\" of "
                                   f"table \"{table.name}\" map to the same Python name "
                                   f"\"{attr}\"", col.path)
            attrs_seen[attr] = col.name
            fields.append(Field(col, attr, role, generated))
        return fields

    def codec(self, payload: tuple[RoleBinding, Column]) -> str | None:
        b, col = payload
        codec = b.codec or _DEFAULT_CODEC.get(col.kind)
        if codec is None:
            return None
        if col.kind not in _CODEC_KINDS[codec]:
            self.err(b.line, f"codec {codec} does not fit payload column \"{col.name}\" of type "
                             f"{col.type_sql} ({col.path}:{col.line})")
        if b.type is not None and codec != "json":
            self.err(b.line, f"column \"{self.spec.table}.{col.name}\" (role payload): payload "
                             f"type {b.type} needs codec json, not {codec}")
        return codec

    def advisory_key(self, form: str, fields: list[Field]) -> tuple[tuple[str, str], ...]:
        template = self.spec.advisory_key
        if form != ADVISORY or not template:
            return ()
        line = self.spec.line("advisory_key")
        pieces: list[tuple[str, str]] = []
        pos = 0
        for m in _KEY_FIELD.finditer(template):
            name = m.group(1)
            field = next((f for f in fields if self.d.same_name(f.name, name)), None)
            if field is None:
                self.err(line, f"advisory_key \"{template}\" names column \"{name}\", which "
                               f"table \"{self.spec.table}\" does not have")
                continue
            pieces.append((template[pos:m.start()], field.attr))
            pos = m.end()
        if not _KEY_FIELD.search(template):
            self.err(line, f"advisory_key \"{template}\" names no column: every job would "
                           f"share one lock (write it like \"jobs-{{id}}\")")
        if pos < len(template):
            pieces.append((template[pos:], ""))
        return tuple(pieces)

    def dead_letter(self, table: Table,
                    roles: dict[str, tuple[RoleBinding, Column]]) -> TableRef | None:
        spec = self.spec
        has_dest = spec.dead_letter_group is not None or spec.dead_letter_table is not None
        if spec.runtime.max_attempts is not None and not has_dest:
            self.err(spec.line("runtime", "max_attempts"),
                     "runtime.max_attempts is set but [dead_letter] is missing: say where spent "
                     "jobs go (group = \"...\" or table = \"...\")")
        if has_dest and spec.runtime.max_attempts is None:
            self.err(spec.line("dead_letter"), "[dead_letter] is set but runtime.max_attempts "
                                               "is missing: say after how many attempts")
        if spec.dead_letter_group is not None and "group" not in self.declared:
            self.err(spec.line("dead_letter", "group"),
                     "dead_letter.group needs a column with role group; without one, dead "
                     "letters go to a table (dead_letter.table)")
        if spec.runtime.max_attempts is not None and "attempt" not in self.declared:
            self.err(spec.line("runtime", "max_attempts"),
                     f"runtime.max_attempts needs a column of table \"{spec.table}\" with role "
                     f"attempt, to count the deliveries")
        if spec.dead_letter_table is None:
            return None
        line = spec.line("dead_letter", "table")
        # "schema.table", split like the spec's own table name: at the first dot.
        dl = spec.dead_letter_table
        schema, _, name = dl.partition(".") if "." in dl else ("", "", dl)
        dest = self.catalog.table(schema or None, name)
        if dest is not None and dest is table:
            self.err(line, f"dead-letter table \"{dest.name}\" is the queue table itself: spent "
                           f"jobs would be claimed again; name another table")
            return None
        if dest is None:
            self.err(line, f"dead-letter table \"{spec.dead_letter_table}\" is not created by "
                           f"the DDL ({self.ddl_names()})")
            return None
        self.check_identifier(dest.name, line, "table")
        missing = [c.name for c in table.columns if dest.column(c.name, self.d) is None]
        if missing:
            self.err(line, f"dead-letter table \"{dest.name}\" lacks column(s) "
                           f"{', '.join(missing)} of table \"{table.name}\"")
        for c in table.columns:
            other = dest.column(c.name, self.d)
            if other is not None and other.db_only:
                self.err(line, f"dead-letter table \"{dest.name}\" has column \"{other.name}\" "
                               f"written only by the database (computed or GENERATED ALWAYS, "
                               f"{other.path}:{other.line}), but a dead letter copies "
                               f"\"{table.name}.{c.name}\" into it: make it a plain column")
            elif other is not None and other.kind != c.kind:
                self.err(line, f"dead-letter table \"{dest.name}\" has column \"{other.name}\" "
                               f"as {other.type_sql}, but \"{table.name}.{c.name}\" is "
                               f"{c.type_sql}")
        return TableRef(dest.schema, dest.name)

    def pauses(self, table: Table, grouped: bool) -> TableRef | None:
        """[flow] pauses: the table whose rows pause the queue (`queue` holds the queue's name,
        `paused_group` NULL) or one group of it (`paused_group` holds the group). The claims
        read it; pause() and resume() write it, with these two columns alone."""
        name = self.spec.pause_table
        if name is None:
            return None
        line = self.spec.line("flow", "pauses")
        pauses = self.side_table(name, line, "pause", _PAUSE_COLUMNS, table)
        if pauses is None:
            return None
        wanted = {"queue": False, "paused_group": True}
        if not grouped:
            wanted.pop("paused_group")  # a table without groups pauses as a whole
        for column, nullable in wanted.items():
            col = pauses.column(column, self.d)
            how = "NOT NULL" if not nullable else "NULL"
            if col is None:
                self.err(line, f"pause table \"{pauses.name}\" lacks column \"{column}\" "
                               f"(text, {how}): it needs {_PAUSE_COLUMNS}")
            elif col.kind != cat.TEXT or col.db_only:
                self.err(line, f"pause table \"{pauses.name}\" has column \"{col.name}\" as "
                               f"{col.type_sql} ({col.path}:{col.line}); it must be a plain "
                               f"text column")
            elif col.nullable != nullable:
                self.err(line, f"pause table \"{pauses.name}\" has column \"{col.name}\" "
                               f"{'NOT NULL' if nullable else 'nullable'} ({col.path}:"
                               f"{col.line}); it must be {how}: "
                               + ("NULL pauses the whole queue" if nullable else
                                  "each row names its queue"))
        self.writes_alone(pauses, "pause", list(wanted), "pause()", line)
        return TableRef(pauses.schema, pauses.name)

    def after(self, table: Table, roles: dict[str, tuple[RoleBinding, Column]], form: str
              ) -> TableRef | None:
        """`after`: the table whose rows say which jobs a job waits for (`job_id`, the job;
        `after_id`, a job it waits for; `on_failure`, what becomes of it if that one fails).
        The jobs table counts them in its `parents` column, so a claim looks at the table only
        for the rows that wait; a failure must be told from an ack, so dead letters go
        somewhere."""
        name, spec = self.spec.after_table, self.spec
        if name is None:
            if "parents" in roles:
                b, col = roles["parents"]
                self.err(b.line, f"column \"{table.name}.{col.name}\" has role parents, which "
                                 f"counts the jobs a job waits for: name the table that lists "
                                 f"them with the spec's `after` key, or drop the role")
            return None
        line = spec.line("after")
        if "parents" not in roles:
            if "parents" not in self.declared:
                self.err(line, f"`after` needs a column with role parents in table "
                               f"\"{table.name}\" (an integer NOT NULL DEFAULT 0: how many jobs "
                               f"a job waits for), so a claim reads the `after` table only for "
                               f"the rows that wait")
            return None
        if spec.dead_letter_group is None and spec.dead_letter_table is None:
            self.err(line, "`after` needs [dead_letter] and runtime.max_attempts: a job waiting "
                           "for one that failed is told so by the dead letters (without them "
                           "a job that fails is retried for ever)")
            return None
        if form == ADVISORY or spec.fifo:
            how = "the advisory form" if form == ADVISORY else "FIFO tables"
            self.err(line, f"`after` is not built for {how}: use a lease or a row lock")
            return None
        found = self.side_table(name, line, "after", _AFTER_COLUMNS, table)
        if found is None:
            return None
        _, id_col = roles["id"]
        for column in ("job_id", "after_id", "on_failure"):
            edge = found.column(column, self.d)
            kind = cat.TEXT if column == "on_failure" else id_col.kind
            if edge is None:
                self.err(line, f"after table \"{found.name}\" lacks column \"{column}\": it "
                               f"needs {_AFTER_COLUMNS}")
            elif edge.kind != kind or edge.db_only or edge.nullable:
                like = "text" if column == "on_failure" else f"as id \"{id_col.name}\""
                self.err(line, f"after table \"{found.name}\" has column \"{edge.name}\" as "
                               f"{edge.type_sql}{'' if not edge.nullable else ' NULL'} "
                               f"({edge.path}:{edge.line}); it must be a plain NOT NULL "
                               f"column, {like}")
        self.writes_alone(found, "after", ["job_id", "after_id", "on_failure"],
                          "insert_after()", line)
        if not any(ix.columns and self.d.same_name(ix.columns[0], "job_id")
                   for ix in self.catalog.indexes_of(found)):
            self.warn(line, f"after table \"{found.name}\" has no index that starts with "
                            f"job_id: every claim of a waiting job reads the whole table; "
                            f"make (job_id, after_id) its primary key")
        return TableRef(found.schema, found.name)

    def limits(self, table: Table, roles: dict[str, tuple[RoleBinding, Column]], form: str
               ) -> Limits | None:
        """[flow] concurrency, key_concurrency, rate and fair. A lease table's claim counts the
        jobs in work by their leases; a row-lock or advisory table holds them by seats (session
        locks), which keep `concurrency`, and on the advisory form `key_concurrency` too. Not on
        FIFO tables, which already run one job of a group at a time. The key is a NOT NULL
        column compared with `=`."""
        given = self.spec.limits
        if given is None:
            return None
        counted = (given.concurrency is not None or given.key_concurrency is not None
                   or given.rate is not None)
        first = ("concurrency" if given.concurrency is not None else
                 "key" if counted else "fair" if given.fair else "rate")
        line = self.spec.line("flow", first)
        form_name = form.replace("_", " ")
        if form != LEASE and given.rate is not None:
            self.err(self.spec.line("flow", "rate"),
                     f"[flow] rate needs the lease form (a locked_until role): a rate is kept "
                     f"by claims that take turns and record each claim, and the {form_name} "
                     f"form claims without turns")
            return None
        if form == ROW_LOCK and given.key_concurrency is not None:
            self.err(self.spec.line("flow", "key_concurrency"),
                     "[flow] key_concurrency needs the lease or advisory form: a row lock "
                     "claims its rows in one statement, which cannot pass over a key whose "
                     "seats are all held (concurrency, per queue, works with a row lock)")
            return None
        if form != LEASE and given.fair:
            self.err(self.spec.line("flow", "fair"),
                     f"[flow] fair needs the lease form (a locked_until role): a fair claim "
                     f"walks the keys under the claim turn and holds what it takes by a lease, "
                     f"where the {form_name} form holds it in an open transaction or session")
            return None
        if self.spec.fifo:
            self.err(line, f"[flow] {first} is not built for FIFO tables (each group already "
                           f"runs one job at a time): remove it or fifo")
            return None
        key = None
        if given.key is not None:
            kline = self.spec.line("flow", "key")
            col = table.column(given.key, self.d)
            if col is None:
                known = ", ".join(c.name for c in table.columns)
                self.err(kline, f"[flow] key \"{given.key}\" is not a column of table "
                                f"\"{table.name}\" (columns: {known})")
                return None
            if col.nullable:
                self.err(kline, f"[flow] key \"{col.name}\" of table \"{table.name}\" allows "
                                f"NULL ({col.path}:{col.line}): a row without a key would run "
                                f"outside every limit; make it NOT NULL")
                return None
            if col.kind in (cat.JSON, cat.BYTES):
                self.err(kline, f"[flow] key \"{col.name}\" of table \"{table.name}\" is "
                                f"{col.type_sql} ({col.path}:{col.line}); a key is compared "
                                f"with =: use a text, number or UUID column")
                return None
            self.check_identifier(col.name, kline, "column")
            key = col
        if form != LEASE:  # seats: session locks, read through no index
            return Limits(given.concurrency, key.name if key is not None else None,
                          given.key_concurrency)
        in_work_index = self.limit_indexes(table, roles["locked_until"][1].name, given)
        if key is not None and (given.fair or given.key_concurrency is not None):
            self.walk_index(table, roles, key.name, given.fair)
        rate_table = (self.rate_table(given.rate_table, table,
                                      key if given.rate_per_key else None)
                      if given.rate_table is not None else None)
        if given.rate_table is not None and rate_table is None:
            return None
        weights = (self.weights_table(given.weights_table, table, key)
                   if given.weights_table is not None and key is not None else None)
        if given.weights_table is not None and weights is None:
            return None
        return Limits(given.concurrency, key.name if key is not None else None,
                      given.key_concurrency, given.rate, given.rate_seconds, rate_table,
                      given.rate_per_key, given.fair, weights, in_work_index)

    def side_table(self, name: str, line: int, what: str, needs: str, queue: Table
                   ) -> Table | None:
        """The table a [flow] key names beside the queue table (a pause or rate table), or
        None, reported, where the DDL has none of that name or it is the queue table."""
        schema, _, bare = name.partition(".") if "." in name else ("", "", name)
        found = self.catalog.table(schema or None, bare)
        if found is None:
            self.err(line, f"{what} table \"{name}\" is not created by the DDL "
                           f"({self.ddl_names()}); create it with {needs}")
            return None
        if found is queue:
            self.err(line, f"{what} table \"{name}\" is the queue table itself: name a table "
                           f"of its own, with {needs}")
            return None
        self.check_identifier(found.name, line, "table")
        return found

    def writes_alone(self, found: Table, what: str, written: list[str], writer: str,
                     line: int) -> None:
        """Every other column of a side table `writer` fills with `written` alone needs a
        default or NULL."""
        names = " and ".join(filter(None, (", ".join(written[:-1]), written[-1])))
        for col in found.columns:
            if col.name.lower() in written or col.nullable or col.has_default or col.auto:
                continue
            self.err(line, f"{what} table \"{found.name}\" has column \"{col.name}\" NOT NULL "
                           f"without a default ({col.path}:{col.line}); {writer} writes {names} "
                           f"alone: give it a default or allow NULL")

    def rate_table(self, name: str, table: Table, key: Column | None) -> TableRef | None:
        """[flow] rate_table: the table each claim of a rate-limited queue records its claims
        in (`queue`, the queue's name; `claimed_at`, the database's time; with `key`, a rate
        per key, `claim_key`, the row's key), read to count the claims of the window."""
        line = self.spec.line("flow", "rate_table")
        time_type = {"postgres": "TIMESTAMPTZ", "mysql": "DATETIME(6)", "sqlite": "TEXT"}
        wanted_sql = (f"columns queue (text, NOT NULL), claimed_at "
                      f"({time_type[self.d.name]}, NOT NULL)"
                      + (f" and claim_key ({key.type_sql}, NOT NULL, as key \"{key.name}\")"
                         if key is not None else ""))
        found = self.side_table(name, line, "rate", wanted_sql, table)
        if found is None:
            return None
        kinds = {"postgres": {cat.TIMESTAMPTZ}, "mysql": {cat.TIMESTAMP, cat.TIMESTAMPTZ},
                 "sqlite": {cat.TEXT}}[self.d.name]
        wanted = [("queue", {cat.TEXT}), ("claimed_at", kinds)]
        if key is not None:
            wanted.append(("claim_key", {key.kind}))
        self.side_columns(found, "rate", wanted, wanted_sql, line)
        written = [name for name, _ in wanted]
        self.writes_alone(found, "rate", written, "a claim", line)
        if not any(i.columns and i.columns[0].lower() == "queue"
                   for i in self.catalog.indexes_of(found)):
            self.warn(line, f"no index of rate table \"{found.name}\" starts with queue: every "
                            f"claim counts the window's claims by reading the whole table; "
                            f"create an index on \"{found.name}\" "
                            f"({', '.join(['queue', *written[2:], 'claimed_at'])})")
        return TableRef(found.schema, found.name)

    def side_columns(self, found: Table, what: str, wanted: list[tuple[str, set[str]]],
                     wanted_sql: str, line: int) -> bool:
        """Whether side table `found` (a rate or weights table) has each column of `wanted`
        (a name and the kinds it may be), NOT NULL; reports each one that is not so."""
        ok = True
        for column, kinds in wanted:
            col = found.column(column, self.d)
            if col is None:
                self.err(line, f"{what} table \"{found.name}\" lacks column \"{column}\": it "
                               f"needs {wanted_sql}")
            elif col.kind not in kinds or col.db_only:
                self.err(line, f"{what} table \"{found.name}\" has column \"{col.name}\" as "
                               f"{col.type_sql} ({col.path}:{col.line}); it needs {wanted_sql}")
            elif col.nullable:
                self.err(line, f"{what} table \"{found.name}\" has column \"{col.name}\" "
                               f"nullable ({col.path}:{col.line}); it must be NOT NULL")
            else:
                continue
            ok = False
        return ok

    def weights_table(self, name: str, table: Table, key: Column) -> TableRef | None:
        """[flow] weights_table: each key's weight in a fair claim (`queue`, the queue's name;
        `fair_key`, a value of the key; `weight`, its turns in a round), read as the claim
        walks each key."""
        line = self.spec.line("flow", "weights_table")
        wanted_sql = (f"columns queue (text, NOT NULL), fair_key ({key.type_sql}, NOT NULL, as "
                      f"key \"{key.name}\") and weight (an integer, NOT NULL)")
        found = self.side_table(name, line, "weights", wanted_sql, table)
        if found is None:
            return None
        wanted = [("queue", {cat.TEXT}), ("fair_key", {key.kind}), ("weight", {cat.INT})]
        if not self.side_columns(found, "weights", wanted, wanted_sql, line):
            return None
        if not any(leads([c.lower() for c in i.columns], ["queue", "fair_key"])
                   for i in self.catalog.indexes_of(found)):
            self.warn(line, f"no index of weights table \"{found.name}\" starts with queue, "
                            f"fair_key: every claim reads the whole table for each key it "
                            f"walks; make (queue, fair_key) its primary key")
        return TableRef(found.schema, found.name)

    def limit_indexes(self, table: Table, lease: str, given: FlowLimits) -> str | None:
        """Each claim counts the jobs in work through the live leases, through the indexes
        counted_through names: one that starts with the lease column (the queue's count, and
        the keys at their limit), one that starts with the key and the lease column (a key's
        count: one on the key alone reads all of a key's rows, for each of its rows the claim
        returns). Returns the name of the first, where the table has one."""
        indexes = self.catalog.indexes_of(table)
        lease_alone = ("the jobs in work" if given.key_concurrency is None else
                       "the keys at their limit" if given.concurrency is None else
                       "the jobs in work and the keys at their limit")
        missing = []
        for columns in counted_through(given, lease):
            if any(leads(i.columns, columns) and not i.partial for i in indexes):
                continue
            if len(columns) == 1:
                name = "concurrency" if given.concurrency is not None else "key_concurrency"
                how = f"finds {lease_alone} by reading the whole table"
            else:
                name, how = "key", "counts a key's jobs in work by reading all of that key's rows"
            missing.append((self.spec.line("flow", name), ", ".join(columns), how))
        for line, cols, how in sorted(missing):
            self.warn(line, f"no index of table \"{table.name}\" starts with {cols}: every claim "
                            f"{how}; create an index on \"{table.name}\" ({cols})")
        return next((i.name for i in indexes
                     if i.name and leads(i.columns, [lease]) and not i.partial), None)

    def walk_index(self, table: Table, roles: dict[str, tuple[RoleBinding, Column]],
                   key: str, fair: bool) -> None:
        """A claim that walks the key's values (every [flow] fair claim; a key-limited one
        where rows of keys at their limit stand ahead) reads each value's first due rows in
        claim order: an index on the group (where there is one), the key and the claim order
        finds each with one probe. One on the key alone (or the key and the lease, as the
        limits' counts use) reads all of a value's rows to find its first."""
        lead = [roles[r][1].name for r in ("group",) if r in roles] + [key]
        wanted = lead + [roles[r][1].name for r in ("priority", "retry_after", "id")
                         if r in roles]
        if any(leads(i.columns, wanted) for i in self.catalog.indexes_of(table)):
            return
        when = ("each claim walks the values of {} and reads" if fair else
                "where rows of a key at its limit stand ahead, claims walk the values of {} and "
                "read").format(key)
        self.warn(self.spec.line("flow", "fair" if fair else "key_concurrency"),
                  f"no index of table \"{table.name}\" starts with {', '.join(wanted)}: "
                  f"{when} the first due rows of each by reading all of its rows; create an "
                  f"index on \"{table.name}\" ({', '.join(wanted)})")

    def unique(self, table: Table, fields: list[Field]) -> tuple[Field, ...]:
        out: list[Field] = []
        named_ok = True  # every name a column a key can hold (else the index advice is off)
        for name in self.spec.unique:
            f = next((f for f in fields if self.d.same_name(f.name, name)), None)
            if f is None:
                named_ok = False
                self.err(self.spec.line("unique"), f"unique key names column \"{name}\", which "
                                                   f"table \"{table.name}\" does not have")
            elif f.role == "id" and f.generated:
                named_ok = False
                self.err(self.spec.line("unique"),
                         f"unique key names column \"{name}\", the id the database gives each "
                         f"new row: no insert ever conflicts on it (on a partitioned table, "
                         f"partition it by the key's columns to make them unique)")
            else:
                out.append(f)
        if out and named_ok:
            cols = [f.name for f in out]
            if not any(i.unique and not i.partial and sorted(i.columns) == sorted(cols)
                       for i in self.catalog.indexes_of(table)):
                self.err(self.spec.line("unique"),
                         f"unique key ({', '.join(cols)}) has no unique index on table "
                         f"\"{table.name}\": the insert's conflict clause needs one")
        return tuple(out)

    def indexes(self, table: Table, roles: dict[str, tuple[RoleBinding, Column]], form: str
                ) -> tuple[str | None, ClaimIndex | None]:
        """Warn about indexes. Returns the name of the index that serves the claim (MySQL
        claims name it, see statements/mysql.py), or None, and the claim index the build asks
        for."""
        order = [roles[r][1].name for r in ("group", "priority", "retry_after", "id")
                 if r in roles]
        if not order:
            return None, None
        finished = roles["processed_at"][1].name if "processed_at" in roles else None
        if not self.d.partial_indexes and form == LEASE and self.spec.fifo:
            # A MySQL FIFO lease claim waits for its group's head (FOR UPDATE) through the index
            # it names, and finishing a row moves the row's entry in an index keyed by
            # processed_at: the two deadlock, and InnoDB may roll the finish back. There the
            # claim order over every row stays.
            finished = None
        wanted = ClaimIndex(TableRef(table.schema, table.name), tuple(order), finished,
                            "group" in roles)
        indexes = self.catalog.indexes_of(table)
        serving = [i for i in indexes if wanted.served_by(self.d, i.columns, i.where_null)]
        if not serving:
            cost = ("; claims will scan" if wanted.finished is None else
                    " over unfinished rows only; claims walk every finished row")
            self.warn(self.spec.line("table"),
                      f"no index serves the claim order ({', '.join(order)}) of table "
                      f"\"{table.name}\"{cost}: "
                      f"{wanted.ddl(self.d, self.catalog.names_in_use(table))}")
        lease = roles.get("locked_until")
        if lease is not None and self.d.indexed_updates_cost:
            # The indexes the limits count jobs in work through (limit_indexes) are worth it.
            asked = counted_through(self.spec.limits, lease[1].name)
            for i in indexes:
                counts = any(leads(i.columns, columns) for columns in asked)
                if any(lease[1].name.lower() in c.lower() for c in i.columns) and not counts:
                    self.warn(i.line, f"index {i.name or '(unnamed)'} on \"{table.name}\" "
                                      f"mentions {lease[1].name}: every lease renewal becomes a "
                                      f"non-HOT update", i.path)
        # Without the index asked for, a MySQL claim still reads one in the claim order (over
        # finished rows too) rather than sorting, which would lock every due row it examines.
        ordered = [i for i in indexes if wanted.ordered_by(i.columns)]
        for index in serving or ordered:
            if index.name:
                return index.name, wanted
            if index.columns == table.primary_key and index is indexes[0]:
                return "PRIMARY", wanted
        return None, wanted

    def table_settings(self, table: Table) -> None:
        """PostgreSQL: a queue table's rows are updated (claims, lease renewals, retries) and
        deleted or finished all day. The defaults fill pages to the brim, so an update's new
        version lands on another page (not HOT: every index gets an entry), and vacuum waits
        until a fifth of the table is dead, which on a table that keeps finished rows is a
        great many. See docs/operations.md."""
        if not self.d.table_settings:
            return
        wanted: tuple[tuple[str, str], ...] = QUEUE_SETTINGS
        v = self.spec.server_version
        if v is not None and v < (13,):  # no insert-driven vacuum before PostgreSQL 13
            wanted = tuple((k, x) for k, x in wanted if "insert" not in k)
        n = self.d.advice_name

        def alter(schema: str | None, name: str, settings: dict[str, str]) -> str | None:
            missing = ", ".join(f"{k} = {x}" for k, x in wanted if k not in settings)
            shown = f"{n(schema)}.{n(name)}" if schema else n(name)
            return f"ALTER TABLE {shown} SET ({missing})" if missing else None

        why = ("made for tables that change little: claim and lease updates find no room on "
               "their page to stay HOT, and dead rows wait until a fifth of the table is dead")
        if not table.partitioned:
            advice = alter(table.schema, table.name, table.settings)
            if advice is not None:
                self.warn(self.spec.line("table"),
                          f"table \"{table.name}\" keeps PostgreSQL's default storage "
                          f"settings, {why}: {advice}")
            return
        # A partitioned table holds no rows and takes no storage parameters (PostgreSQL refuses
        # them); the partitions that hold its rows take them, each its own.
        leaves = table.leaf_partitions()
        if not leaves:
            pairs = ", ".join(f"{k} = {x}" for k, x in wanted)
            self.warn(self.spec.line("table"),
                      f"table \"{table.name}\" is partitioned and the DDL gives it no partition "
                      f"to hold its rows yet: each partition keeps PostgreSQL's default storage "
                      f"settings, {why}, unless it is made with them (a partitioned table "
                      f"takes none): create each partition WITH ({pairs})")
            return
        statements = [a for a in (alter(p.schema, p.name, p.settings) for p in leaves)
                      if a is not None]
        if statements:
            self.warn(self.spec.line("table"),
                      f"partitions of table \"{table.name}\" keep PostgreSQL's default storage "
                      f"settings, {why}; a partitioned table takes none, so they go on each "
                      f"partition (and on partitions made later): {'; '.join(statements)}")


# A queue table's storage parameters (PostgreSQL), as the build suggests them: room on each
# page for a new version of every row on it (half full: a claim that writes each row once, a
# lease's or a counted row lock's, stays HOT however fast a backlog's pages drain; at 70% a
# counted drain's claims were 45% HOT), and vacuum after a fixed number of dead (or inserted)
# rows, whatever the size of the table. docs/operations.md says why.
QUEUE_SETTINGS = (("fillfactor", "50"), ("autovacuum_vacuum_scale_factor", "0"),
                  ("autovacuum_vacuum_threshold", "5000"),
                  ("autovacuum_vacuum_insert_scale_factor", "0"))


def resolve(spec: Spec, catalog: Catalog) -> tuple[Queue | None, list[Diagnostic]]:
    checker = _Checker(spec, catalog)
    queue = checker.run()
    return queue, checker.found


def leads(index: list[str] | tuple[str, ...], columns: list[str]) -> bool:
    """Whether an index's columns start with `columns` (names compared as the catalog holds
    them, case aside)."""
    return [c.lower() for c in index[:len(columns)]] == [c.lower() for c in columns]


def counted_through(limits: FlowLimits | None, lease: str) -> list[list[str]]:
    """The leading columns of the indexes a limited lease claim counts the jobs in work through:
    the lease column (the queue's, and the keys at their limit) and the key with it (a key's)."""
    if limits is None:
        return []
    out = []
    if limits.concurrency is not None or limits.key_concurrency is not None:
        out.append([lease])
    if limits.key is not None and limits.key_concurrency is not None:
        out.append([limits.key, lease])
    return out
