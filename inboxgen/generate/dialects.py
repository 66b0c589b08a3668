"""What differs between PostgreSQL, MySQL/MariaDB and SQLite: quoting, placeholders, limits."""

from __future__ import annotations

import re
from collections.abc import Callable

import attrs

from inboxgen import floors
from inboxgen.descriptor import PLACEHOLDERS

ROW_LOCK = "row_lock"
LEASE = "lease"
ADVISORY = "advisory"
FORMS = (ROW_LOCK, LEASE, ADVISORY)


@attrs.frozen
class Dialect:
    name: str
    sqlglot_name: str
    quote_char: str
    forms: tuple[str, ...]
    # Longest identifier the server accepts, and whether the limit counts bytes or characters.
    max_identifier: int | None
    limit_in_bytes: bool
    # Unquoted identifiers: PostgreSQL folds them to lower case; MySQL and SQLite compare
    # column names without regard to case.
    folds_to_lower: bool
    case_insensitive: bool
    driver: str
    # Why a spec's server_version is too old for inboxgen, or None: given the version and what
    # needs a text hash of the server's, if anything ("FIFO groups need").
    too_old: Callable[[tuple[int, ...], str], str | None]
    # Placeholders as %(name)s, and the driver formats the whole text with `%` (psycopg,
    # PyMySQL); else as :name (sqlite3).
    pyformat: bool = True
    # How a statement names the rows a subquery picked (a claim's `LIMIT n ... SKIP LOCKED`,
    # a prune batch): `id IN (subquery)`, or on PostgreSQL `id = ANY(ARRAY(subquery))`. There
    # the array runs the subquery once, before the outer statement finds its rows by index;
    # as a semi-join the planner scans the whole table once the LIMIT is large against it.
    picked_open: str = "IN ("
    picked_close: str = ")"
    # The schema a table without one is in (PostgreSQL's search_path default).
    default_schema: str | None = None
    # SQLite keeps the time roles as text, compared as text against the worker's `now`.
    times_as_text: bool = False
    # PostgreSQL reads a TIMESTAMPTZ compared with a TIMESTAMP in the session's time zone, so
    # the time roles must share one type.
    time_types_must_match: bool = False
    # PostgreSQL: an index on a column an UPDATE changes makes that UPDATE non-HOT (every
    # lease renewal writes locked_until).
    indexed_updates_cost: bool = False
    # SQLite: an INTEGER PRIMARY KEY is the rowid, which the database fills in.
    integer_key_is_rowid: bool = False
    # MySQL: sqlglot reads an index's prefix part `col(191)` as a function call.
    prefix_parts_parse_as_calls: bool = False
    # CREATE INDEX ... WHERE: PostgreSQL and SQLite. MySQL/MariaDB has none, so its claim index
    # over unfinished rows leads with processed_at instead (`IS NULL` is then a lookup).
    partial_indexes: bool = True
    # PostgreSQL's per-table storage parameters (fillfactor, autovacuum_*).
    table_settings: bool = False
    # Partitioned tables (PARTITION BY): PostgreSQL's and MySQL/MariaDB's; SQLite has none.
    partitions: bool = True
    # MySQL/MariaDB: sqlglot cannot read a CREATE TABLE's partition clause (`PARTITION BY KEY
    # (id) PARTITIONS 4`, after the table's options), so the catalog reads the table without it.
    partition_clause_unread: bool = False
    # MySQL/MariaDB names an index within its table; PostgreSQL (within a schema) and SQLite
    # give tables and indexes names from one set.
    index_names_per_table: bool = False
    # A DEFAULT that fills a time column with the database's time of the insert (the message
    # that asks for one names it).
    now_default: str = "DEFAULT now()"

    def quote(self, name: str) -> str:
        q = self.quote_char
        return f"{q}{name.replace(q, q + q)}{q}"

    def qualified(self, schema: str | None, table: str) -> str:
        return f"{self.quote(schema)}.{self.quote(table)}" if schema else self.quote(table)

    def param(self, name: str) -> str:
        return f"%({name})s" if self.pyformat else f":{name}"

    def sub_params(self, sql: str, replace: Callable[[str], str]) -> str:
        """`sql` with each placeholder replaced by `replace(name)`; quoted names and strings are
        left as they are (SQLite may have `:` inside a quoted name)."""
        def one(m: re.Match[str]) -> str:
            name = m.group("name")
            return m.group(0) if name is None else replace(name)
        return PLACEHOLDERS[not self.pyformat].sub(one, sql)

    def params_in(self, sql: str) -> list[str]:
        """The placeholder names of `sql`, each once, in order of appearance."""
        seen: dict[str, None] = {}
        self.sub_params(sql, lambda name: seen.setdefault(name) or "")
        return list(seen)

    def identifier_too_long(self, name: str) -> bool:
        if self.max_identifier is None:
            return False
        size = len(name.encode()) if self.limit_in_bytes else len(name)
        return size > self.max_identifier

    def placeholder_chars(self, name: str) -> str:
        """Characters of an identifier the driver takes for a placeholder, quoted or not:
        psycopg and PyMySQL format the whole text with `%`; sqlite3 leaves quoted names be."""
        return "%" if "%" in name and self.pyformat else ""

    def picked_by(self, column: str, subquery: str) -> str:
        """`column` is among the values `subquery` (indented lines) selects."""
        return f"{column} {self.picked_open}\n{subquery}\n{self.picked_close}"

    def same_name(self, a: str, b: str) -> bool:
        return a.lower() == b.lower() if self.case_insensitive else a == b

    def advice_name(self, name: str) -> str:
        """A name as DDL a person copies from a message writes it: plain where it can be, else
        quoted (upper case on PostgreSQL, which folds plain names; other characters; keywords
        tables and columns are often named after)."""
        plain = _PLAIN_LOWER if self.folds_to_lower else _PLAIN
        if plain.fullmatch(name) and name.lower() not in _KEYWORDS:
            return name
        return self.quote(name)


_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PLAIN_LOWER = re.compile(r"[a-z_][a-z0-9_]*")
# Reserved words a queue's table or columns are plausibly named after.
_KEYWORDS = frozenset("""
    all and any as asc by case check column constraint create default desc distinct else end
    from grant group having in index is key limit not null offset on or order primary
    references select table then to union unique user using when where window with
""".split())


def _postgres_too_old(v: tuple[int, ...], hashing: str) -> str | None:
    shown = ".".join(map(str, v))
    pg, key_hash = floors.POSTGRES, floors.POSTGRES_KEY_HASH
    if v < pg.version:
        return f"{pg.server} {shown} has no {pg.needs}: inboxgen needs {pg.shown} or newer"
    if v < key_hash.version and hashing:
        return (f"{hashing} {key_hash.needs}, {key_hash.server} {key_hash.shown} or newer "
                f"(server_version is {shown})")
    return None


def _mysql_too_old(v: tuple[int, ...], hashing: str) -> str | None:
    shown = ".".join(map(str, v))
    my, maria = floors.MYSQL, floors.MARIADB
    # Compare only the parts given: "8" means some 8.x, which may be 8.0.1 or later.
    if (v < my.version[:len(v)] or (v[0] == maria.version[0] and v < maria.version[:len(v)])
            or v[0] == 5):
        return (f"MySQL/MariaDB {shown} has no {my.needs}: inboxgen needs MySQL {my.shown}+ "
                f"or MariaDB {maria.shown}+")
    return None


def _sqlite_too_old(v: tuple[int, ...], hashing: str) -> str | None:
    lite = floors.SQLITE
    if v < lite.version:
        return (f"{lite.server} {'.'.join(map(str, v))} has no {lite.needs}: inboxgen needs "
                f"{lite.shown} or newer")
    return None


POSTGRES = Dialect(
    name="postgres",
    sqlglot_name="postgres",
    quote_char='"',
    forms=(ROW_LOCK, LEASE, ADVISORY),
    max_identifier=63,
    limit_in_bytes=True,
    folds_to_lower=True,
    case_insensitive=False,
    driver="psycopg",
    too_old=_postgres_too_old,
    picked_open="= ANY(ARRAY(",
    picked_close="))",
    default_schema="public",
    time_types_must_match=True,
    indexed_updates_cost=True,
    table_settings=True,
)
MYSQL = Dialect(
    name="mysql",
    sqlglot_name="mysql",
    quote_char="`",
    forms=(ROW_LOCK, LEASE, ADVISORY),
    max_identifier=64,
    limit_in_bytes=False,
    folds_to_lower=False,
    case_insensitive=True,
    driver="pymysql",
    too_old=_mysql_too_old,
    prefix_parts_parse_as_calls=True,
    partial_indexes=False,
    partition_clause_unread=True,
    index_names_per_table=True,
    now_default="DEFAULT (UTC_TIMESTAMP(6))",
)
SQLITE = Dialect(
    name="sqlite",
    sqlglot_name="sqlite",
    quote_char='"',
    forms=(LEASE, ADVISORY),
    max_identifier=None,
    limit_in_bytes=False,
    folds_to_lower=False,
    case_insensitive=True,
    driver="sqlite3",
    too_old=_sqlite_too_old,
    pyformat=False,
    times_as_text=True,
    integer_key_is_rowid=True,
    partitions=False,
    now_default="DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))",
)

DIALECTS: dict[str, Dialect] = {d.name: d for d in (POSTGRES, MYSQL, SQLITE)}
