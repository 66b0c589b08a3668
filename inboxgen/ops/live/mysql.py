"""MySQL/MariaDB: information_schema for the columns and unique keys, EXPLAIN rows for the
plan."""

from __future__ import annotations

import datetime as _dt
from typing import Any

from inboxgen.ops.live.base import LiveDatabase, LiveIndex
from inboxgen.runtime.engines import MYSQL_ASKS, Engine, mysql_engine


class MySQLLive(LiveDatabase):
    def columns(self, schema: str | None, table: str) -> list[tuple[str, str, bool]]:
        with self.conn.cursor() as cur:
            cur.execute("SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE = 'YES' FROM "
                        "information_schema.COLUMNS WHERE TABLE_SCHEMA = "
                        "COALESCE(%s, DATABASE()) AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
                        (schema, table))
            rows = cur.fetchall()
        self.conn.rollback()
        json_columns = self._mariadb_json(schema, table) \
            if any(str(r[1]).lower() == "longtext" for r in rows) else set()
        return [(r[0], "json" if str(r[0]).lower() in json_columns else r[1], bool(r[2]))
                for r in rows]

    def _mariadb_json(self, schema: str | None, table: str) -> set[str]:
        """The columns MariaDB made of a `JSON` column: it stores them as LONGTEXT with a
        `json_valid()` check named after the column (MySQL reports `json` itself, and its
        CHECK_CONSTRAINTS has no TABLE_NAME)."""
        try:
            with self.conn.cursor() as cur:
                cur.execute("SELECT CONSTRAINT_NAME, CHECK_CLAUSE FROM "
                            "information_schema.CHECK_CONSTRAINTS WHERE CONSTRAINT_SCHEMA = "
                            "COALESCE(%s, DATABASE()) AND TABLE_NAME = %s", (schema, table))
                checks = cur.fetchall()
        except Exception:  # MySQL: no TABLE_NAME there, and no LONGTEXT for JSON either
            checks = ()
        finally:
            self.conn.rollback()
        return {str(name).lower() for name, clause in checks
                if str(clause).replace(" ", "").lower() == f"json_valid(`{str(name).lower()}`)"}

    def unique_keys(self, schema: str | None, table: str) -> list[tuple[str, ...]]:
        with self.conn.cursor() as cur:
            cur.execute("SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS "
                        "WHERE TABLE_SCHEMA = COALESCE(%s, DATABASE()) AND TABLE_NAME = %s "
                        "AND NON_UNIQUE = 0 ORDER BY INDEX_NAME, SEQ_IN_INDEX", (schema, table))
            rows = cur.fetchall()
        self.conn.rollback()
        keys: dict[str, list[str | None]] = {}
        for index, column in rows:
            keys.setdefault(index, []).append(column)
        # A functional key part (MySQL 8.0.13) has no column name: that index is none.
        return [tuple(c for c in cols if c) for cols in keys.values() if all(cols)]

    def indexes(self, schema: str | None, table: str) -> list[LiveIndex]:
        with self.conn.cursor() as cur:
            cur.execute("SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS "
                        "WHERE TABLE_SCHEMA = COALESCE(%s, DATABASE()) AND TABLE_NAME = %s "
                        "ORDER BY INDEX_NAME, SEQ_IN_INDEX", (schema, table))
            rows = cur.fetchall()
        self.conn.rollback()
        keys: dict[str, list[str]] = {}
        for index, column in rows:
            keys.setdefault(index, []).append(column or "(expression)")
        return [LiveIndex(name, cols) for name, cols in keys.items()]

    def names_in_use(self, schema: str | None, table: str) -> list[str]:
        return [i.name for i in self.indexes(schema, table)]  # index names are the table's own

    def engine(self) -> Engine:
        answers = []
        with self.conn.cursor() as cur:
            for sql in MYSQL_ASKS:
                cur.execute(sql)
                answers.append(cur.fetchone())
        return mysql_engine(answers)

    def sample_time(self) -> Any:
        return _dt.datetime.now(_dt.UTC).replace(tzinfo=None)  # naive UTC

    def explain(self, sql: str, bound: dict[str, Any]) -> Any:
        from inboxgen.runtime.backends.mysql_server import bind_lists

        bound = bind_lists(sql, bound)
        try:
            with self.conn.cursor() as cur:
                cur.execute("EXPLAIN " + sql, bound)
                cols = [c[0] for c in cur.description]
                return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
        finally:
            self.conn.rollback()

    def run(self, sql: str, bound: dict[str, Any]) -> None:
        with self.conn.cursor() as cur:
            cur.execute(sql, bound)
            cur.fetchall()
        self.conn.rollback()

    def ordered_by_index(self, plan: Any, table: str, *, filters_rows: bool = True,
                         others: frozenset[str] = frozenset(), walk: bool = False) -> bool:
        mine = [r for r in plan if r.get("table") == table]
        return bool(mine) and all(r.get("key") and "filesort" not in str(r.get("Extra") or "")
                                  for r in mine)
