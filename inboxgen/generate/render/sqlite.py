"""SQLite (sqlite3): the values sqlite3 hands back without type detection, times as text (see
inboxgen.values), arrays as JSON text, and no async twins."""

from __future__ import annotations

from inboxgen.generate import catalog as cat
from inboxgen.generate.render.base import Func, Renderer, Step

# What sqlite3 hands back without type detection.
_SQLITE_TYPES = {cat.INT: "int", cat.BOOL: "int", cat.TEXT: "str", cat.BYTES: "bytes",
                 cat.FLOAT: "float"}


class SqliteRenderer(Renderer):
    connection_type = "sqlite3.Connection"
    connection_helper = "sqlite_connection"
    naive_utc_kinds: frozenset[str] = frozenset()  # the time roles are text here

    def driver_type(self, kind: str) -> str:
        return _SQLITE_TYPES.get(kind, "object")

    def array(self, value: str) -> str:
        # sqlite3 binds no arrays: the statement reads a JSON array with json_each.
        return f"_v.json_text({value})"

    def insert_id(self, params: str) -> tuple[str, Step, bool]:
        t = self.raw_type(self.q.id).removesuffix(" | None")
        # Read to the end: an unfinished statement would block a COMMIT.
        return t, Step("fetched_id", self.cur("INSERT", params), self.id_cast(t, "new_id")), True

    def insert_many(self) -> Func:
        return Func("insert_many", "rows: Sequence[NewRow]", "None",
                    "Enqueue many rows in one call (executemany); nothing is committed here.",
                    (Step("exec", (
                        "conn.executemany(INSERT_MANY, [_insert_params(r) for r in rows])",)),))
