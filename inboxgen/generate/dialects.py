"""What differs between PostgreSQL, MySQL/MariaDB and SQLite: quoting, placeholders, limits."""

from __future__ import annotations

import re
from collections.abc import Callable

import attrs

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
    # How a statement names the rows a subquery picked (a claim's `LIMIT n ... SKIP LOCKED`,
    # a prune batch): `id IN (subquery)`, or on PostgreSQL `id = ANY(ARRAY(subquery))`. There
    # the array runs the subquery once, before the outer statement finds its rows by index;
    # as a semi-join the planner scans the whole table once the LIMIT is large against it.
    picked_open: str = "IN ("
    picked_close: str = ")"

    def quote(self, name: str) -> str:
        q = self.quote_char
        return f"{q}{name.replace(q, q + q)}{q}"

    def qualified(self, schema: str | None, table: str) -> str:
        return f"{self.quote(schema)}.{self.quote(table)}" if schema else self.quote(table)

    def param(self, name: str) -> str:
        return f":{name}" if self.name == "sqlite" else f"%({name})s"

    def sub_params(self, sql: str, replace: Callable[[str], str]) -> str:
        """`sql` with each placeholder replaced by `replace(name)`; quoted names and strings are
        left as they are (SQLite may have `:` inside a quoted name)."""
        def one(m: re.Match[str]) -> str:
            name = m.group("name")
            return m.group(0) if name is None else replace(name)
        return PLACEHOLDERS[self.name == "sqlite"].sub(one, sql)

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
        return "%" if "%" in name and self.name != "sqlite" else ""

    def picked_by(self, column: str, subquery: str) -> str:
        """`column` is among the values `subquery` (indented lines) selects."""
        return f"{column} {self.picked_open}\n{subquery}\n{self.picked_close}"

    def same_name(self, a: str, b: str) -> bool:
        return a.lower() == b.lower() if self.case_insensitive else a == b


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
    picked_open="= ANY(ARRAY(",
    picked_close="))",
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
)

DIALECTS: dict[str, Dialect] = {d.name: d for d in (POSTGRES, MYSQL, SQLITE)}
