"""SQLite's statement shapes: JSON arrays (`json_each`) where PostgreSQL binds arrays, and an
INSERT without RETURNING for executemany()."""

from __future__ import annotations

from collections.abc import Sequence

from inboxgen.generate.model import Field
from inboxgen.generate.statements.base import Statements


class SqliteStatements(Statements):
    limited_lock = fair_lock = ""  # the claim's transaction holds the file's write lock
    db_now = "strftime('%Y-%m-%d %H:%M:%f', 'now')"
    window_start = "strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || :rate_seconds || ' seconds')"

    def held_batch(self) -> str:
        # One JSON array of [id, locked_until, attempt] entries: joining one json_each per
        # column on its key would scan each array once per row.
        held = self.held_columns(self.q)
        plus = {"attempt": " + 1"}  # the claim counted the attempt the worker holds
        cols = ", ".join(self.c(f) for _, f in held)
        picked = ", ".join(f"json_extract(held.value, '$[{i}]'){plus.get(p, '')}"
                           for i, (p, _) in enumerate(held))
        source = f"    FROM json_each({self.p('held')}) AS held"
        return f"({cols}) IN (\n    SELECT {picked}\n{source}\n)"

    def same_or_both_null(self, a: str, b: str) -> str:
        return f"{a} IS {b}"

    def later(self, time: str, seconds: str) -> str:
        time = "'now'" if time == self.db_now else time
        return f"strftime('%Y-%m-%d %H:%M:%f', {time}, '+' || {seconds} || ' seconds')"

    least = "MIN"  # with two arguments or more, the lesser
    greatest = "MAX"  # with two arguments or more, the greater

    def ids_in(self, column: str) -> str:
        return f"{column} IN (SELECT picked.value FROM json_each({self.p('ids')}) AS picked)"

    def insert_many(self, fields: Sequence[Field], cols: str, insert: str) -> None:
        # executemany() refuses a statement that returns rows (Python 3.12 and later).
        self.add("INSERT_MANY", insert, "Enqueue many rows: this INSERT, run once per row "
                                        "by executemany() in one call.")
