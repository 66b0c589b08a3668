"""SQLite: PRAGMA table_info for the columns, EXPLAIN QUERY PLAN for the plan."""

from __future__ import annotations

import datetime as _dt
import re
from typing import Any

from inboxgen.ops.live.base import LiveDatabase


class SqliteLive(LiveDatabase):
    def columns(self, schema: str | None, table: str) -> list[tuple[str, str, bool]]:
        rows = self.conn.execute(f'PRAGMA table_info("{table}")').fetchall()
        return [(r[1], r[2] or "BLOB", not r[3] and not r[5]) for r in rows]

    def sample_time(self) -> Any:
        return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")  # as the roles store it

    def explain(self, sql: str, bound: dict[str, Any]) -> Any:
        rows = self.conn.execute("EXPLAIN QUERY PLAN " + sql, bound).fetchall()
        return "\n".join(str(r[-1]) for r in rows)

    def ordered_by_index(self, plan: Any, table: str) -> bool:
        return "TEMP B-TREE FOR ORDER BY" not in plan and not re.search(
            rf"\bSCAN {re.escape(table)}\b(?! USING)", plan)
