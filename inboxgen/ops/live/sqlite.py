"""SQLite: PRAGMA table_info for the columns, index_list and index_info for the unique keys,
EXPLAIN QUERY PLAN for the plan."""

from __future__ import annotations

import datetime as _dt
import re
from typing import Any

from inboxgen.generate.catalog import load_catalog
from inboxgen.generate.dialects import SQLITE
from inboxgen.ops.live.base import LiveDatabase, LiveIndex


class SqliteLive(LiveDatabase):
    def columns(self, schema: str | None, table: str) -> list[tuple[str, str, bool]]:
        rows = self.conn.execute(f'PRAGMA table_info("{table}")').fetchall()
        return [(r[1], r[2] or "BLOB", not r[3] and not r[5]) for r in rows]

    def unique_keys(self, schema: str | None, table: str) -> list[tuple[str, ...]]:
        # An INTEGER PRIMARY KEY is the rowid, which index_list leaves out.
        quoted = table.replace('"', '""')
        pk = sorted((r[5], r[1]) for r in self.conn.execute(f'PRAGMA table_info("{quoted}")')
                    if r[5])
        keys = [tuple(name for _, name in pk)] if pk else []
        for _, index, unique, _, partial in self.conn.execute(f'PRAGMA index_list("{quoted}")'):
            if unique and not partial:
                name = index.replace('"', '""')
                cols = [r[2] for r in self.conn.execute(f'PRAGMA index_info("{name}")')]
                if all(cols):  # an index over an expression has no column name
                    keys.append(tuple(cols))
        return keys

    def indexes(self, schema: str | None, table: str) -> list[LiveIndex]:
        quoted = table.replace('"', '""')
        out: list[LiveIndex] = []
        pk = sorted((r[5], r[1]) for r in self.conn.execute(f'PRAGMA table_info("{quoted}")')
                    if r[5])
        if pk:  # an INTEGER PRIMARY KEY is the rowid, which index_list leaves out
            out.append(LiveIndex("PRIMARY", [name for _, name in pk]))
        for _, index, _, origin, partial in self.conn.execute(f'PRAGMA index_list("{quoted}")'):
            if origin == "pk":
                continue
            name = index.replace('"', '""')
            cols = [r[2] or "(expression)" for r in self.conn.execute(
                f'PRAGMA index_info("{name}")')]
            where_null = None
            if partial:
                # Its WHERE, read back from the CREATE INDEX the file keeps.
                row = self.conn.execute("SELECT sql FROM sqlite_master WHERE type = 'index' "
                                        "AND name = ?", (index,)).fetchone()
                catalog = load_catalog([("(the live database)", row[0] if row else "")],
                                       SQLITE)
                where_null = catalog.indexes[0].where_null if catalog.indexes else None
            out.append(LiveIndex(index, cols, where_null))
        return out

    def names_in_use(self, schema: str | None, table: str) -> list[str]:
        # Tables, indexes, views and triggers share the database's names.
        return [r[0] for r in self.conn.execute("SELECT name FROM sqlite_master")]

    def sample_time(self) -> Any:
        return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")  # as the roles store it

    def explain(self, sql: str, bound: dict[str, Any]) -> Any:
        rows = self.conn.execute("EXPLAIN QUERY PLAN " + sql, bound).fetchall()
        return "\n".join(str(r[-1]) for r in rows)

    def ordered_by_index(self, plan: Any, table: str, *, filters_rows: bool = True,
                         others: frozenset[str] = frozenset(), walk: bool = False) -> bool:
        if "TEMP B-TREE FOR ORDER BY" in plan and not walk:
            return False
        # A bare SCAN with no sort walks the table in rowid order, which is then the claim
        # order (an INTEGER PRIMARY KEY id), and so does a SEARCH of the rowid from a claim's
        # start: as good as an index unless the claim skips rows of other groups or finished
        # ones on the way.
        name = re.escape(table)
        walks = rf"\b(SCAN {name}\b(?! USING)|SEARCH {name} USING INTEGER PRIMARY KEY \(rowid>)"
        return not filters_rows or not re.search(walks, plan)
