"""The schema as the service's migrations leave it: tables, columns and indexes.

Migrations are split into statements with sqlglot's tokenizer (so quotes, comments and dollar
quoting are respected), parsed one statement at a time, and replayed in order. A statement that
sqlglot cannot parse, or only understands as an opaque command, is kept in `Catalog.opaque` with
its file and line: the checks decide whether it matters (it names a queue table) or is a warning.
"""

from __future__ import annotations

import gc
import os
import re
import signal
import threading
import time
import types
from collections.abc import Iterable
from pathlib import Path

import attrs
import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, SqlglotError, TokenError
from sqlglot.tokenizer_core import TokenType

from inboxgen.errors import Diagnostic
from inboxgen.generate.dialects import Dialect

# Broad kinds of column type, the vocabulary the role checks and the renderer speak.
INT, BOOL, TEXT, BYTES, JSON, TIMESTAMP, TIMESTAMPTZ, FLOAT, DECIMAL, DATE, TIME, UUID, OTHER = (
    "int",
    "bool",
    "text",
    "bytes",
    "json",
    "timestamp",
    "timestamptz",
    "float",
    "decimal",
    "date",
    "time",
    "uuid",
    "other",
)

_T = exp.DataType.Type
_KINDS: dict[object, str] = {}
for _kind, _types in {
    INT: (
        "TINYINT SMALLINT MEDIUMINT INT BIGINT UTINYINT USMALLINT UMEDIUMINT UINT UBIGINT "
        "SERIAL SMALLSERIAL BIGSERIAL"
    ),
    BOOL: "BOOLEAN",
    TEXT: "TEXT VARCHAR CHAR NCHAR NVARCHAR TINYTEXT MEDIUMTEXT LONGTEXT NAME CITEXT BPCHAR",
    BYTES: "VARBINARY BINARY BLOB TINYBLOB MEDIUMBLOB LONGBLOB",
    JSON: "JSON JSONB",
    TIMESTAMP: "TIMESTAMP DATETIME DATETIME64 TIMESTAMPNTZ",
    TIMESTAMPTZ: "TIMESTAMPTZ TIMESTAMPLTZ",
    FLOAT: "FLOAT DOUBLE",
    DECIMAL: "DECIMAL MONEY",
    DATE: "DATE",
    TIME: "TIME TIMETZ",
    UUID: "UUID",
}.items():
    for _name in _types.split():
        if hasattr(_T, _name):
            _KINDS[getattr(_T, _name)] = _kind

_SERIALS = {_T.SERIAL, _T.SMALLSERIAL, _T.BIGSERIAL}


@attrs.define
class Column:
    name: str
    type_sql: str  # the type as the dialect spells it, for messages
    kind: str
    nullable: bool
    has_default: bool
    # The database fills it: identity, serial, AUTO_INCREMENT, SQLite rowid alias, computed.
    auto: bool
    path: str
    line: int
    # Only the database may write it: a computed column, or GENERATED ALWAYS AS IDENTITY.
    db_only: bool = False
    default_sql: str | None = None  # the DEFAULT expression, in the dialect's spelling


@attrs.define
class Index:
    name: str | None
    schema: str | None
    table: str
    columns: list[str]  # column names; an expression is kept as its SQL text
    unique: bool
    partial: bool
    path: str
    line: int
    # A partial index whose WHERE is exactly `<column> IS NULL`: that column (the claim index
    # over unfinished rows has `processed_at IS NULL`); None for any other predicate or none.
    where_null: str | None = None


@attrs.define
class Partition:
    """A partition made by `CREATE TABLE p PARTITION OF t ...` (PostgreSQL): a table of its own
    that holds some of t's rows, with t's columns and indexes. Storage parameters go on it, not
    on t, which takes none."""

    schema: str | None
    name: str
    path: str
    line: int
    # PARTITION BY: partitioned again, its rows are in its own partitions.
    partitioned: bool = False
    settings: dict[str, str] = attrs.field(factory=dict)
    partitions: list[Partition] = attrs.field(factory=list)


@attrs.define
class Table:
    schema: str | None
    name: str
    columns: list[Column]
    primary_key: list[str]
    path: str
    line: int
    # Columns a migration renamed away or dropped: name -> (path, line, what happened).
    gone: dict[str, tuple[str, int, str]] = attrs.field(factory=dict)
    # SQLite's WITHOUT ROWID: no rowid, so no INTEGER PRIMARY KEY that SQLite fills.
    without_rowid: bool = False
    # PostgreSQL storage parameters set by CREATE TABLE ... WITH (...) or ALTER TABLE ... SET
    # (...): lower-case name -> value as written.
    settings: dict[str, str] = attrs.field(factory=dict)
    # PARTITION BY: the rows are in the partitions (PostgreSQL: CREATE TABLE ... PARTITION OF;
    # MySQL/MariaDB: the partitions the clause itself defines).
    partitioned: bool = False
    partitions: list[Partition] = attrs.field(factory=list)

    def leaf_partitions(self) -> list[Partition]:
        """The partitions that hold rows (not partitioned again), at every level, in the order
        the DDL made them under each parent."""
        found: list[Partition] = []
        todo = list(reversed(self.partitions))
        while todo:
            part = todo.pop()
            if part.partitioned:
                todo.extend(reversed(part.partitions))
            else:
                found.append(part)
        return found

    def column(self, name: str, dialect: Dialect) -> Column | None:
        for col in self.columns:
            if dialect.same_name(col.name, name):
                return col
        return None

    def gone_column(self, name: str, dialect: Dialect) -> tuple[str, int, str] | None:
        """Where the column of that name was last renamed away or dropped, if it was."""
        return next((where for old, where in self.gone.items()
                     if dialect.same_name(old, name)), None)


@attrs.define
class Opaque:
    """A statement the catalog could not replay: sqlglot failed or left it opaque, or it runs
    SQL given as text."""

    path: str
    line: int
    text: str
    reason: str
    # The SQL it runs given as text, as far as it can be seen (see `_runs`): strings and all,
    # since a string handed to EXECUTE is code. Empty when it runs none.
    runs: str = ""
    # How it runs it, as messages say it: "runs SQL given as text (EXECUTE) that names".
    runs_how: str = ""


@attrs.define
class Catalog:
    dialect: Dialect
    tables: list[Table] = attrs.field(factory=list)
    indexes: list[Index] = attrs.field(factory=list)
    opaque: list[Opaque] = attrs.field(factory=list)
    diagnostics: list[Diagnostic] = attrs.field(factory=list)
    # Tables a later migration dropped: (schema, name) as written -> (path, line) of the DROP.
    dropped: dict[tuple[str | None, str], tuple[str, int]] = attrs.field(factory=dict)
    # What statements run as text: MySQL user variables (name -> the SET that gave the text)
    # and the functions and procedures whose bodies run text (lower-case names).
    variables: dict[str, str] = attrs.field(factory=dict)
    text_runners: set[str] = attrs.field(factory=set)

    def dropped_at(self, schema: str | None, name: str) -> tuple[str, int] | None:
        for (s, n), where in self.dropped.items():
            if self.dialect.same_name(n, name) and _same_schema(self.dialect, s, schema):
                return where
        return None

    def table(self, schema: str | None, name: str) -> Table | None:
        d = self.dialect
        for t in self.tables:
            if d.same_name(t.name, name) and _same_schema(d, t.schema, schema):
                return t
        return None

    def partition(self, schema: str | None, name: str) -> tuple[Partition, list[Partition]] | None:
        """The partition of that name, and the list of its parent's partitions it is in."""
        d = self.dialect
        todo: list[list[Partition]] = [t.partitions for t in self.tables]
        while todo:
            siblings = todo.pop()
            for part in siblings:
                if d.same_name(part.name, name) and _same_schema(d, part.schema, schema):
                    return part, siblings
                todo.append(part.partitions)
        return None

    def names_in_use(self, table: Table) -> list[str]:
        """The names a new index of `table` cannot take: the table's own index names where the
        dialect names indexes within their table (MySQL/MariaDB); else every table, partition
        and index name of the table's schema, which share one set of names (PostgreSQL,
        SQLite)."""
        d = self.dialect
        if d.index_names_per_table:
            return [i.name for i in self.indexes_of(table) if i.name]
        names = [i.name for i in self.indexes
                 if i.name and _same_schema(d, i.schema, table.schema)]
        todo: list[list[Partition]] = []
        for t in self.tables:
            if _same_schema(d, t.schema, table.schema):
                names.append(t.name)
            todo.append(t.partitions)
        while todo:
            for part in todo.pop():
                if _same_schema(d, part.schema, table.schema):
                    names.append(part.name)
                todo.append(part.partitions)
        return names

    def indexes_of(self, table: Table) -> list[Index]:
        d = self.dialect
        found = [
            i
            for i in self.indexes
            if d.same_name(i.table, table.name) and _same_schema(d, i.schema, table.schema)
        ]
        if table.primary_key:
            pk = Index(None, table.schema, table.name, list(table.primary_key), True, False,
                       table.path, table.line)
            found.insert(0, pk)
        return found


def _same_schema(d: Dialect, a: str | None, b: str | None) -> bool:
    default = d.default_schema
    return (a or default) == (b or default) if not d.case_insensitive else (
        (a or "").lower() == (b or "").lower()
    )


# ---------------------------------------------------------------------------------------------
# Reading migration files

_DOWN_MARKERS = re.compile(
    r"^\s*--\s*(\+goose\s+down|migrate:down|\+migrate\s+down)\b|^\s*----\s*create above",
    re.IGNORECASE,
)
_UP_MARKERS = re.compile(r"^\s*--\s*(\+goose\s+up|migrate:up|\+migrate\s+up)\b", re.IGNORECASE)


def strip_down_sections(text: str) -> str:
    """Blank out down-migration sections (goose, dbmate, sql-migrate, tern), keeping lines."""
    out: list[str] = []
    down = False
    for line in text.splitlines(keepends=True):
        if _UP_MARKERS.match(line):
            down = False
        elif _DOWN_MARKERS.match(line):
            down = True
        out.append("\n" if down and line.endswith("\n") else ("" if down else line))
    return "".join(out)


def migration_files(sources: Iterable[Path],
                    unlisted: list[tuple[Path, str]] | None = None) -> list[Path]:
    """Files in replay order; a folder gives its migrations in natural order (V2 before V10).

    A folder's migrations are its `.sql` files (in any case) and its subfolders, one migration
    per subfolder as Prisma (`<timestamp>_<name>/migration.sql`) and Diesel lay them out: each
    gives its own `.sql` files, in natural order. Down migrations (`*.down.sql`, `down.sql`) and
    names starting with a dot are left out. A folder that cannot be listed is added to
    `unlisted` with the reason, when given.
    """
    files: list[Path] = []
    for src in sources:
        if not _is_dir(src):
            files.append(src)
            continue
        for entry in _migrations_in(src, unlisted):
            if not _is_dir(entry):
                files.append(entry)
            elif not _inside(src, entry):  # a link back up would replay the folder again
                files.extend(e for e in _migrations_in(entry, unlisted) if not _is_dir(e))
    return files


_DIGITS = re.compile(r"[0-9]+")


def _migrations_in(folder: Path, unlisted: list[tuple[Path, str]] | None) -> list[Path]:
    try:
        entries = [p for p in folder.iterdir() if not p.name.startswith(".")]
    except OSError as err:
        if unlisted is not None:
            unlisted.append((folder, err.strerror or str(err)))
        return []
    found = [p for p in entries if _is_dir(p) or _is_migration(p.name)]
    # Natural order: every run of digits is compared as a number (2 before 10); the name
    # itself breaks ties (01 and 1), so the order never depends on the file system.
    width = max((len(m) for p in found for m in _DIGITS.findall(p.name)), default=0)
    return sorted(found, key=lambda p: (
        _DIGITS.sub(lambda m: m.group().rjust(width, "0"), p.name), p.name))


def _is_migration(name: str) -> bool:
    lower = name.lower()
    return lower.endswith(".sql") and lower != "down.sql" and not lower.endswith(".down.sql")


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):  # a name too long, a path the system refuses
        return False


def _inside(folder: Path, sub: Path) -> bool:
    """Whether `sub` leads back to `folder` or to a folder above it."""
    try:
        target, here = Path(os.path.realpath(sub)), Path(os.path.realpath(folder))
    except (OSError, ValueError):
        return True
    return target == here or target in here.parents


@attrs.frozen
class Statement:
    path: str
    line: int
    text: str


def split_statements(text: str, path: str, dialect: Dialect) -> tuple[list[Statement], str | None]:
    """Split on top-level semicolons; returns the statements and a tokenizer error, if any."""
    text = strip_down_sections(text)
    try:
        tokens = sqlglot.Dialect.get_or_raise(dialect.sqlglot_name).tokenize(text)
    except TokenError as err:
        return [], _first_line(err)
    except RecursionError:
        return [], "nested too deeply"
    except Exception as err:  # any other failure inside sqlglot, reported like the rest
        return [], (f"{type(err).__name__}: {_first_line(err)}" if isinstance(err, SqlglotError)
                    else f"it failed inside sqlglot with {type(err).__name__}")
    statements: list[Statement] = []
    start: int | None = None
    line = 1
    for tok in tokens:
        if tok.token_type == TokenType.SEMICOLON:
            if start is not None:
                statements.append(Statement(path, line, text[start:tok.start]))
            start = None
            continue
        if start is None:
            start, line = tok.start, tok.line
        end = tok.end
    if start is not None:
        statements.append(Statement(path, line, text[start:end + 1]))
    return statements, None


def unclosed_at(text: str) -> tuple[int, str] | None:
    """Where a quoted string, quoted name or comment opens and never closes: (line, what)."""
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if text.startswith("--", i):
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                return text.count("\n", 0, i) + 1, "comment"
            i = end + 2
            continue
        dollar = re.match(r"\$(\w*)\$", text[i:]) if ch == "$" else None
        if dollar:
            tag = dollar.group(0)
            end = text.find(tag, i + len(tag))
            if end < 0:
                return text.count("\n", 0, i) + 1, "dollar-quoted string"
            i = end + len(tag)
            continue
        if ch in "'\"`":
            j = i + 1
            while True:
                j = text.find(ch, j)
                if j < 0:
                    what = "quoted string" if ch == "'" else "quoted name"
                    return text.count("\n", 0, i) + 1, what
                if text.startswith(ch * 2, j):
                    j += 2
                    continue
                break
            i = j + 1
            continue
        i += 1
    return None


def load_catalog(files: Iterable[tuple[str, str | OSError]], dialect: Dialect) -> Catalog:
    """Replay migrations given as (display path, text) pairs, in order. In place of a text, an
    OSError says the file could not be read: an error, and nothing of it is replayed."""
    catalog = Catalog(dialect)
    for path, text in files:
        if isinstance(text, OSError):
            catalog.diagnostics.append(Diagnostic(
                path, 1, f"cannot be read: {text.strerror or text}, so no statement of {path} "
                         f"was replayed"))
            continue
        statements, err = split_statements(text, path, dialect)
        if err is not None:
            where = unclosed_at(strip_down_sections(text))
            line, what = where if where else (1, "")
            lines = text.split("\n")  # numbered as the tokenizer numbers them
            source = lines[line - 1].strip() if line <= len(lines) else ""
            reason = (f"the {what} that starts on this line is never closed" if what
                      else f"sqlglot cannot split it into statements ({err})")
            catalog.diagnostics.append(Diagnostic(
                path, line, f"cannot be read: {reason}, so no statement of {path} was "
                            f"replayed: {source[:80]}"))
            continue
        for st in statements:
            _replay(catalog, st)
    return catalog


def _first_line(err: BaseException) -> str:
    return next(iter(str(err).splitlines()), "") or type(err).__name__


# sqlglot takes exponential time on some nestings (ARRAY[ARRAY[...]] twenty deep takes
# minutes), so each statement gets a time budget: 3 s, and 1 s more per 10 KB of text (sqlglot
# reads some 100 KB a second). It is kept where a timer can interrupt the parse: in the main
# thread, on systems with setitimer.
_PARSE_SECONDS = 3.0
_PARSE_BYTES_PER_SECOND = 10_000


class _TooSlow(BaseException):
    """The parse of one statement ran out of its time budget (the message: the budget).

    A BaseException: the alarm lands wherever the parse happens to be, and sqlglot has
    `except Exception` blocks (Literal.number) that would swallow an Exception, after which the
    parse went on for good."""


def _in_gc_callback(frame: types.FrameType | None) -> bool:
    """Whether `frame` runs inside a garbage collector callback (a test tool's, say), which the
    parse's allocations may trigger: an exception raised there is reported and dropped."""
    callbacks = {getattr(cb, "__code__", None) for cb in gc.callbacks}
    while frame is not None:
        if frame.f_code in callbacks:
            return True
        frame = frame.f_back
    return False


def _parse(text: str, d: Dialect) -> exp.Expr:
    def parse() -> exp.Expr:
        # ErrorLevel.RAISE keeps sqlglot from "recovering" into a half-parsed tree.
        return sqlglot.parse_one(text, read=d.sqlglot_name, error_level=sqlglot.ErrorLevel.RAISE)

    if not hasattr(signal, "setitimer") or threading.current_thread() is not \
            threading.main_thread():
        return parse()
    budget = _PARSE_SECONDS + len(text) / _PARSE_BYTES_PER_SECOND

    def expired(signum: int, frame: types.FrameType | None) -> None:
        if _in_gc_callback(frame):
            return  # it would be swallowed there as unraisable: the next alarm interrupts
        raise _TooSlow(f"{budget:.0f}")

    previous = signal.signal(signal.SIGALRM, expired)
    # Again every 0.2 s once the budget is spent, should one alarm still be swallowed.
    outer, _ = signal.setitimer(signal.ITIMER_REAL, budget, 0.2)
    started = time.monotonic()
    try:
        return parse()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous if previous is not None else signal.SIG_DFL)
        if outer > 0:  # a timer someone else had set keeps running
            signal.setitimer(signal.ITIMER_REAL,
                             max(outer - (time.monotonic() - started), 0.001))


# ---------------------------------------------------------------------------------------------
# Replaying statements


# ---------------------------------------------------------------------------------------------
# SQL run as text: PL/pgSQL's EXECUTE (in a DO block or a function body), MySQL's PREPARE ...
# FROM and EXECUTE IMMEDIATE. The text is code, however it is built (a literal, format(), a
# concatenation, a variable), so the checks read every string of such a statement as code.

_NOT_CODE_OR_STRING = re.compile(r"--[^\n]*|/\*.*?\*/|[EeNnXxBb]?'(?:[^']|'')*'", re.DOTALL)
_BODY = re.compile(r"^\s*(DO|CREATE\s+(OR\s+REPLACE\s+)?(FUNCTION|PROCEDURE))\b", re.IGNORECASE)
_ROUTINE_NAME = re.compile(
    r"^\s*CREATE\s+(?:OR\s+REPLACE\s+)?(?:FUNCTION|PROCEDURE)\s+((?:[\w$]+|\"[^\"]+\")"
    r"(?:\s*\.\s*(?:[\w$]+|\"[^\"]+\"))?)", re.IGNORECASE)
# A DO body or a function body written as an ordinary string literal, not dollar-quoted.
_QUOTED_BODY = re.compile(r"^\s*DO\s+(?:LANGUAGE\s+\w+\s+)?([EeNn]?'(?:[^']|'')*')|"
                          r"\bAS\s+([EeNn]?'(?:[^']|'')*')", re.IGNORECASE)
# EXECUTE of PL/pgSQL, not the EXECUTE FUNCTION of a trigger.
_RUNS_TEXT = re.compile(r"\bEXECUTE\b(?!\s+(FUNCTION|PROCEDURE)\b)|\bPREPARE\s+\S+\s+FROM\b",
                        re.IGNORECASE)
_TEXT_STATEMENT = re.compile(r"^\s*(PREPARE\s+\S+\s+FROM\s+(?P<var>@\w+)?|EXECUTE\s+IMMEDIATE\b)",
                             re.IGNORECASE)
_SET_VARIABLE = re.compile(r"^\s*SET\s+(@\w+)\s*:?=", re.IGNORECASE)
# A RAISE's message is not code, even in a body that runs text.
_RAISE = re.compile(r"\bRAISE\b(?:[^;']|'(?:[^']|'')*')*", re.IGNORECASE)


def _without_comments(text: str) -> str:
    return _NOT_CODE_OR_STRING.sub(lambda m: " " if m.group()[0] in "-/" else m.group(), text)


def body_as_code(text: str) -> str:
    """The statement with its comments removed and a DO or function body given as a string
    literal unquoted: that body is code, as a dollar-quoted one is."""
    text = _without_comments(text)
    if not _BODY.match(text):
        return text
    quoted = _QUOTED_BODY.search(text)
    if quoted is None:
        return text
    group = 1 if quoted.group(1) is not None else 2
    literal = quoted.group(group)
    body = literal[literal.index("'") + 1:-1].replace("''", "'")
    return text[:quoted.start(group)] + body + text[quoted.end(group):]


def _runs(catalog: Catalog, st: Statement) -> tuple[str, str]:
    """The SQL the statement runs as text, strings included ("" when it runs none), and how
    it runs it, as messages say it."""
    text = body_as_code(st.text)
    if _BODY.match(text) and _RUNS_TEXT.search(text):
        name = _ROUTINE_NAME.match(text)
        if name is not None:
            catalog.text_runners.add(_routine_key(name.group(1)))
        how = "EXECUTE" if re.search(r"\bEXECUTE\b", text, re.IGNORECASE) else "PREPARE ... FROM"
        return _RAISE.sub(" ", text), f"runs SQL given as text ({how}) that names"
    prepared = _TEXT_STATEMENT.match(text)
    if prepared is not None:
        var = prepared.group("var")
        how = "EXECUTE IMMEDIATE" if prepared.group().upper().startswith("EXECUTE") else \
            "PREPARE ... FROM"
        return (catalog.variables.get(var.lower(), "") if var else text,
                f"runs SQL given as text ({how}{' ' + var if var else ''}) that names")
    calls = sorted(n for n in catalog.text_runners
                   if re.search(r"(?<![\w$])" + re.escape(n) + r"\s*\(", text, re.IGNORECASE))
    if calls:
        return text, f"calls {calls[0]}(), which runs SQL given as text, naming"
    return "", ""


def _routine_key(name: str) -> str:
    """A function's name as calls are matched against it: without schema, in lower case."""
    return re.split(r"\s*\.\s*", name)[-1].strip('"').lower()


def _replay(catalog: Catalog, st: Statement) -> None:
    """Replay one statement; one that runs SQL as text is kept, as the checks decide."""
    variable = _SET_VARIABLE.match(st.text)
    if variable is not None:
        catalog.variables[variable.group(1).lower()] = _without_comments(st.text)
    before = len(catalog.opaque)
    runs, how = _runs(catalog, st)
    _replay_statement(catalog, st)
    if len(catalog.opaque) > before:
        catalog.opaque[-1].runs, catalog.opaque[-1].runs_how = runs, how
    elif runs:  # parsed, but what it runs was not replayed
        catalog.opaque.append(Opaque(st.path, st.line, st.text, how, runs, how))


def _without_partitioning(text: str, d: Dialect) -> tuple[str, bool]:
    """A MySQL/MariaDB CREATE TABLE without its partition clause, and whether it had one: the
    clause comes last (`... ) ENGINE=InnoDB PARTITION BY KEY (id) PARTITIONS 4`), and sqlglot
    reads a statement holding one only as an opaque command. The clause changes no column or
    index the build checks."""
    if not d.partition_clause_unread or not re.match(r"\s*CREATE\s+TABLE\b", text, re.I):
        return text, False
    try:
        tokens = sqlglot.Dialect.get_or_raise(d.sqlglot_name).tokenize(text)
    except Exception:  # the parse that follows reports it
        return text, False
    depth = 0
    for tok in tokens:
        if tok.token_type == TokenType.L_PAREN:
            depth += 1
        elif tok.token_type == TokenType.R_PAREN:
            depth -= 1
        elif tok.token_type == TokenType.PARTITION_BY and depth == 0:
            return text[:tok.start].rstrip(), True
    return text, False


def _replay_statement(catalog: Catalog, st: Statement) -> None:
    d = catalog.dialect
    text, partitioned = _without_partitioning(st.text, d)
    try:
        tree = _parse(text, d)
    except _TooSlow as slow:
        catalog.opaque.append(Opaque(st.path, st.line, st.text,
                                     f"sqlglot cannot parse it (it gave up after {slow} s)"))
        return
    except ParseError as err:
        first = _first_line(err)
        first = re.sub(r"\. Line \d+, Col: \d+\.?$", "", first)
        first = re.sub(r"<Token token_type: [\w.]+, text: (.*?), line: .*?>", r"'\1'", first)
        catalog.opaque.append(Opaque(st.path, st.line, st.text,
                                     f"sqlglot cannot parse it ({first})"))
        return
    except RecursionError:
        catalog.opaque.append(Opaque(st.path, st.line, st.text,
                                     "sqlglot cannot parse it (nested too deeply)"))
        return
    except Exception as err:  # TokenError, other SqlglotErrors, faults inside sqlglot
        why = (f"{type(err).__name__}: {_first_line(err)}" if isinstance(err, SqlglotError)
               else f"it failed inside sqlglot with {type(err).__name__}")
        catalog.opaque.append(Opaque(st.path, st.line, st.text, f"sqlglot cannot parse it ({why})"))
        return
    if isinstance(tree, exp.Command):
        catalog.opaque.append(Opaque(st.path, st.line, st.text,
                                     "sqlglot reads it only as an opaque command"))
        return
    if isinstance(tree, exp.Create):
        kind = (tree.args.get("kind") or "").upper()
        if kind == "TABLE":
            _create_table(catalog, tree, st, partitioned)
        elif kind == "INDEX":
            _create_index(catalog, tree, st)
    elif isinstance(tree, exp.Alter) and (tree.args.get("kind") or "").upper() == "TABLE":
        _alter_table(catalog, tree, st)
    elif isinstance(tree, exp.Drop):
        _drop(catalog, tree, st)


def _ident(node: exp.Expression | None, d: Dialect) -> str:
    if node is None:
        return ""
    if isinstance(node, exp.Identifier):
        name, quoted = node.this, node.quoted
    elif isinstance(node, (exp.Column, exp.Table)):
        return _ident(node.this, d)
    else:
        return node.sql(dialect=d.sqlglot_name)
    return name.lower() if d.folds_to_lower and not quoted else str(name)


def _table_name(node: exp.Expression, d: Dialect) -> tuple[str | None, str]:
    table = node if isinstance(node, exp.Table) else node.find(exp.Table)
    if table is None:
        return None, ""
    db = table.args.get("db")
    return (_ident(db, d) if db is not None else None), _ident(table.this, d)


def _line_of_word(word: str, st: Statement) -> int:
    pattern = re.compile(r"(?<![\w$])" + re.escape(word) + r"(?![\w$])", re.IGNORECASE)
    lines = st.text.splitlines()
    for offset, text in enumerate(lines):
        if offset == 0 and "(" in text:
            text = text.split("(", 1)[1]
        if pattern.search(text):
            return st.line + offset
    return st.line


def _constraint_kind(cons: exp.Expression) -> exp.Expression | None:
    """What a column constraint says (NOT NULL, DEFAULT, ...). sqlglot lists a few words of a
    column definition (IN / OUT, after a word it read as a type) as constraints of their own,
    without a kind."""
    return cons.args.get("kind") if isinstance(cons, exp.ColumnConstraint) else cons


def _column(cd: exp.ColumnDef, st: Statement, d: Dialect) -> tuple[Column, bool]:
    """The column a definition describes, and whether it declares itself the primary key."""
    name = _ident(cd.this, d)
    dtype = cd.args.get("kind")
    kind = OTHER
    type_sql = "?"
    serial = False
    if isinstance(dtype, exp.DataType):
        kind = _KINDS.get(dtype.this, OTHER)
        type_sql = dtype.sql(dialect=d.sqlglot_name)
        serial = dtype.this in _SERIALS
    # serial types and identity columns are NOT NULL whether or not they are the primary key.
    nullable = not serial
    has_default = serial
    auto = serial
    db_only = False
    default_sql = None
    primary = False
    for cons in cd.constraints:
        k = _constraint_kind(cons)
        if isinstance(k, exp.NotNullColumnConstraint):
            nullable = bool(k.args.get("allow_null"))
        elif isinstance(k, exp.PrimaryKeyColumnConstraint):
            primary = True
            nullable = False
        elif isinstance(k, exp.DefaultColumnConstraint):
            has_default = not isinstance(k.this, exp.Null)
            default_sql = k.this.sql(dialect=d.sqlglot_name) if has_default else None
        elif isinstance(k, exp.GeneratedAsIdentityColumnConstraint):
            auto = has_default = True
            nullable = False
            # GENERATED ALWAYS AS IDENTITY (this=True) refuses a value; BY DEFAULT takes one.
            # An expression in it is a computed column: GENERATED ALWAYS AS (expr) STORED.
            db_only = bool(k.this) or k.args.get("expression") is not None
        elif isinstance(k, exp.ComputedColumnConstraint):
            auto = has_default = db_only = True
        elif isinstance(k, exp.AutoIncrementColumnConstraint):
            auto = has_default = True
    return Column(name, type_sql, kind, nullable, has_default, auto, st.path,
                  _line_of_word(name, st), db_only, default_sql), primary


def _declared_integer(name: str, text: str) -> bool:
    # A single-column primary key declared with the type name exactly INTEGER aliases SQLite's
    # rowid, which SQLite fills; sqlglot normalises INTEGER to INT, so read the source text.
    pattern = r'(^|[\s(,])["`\[]?' + re.escape(name) + r'["`\]]?\s+INTEGER\b(?!\s*\()'
    return re.search(pattern, text, re.IGNORECASE) is not None


def _create_table(catalog: Catalog, tree: exp.Create, st: Statement,
                  partitioned: bool = False) -> None:
    """CREATE TABLE (`partitioned`: its partition clause was read apart, on MySQL/MariaDB)."""
    d = catalog.dialect
    schema_node = tree.this
    props = tree.args.get("properties")
    partition_of = props.find(exp.PartitionedOfProperty) if isinstance(
        props, exp.Expression) else None
    if partition_of is not None:
        # CREATE TABLE p PARTITION OF t: p holds some of t's rows and changes none of t.
        _create_partition(catalog, tree, partition_of, st)
        return
    like = props.find(exp.LikeProperty) if isinstance(props, exp.Expression) else None
    if isinstance(schema_node, exp.Table) and like is not None:
        # MySQL's CREATE TABLE t LIKE source: columns, defaults and AUTO_INCREMENT alike.
        schema_node = exp.Schema(this=schema_node, expressions=[like])
        like.set("expressions", [exp.Property(this="INCLUDING", value=exp.var("ALL"))])
    if not isinstance(schema_node, exp.Schema):
        return  # CREATE TABLE ... AS SELECT: no column list to record
    schema, name = _table_name(schema_node, d)
    catalog.dropped.pop((schema, name), None)
    existing = catalog.table(schema, name)
    if existing is not None:
        if tree.args.get("exists"):
            return
        catalog.tables.remove(existing)
    table = Table(schema, name, [], [], st.path, st.line)
    # Older sqlglot versions read WITHOUT ROWID only as an opaque command: such a table never
    # gets here.
    without_rowid = getattr(exp, "WithoutRowidProperty", None)
    table.without_rowid = (without_rowid is not None and isinstance(props, exp.Expression)
                           and props.find(without_rowid) is not None)
    if d.table_settings:
        table.settings.update(_with_settings(props, d))
    table.partitioned = partitioned or _partitioned(props)
    for item in _table_items(schema_node):
        if isinstance(item, exp.LikeProperty):
            _copy_like(catalog, table, item, st)
        elif isinstance(item, exp.ColumnDef):
            col, primary = _column(item, st, d)
            table.columns.append(col)
            if primary:
                table.primary_key = [col.name]
            if any(isinstance(_constraint_kind(c), exp.UniqueColumnConstraint)
                   for c in item.constraints):
                catalog.indexes.append(Index(None, schema, name, [col.name], True, False,
                                             st.path, col.line))
        elif isinstance(item, exp.PrimaryKey):
            table.primary_key = [_ident(e, d) for e in item.expressions]
            for col in table.columns:
                if any(d.same_name(col.name, k) for k in table.primary_key):
                    col.nullable = False
        elif isinstance(item, exp.IndexColumnConstraint):
            cols = [_index_column(e, d) for e in _index_exprs(item)]
            catalog.indexes.append(Index(_ident(item.this, d) or None, schema, name, cols,
                                         False, False, st.path, st.line))
        elif isinstance(item, exp.UniqueColumnConstraint) and isinstance(item.this, exp.Schema):
            cols = [_ident(e, d) for e in item.this.expressions]
            catalog.indexes.append(Index(None, schema, name, cols, True, False, st.path,
                                         st.line))
    if d.integer_key_is_rowid and len(table.primary_key) == 1 and not table.without_rowid:
        pk = table.column(table.primary_key[0], d)
        if pk is not None and _declared_integer(pk.name, st.text):
            pk.auto = pk.has_default = True
    catalog.tables.append(table)


def _with_settings(props: exp.Expression | None, d: Dialect) -> dict[str, str]:
    """CREATE TABLE ... WITH (fillfactor = 70, ...): sqlglot gives each as a plain Property."""
    found: dict[str, str] = {}
    if not isinstance(props, exp.Properties):
        return found
    for prop in props.expressions:
        if type(prop) is exp.Property and isinstance(prop.this, (exp.Var, exp.Identifier)):
            value = prop.args.get("value")
            found[str(prop.this.name).lower()] = (
                value.sql(dialect=d.sqlglot_name) if isinstance(value, exp.Expression)
                else str(value))
    return found


def _partitioned(props: exp.Expression | None) -> bool:
    """PARTITION BY RANGE/LIST/HASH (...)."""
    return isinstance(props, exp.Expression) and props.find(exp.PartitionedByProperty) is not None


def _create_partition(catalog: Catalog, tree: exp.Create, of: exp.PartitionedOfProperty,
                      st: Statement) -> None:
    """CREATE TABLE p PARTITION OF t: p is recorded under t (a table, or a partition itself)
    with its storage parameters; a parent the catalog does not have is passed over."""
    d = catalog.dialect
    parent_schema, parent_name = _table_name(of.this, d)
    parent: Table | Partition | None = catalog.table(parent_schema, parent_name)
    if parent is None:
        found = catalog.partition(parent_schema, parent_name)
        parent = found[0] if found is not None else None
    if parent is None:
        return
    props = tree.args.get("properties")
    schema, name = _table_name(tree.this, d)
    existing = catalog.partition(schema, name)
    if existing is not None:
        if tree.args.get("exists"):
            return
        existing[1].remove(existing[0])
    parent.partitions.append(Partition(
        schema, name, st.path, st.line, _partitioned(props),
        _with_settings(props, d) if d.table_settings else {}))


def _table_items(schema_node: exp.Schema) -> list[exp.Expression]:
    """The column definitions and constraints, with named constraints unwrapped."""
    items: list[exp.Expression] = []
    for item in schema_node.expressions:
        if isinstance(item, exp.Constraint):
            items.extend(item.expressions)
        else:
            items.append(item)
    return items


def _copy_like(catalog: Catalog, table: Table, like: exp.LikeProperty, st: Statement) -> None:
    """CREATE TABLE t (LIKE source ...): the source's columns (defaults and identity are only
    copied with INCLUDING options, so the copies are plain)."""
    d = catalog.dialect
    schema, name = _table_name(like.this, d)
    source = catalog.table(schema, name)
    if source is None:
        catalog.diagnostics.append(Diagnostic(
            st.path, st.line, f"CREATE TABLE {table.name} (LIKE {name}): table {name} is not "
                              f"created before this statement, so no column was copied",
            "warning"))
        return
    including = " ".join(e.sql() for e in like.expressions).upper()
    if "INDEXES" in including or "ALL" in including:
        table.primary_key = list(source.primary_key)
        for index in catalog.indexes_of(source)[1 if source.primary_key else 0:]:
            catalog.indexes.append(Index(None, table.schema, table.name, list(index.columns),
                                         index.unique, index.partial, st.path, st.line))
    for col in source.columns:
        keep_defaults = "DEFAULTS" in including or "ALL" in including
        keep_identity = "IDENTITY" in including or "ALL" in including
        table.columns.append(Column(
            col.name, col.type_sql, col.kind, col.nullable,
            col.has_default if keep_defaults or keep_identity else False,
            col.auto if keep_identity else False, st.path, st.line))


def _index_column(node: exp.Expression, d: Dialect) -> str:
    """An index part as a column name; MySQL's prefix part `col(191)` indexes `col` too."""
    if isinstance(node, (exp.Column, exp.Identifier)):
        return _ident(node, d)
    prefix = getattr(exp, "ColumnPrefix", None)
    if prefix is not None and isinstance(node, prefix):
        return _ident(node.this, d)
    if (d.prefix_parts_parse_as_calls and isinstance(node, exp.Anonymous)
            and len(node.expressions) == 1 and isinstance(node.expressions[0], exp.Literal)):
        return str(node.this)
    return node.sql(dialect=d.sqlglot_name)


def _index_exprs(item: exp.Expression) -> list[exp.Expression]:
    params = item.args.get("params") or item.args.get("expressions")
    if isinstance(params, exp.IndexParameters):
        cols = params.args.get("columns") or []
    elif isinstance(params, list):
        cols = params
    else:
        cols = item.args.get("expressions") or []
    return [c.this if isinstance(c, exp.Ordered) else c for c in cols]


def _create_index(catalog: Catalog, tree: exp.Create, st: Statement) -> None:
    d = catalog.dialect
    idx = tree.this
    if not isinstance(idx, exp.Index):
        return
    table = idx.args.get("table")
    if table is None:
        return
    schema, tname = _table_name(table, d)
    params = idx.args.get("params")
    cols_nodes = params.args.get("columns") or [] if isinstance(params, exp.IndexParameters) else []
    cols = [_index_column(c.this if isinstance(c, exp.Ordered) else c, d) for c in cols_nodes]
    where = params.args.get("where") if isinstance(params, exp.IndexParameters) else None
    name = _ident(idx.this, d) or None
    if name and any(i.name == name for i in catalog.indexes) and tree.args.get("exists"):
        return
    catalog.indexes.append(Index(name, schema, tname, cols, bool(tree.args.get("unique")),
                                 where is not None, st.path, st.line,
                                 _null_column(where, d) if where is not None else None))


def _null_column(node: exp.Expr, d: Dialect) -> str | None:
    """The column of a predicate that is exactly `<column> IS NULL` (in parentheses or not)."""
    if isinstance(node, exp.Where):
        node = node.this
    while isinstance(node, exp.Paren):
        node = node.this
    if (isinstance(node, exp.Is) and isinstance(node.expression, exp.Null)
            and not node.args.get("negate")  # IS NOT NULL
            and isinstance(node.this, exp.Column) and not node.this.table):
        return _ident(node.this, d)
    return None


def null_column(predicate: str, d: Dialect) -> str | None:
    """`_null_column` of a predicate given as SQL text (as a server reports an index's);
    None when it is any other condition or does not parse."""
    try:
        node = sqlglot.parse_one(predicate, read=d.sqlglot_name,
                                 error_level=sqlglot.ErrorLevel.RAISE)
    except Exception:  # any failure inside sqlglot: not the predicate looked for
        return None
    return _null_column(node, d)


def _alter_table(catalog: Catalog, tree: exp.Alter, st: Statement) -> None:
    d = catalog.dialect
    schema, name = _table_name(tree.this, d)
    table = catalog.table(schema, name)
    partition = catalog.partition(schema, name) if table is None else None
    if partition is not None:
        _alter_partition(catalog, partition[0], tree, st)
        return
    if table is None:
        # The checks decide: an error where it is a queue table, else a warning.
        shown = f"{schema}.{name}" if schema else name
        catalog.opaque.append(Opaque(st.path, st.line, st.text,
                                     f"table {shown} is not created before this statement"))
        return
    for action in tree.args.get("actions") or []:
        if isinstance(action, exp.ColumnDef):
            col, primary = _column(action, st, d)
            if table.column(col.name, d) is None or not action.args.get("exists"):
                _drop_column(table, col.name, d)
                table.columns.append(col)
                table.gone = {k: v for k, v in table.gone.items() if not d.same_name(k, col.name)}
                if primary:
                    table.primary_key = [col.name]
        elif isinstance(action, exp.Drop) and (action.args.get("kind") or "").upper() == "COLUMN":
            for target in action.args.get("tables") or action.expressions:
                gone = _ident(target, d)
                if table.column(gone, d) is not None:
                    table.gone[gone] = (st.path, st.line, "dropped")
                _drop_column(table, gone, d)
        elif isinstance(action, exp.RenameColumn):
            renamed = table.column(_ident(action.this, d), d)
            if renamed is not None:
                old, renamed.name = renamed.name, _ident(action.args.get("to"), d)
                table.gone[old] = (st.path, st.line, f"renamed to {renamed.name}")
                table.gone.pop(renamed.name, None)
                _rename_in_indexes(catalog, table, old, renamed.name)
        elif isinstance(action, exp.AlterRename):
            _, new_name = _table_name(action.this, d)
            for moved in catalog.indexes_of(table)[1 if table.primary_key else 0:]:
                moved.table = new_name
            table.name = new_name
        elif isinstance(action, exp.AlterColumn):
            altered = table.column(_ident(action.this, d), d)
            if altered is None:
                continue
            _alter_column(altered, action, st, d)
        elif isinstance(action, exp.ModifyColumn):
            cd = action.this
            if not isinstance(cd, exp.ColumnDef):
                continue
            old = _ident(action.args.get("rename_from"), d) or _ident(cd.this, d)
            position = next((i for i, c in enumerate(table.columns)
                             if d.same_name(c.name, old)), None)
            new, _ = _column(cd, st, d)
            if position is None:
                table.columns.append(new)
            else:
                table.columns[position] = new
                if not d.same_name(old, new.name):
                    table.gone[old] = (st.path, st.line, f"renamed to {new.name}")
                _rename_in_indexes(catalog, table, old, new.name)
        elif isinstance(action, exp.AddConstraint):
            for pk in action.find_all(exp.PrimaryKey):
                table.primary_key = [_ident(e, d) for e in pk.expressions]
            for unique in action.find_all(exp.UniqueColumnConstraint):
                if isinstance(unique.this, exp.Schema):
                    cols = [_index_column(e, d) for e in unique.this.expressions]
                    catalog.indexes.append(Index(_ident(unique.this.this, d) or None,
                                                 table.schema, table.name, cols, True, False,
                                                 st.path, st.line))
            for index in action.find_all(exp.IndexColumnConstraint):
                cols = [_index_column(e, d) for e in _index_exprs(index)]
                catalog.indexes.append(Index(_ident(index.this, d) or None, table.schema,
                                             table.name, cols, False, False, st.path, st.line))
        elif (settings := _set_settings(action, d)) is not None:
            table.settings.update(settings)
        elif isinstance(action, exp.Drop) and (action.args.get("kind") or "").upper() == "INDEX":
            for target in action.args.get("tables") or action.expressions:
                gone = _ident(target, d)
                catalog.indexes = [i for i in catalog.indexes
                                   if not (i.name and d.same_name(i.name, gone)
                                           and d.same_name(i.table, table.name))]
        else:
            catalog.diagnostics.append(Diagnostic(
                st.path, st.line,
                f"ALTER TABLE {table.name}: an action inboxgen does not replay was ignored: "
                f"{action.sql(dialect=d.sqlglot_name)[:80]}",
                "warning"))


def _set_settings(action: exp.Expression, d: Dialect) -> dict[str, str] | None:
    """ALTER TABLE ... SET (fillfactor = 70, ...): the storage parameters; None for any other
    action."""
    if not (isinstance(action, exp.AlterSet) and d.table_settings and action.expressions
            and all(isinstance(e, exp.EQ) and isinstance(e.this, exp.Column)
                    for e in action.expressions)):
        return None
    return {str(e.this.name).lower(): e.expression.sql(dialect=d.sqlglot_name)
            for e in action.expressions}


def _alter_partition(catalog: Catalog, part: Partition, tree: exp.Alter, st: Statement) -> None:
    """ALTER TABLE on a partition: its storage parameters and its name are replayed; its
    columns and indexes are its parent's."""
    d = catalog.dialect
    for action in tree.args.get("actions") or []:
        settings = _set_settings(action, d)
        if settings is not None:
            part.settings.update(settings)
        elif isinstance(action, exp.AlterRename):
            _, part.name = _table_name(action.this, d)
        else:
            catalog.diagnostics.append(Diagnostic(
                st.path, st.line,
                f"ALTER TABLE {part.name}: an action inboxgen does not replay was ignored: "
                f"{action.sql(dialect=d.sqlglot_name)[:80]}",
                "warning"))


def _alter_column(col: Column, action: exp.AlterColumn, st: Statement, d: Dialect) -> None:
    dtype = action.args.get("dtype")
    if isinstance(dtype, exp.DataType):
        col.kind = _KINDS.get(dtype.this, OTHER)
        col.type_sql = dtype.sql(dialect=d.sqlglot_name)
        col.path, col.line = st.path, st.line  # messages point at the last change
    if action.args.get("allow_null") is not None:
        col.nullable = bool(action.args.get("allow_null"))
        col.path, col.line = st.path, st.line
    elif action.args.get("drop"):
        col.has_default = col.auto
        col.default_sql = None
    default = action.args.get("default")
    if default is not None:
        col.has_default = True
        col.default_sql = default.sql(dialect=d.sqlglot_name)


def _rename_in_indexes(catalog: Catalog, table: Table, old: str, new: str) -> None:
    """The server renames a column inside the indexes (and the primary key) that name it."""
    d = catalog.dialect
    for index in catalog.indexes_of(table):
        index.columns = [new if d.same_name(c, old) else c for c in index.columns]
    table.primary_key = [new if d.same_name(c, old) else c for c in table.primary_key]


def _drop_column(table: Table, name: str, d: Dialect) -> None:
    table.columns = [c for c in table.columns if not d.same_name(c.name, name)]


def _drop(catalog: Catalog, tree: exp.Drop, st: Statement) -> None:
    d = catalog.dialect
    kind = (tree.args.get("kind") or "").upper()
    for target in tree.args.get("tables") or tree.expressions:
        schema, name = _table_name(target, d)
        if kind == "TABLE":
            table = catalog.table(schema, name)
            partition = catalog.partition(schema, name) if table is None else None
            if partition is not None:
                partition[1].remove(partition[0])
            if table is not None:
                catalog.tables.remove(table)
                catalog.dropped[(table.schema, table.name)] = (st.path, st.line)
                catalog.indexes = [
                    i for i in catalog.indexes
                    if not (d.same_name(i.table, table.name)
                            and _same_schema(d, i.schema, table.schema))
                ]
        elif kind == "INDEX":
            catalog.indexes = [i for i in catalog.indexes if not (i.name and
                                                                   d.same_name(i.name, name))]
