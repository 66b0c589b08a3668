"""PostgreSQL (psycopg): JSON bound as Jsonb and decoded by the driver, UUIDs as uuid.UUID, and
every function twinned for psycopg's async connections."""

from __future__ import annotations

from inboxgen.generate import catalog as cat
from inboxgen.generate.render.base import Func, Renderer, Step


class PostgresRenderer(Renderer):
    connection_type = "psycopg.Connection[Any]"
    async_connection_type = "psycopg.AsyncConnection[Any]"
    connection_helper = "postgres_connection"
    binds_jsonb = True

    def driver_type(self, kind: str) -> str:
        if kind == cat.JSON:
            return "object"  # decoded by psycopg
        return super().driver_type(kind)  # UUID as uuid.UUID, as psycopg loads it

    def insert_many_by_executemany(self) -> Func:
        return Func("insert_many", "rows: Sequence[NewRow]", "None",
                    "Enqueue many rows (executemany, pipelined by psycopg); nothing is "
                    "committed here.",
                    (Step("exec", (
                        "AWAIT cur.executemany(INSERT, [_insert_params(r) for r in rows])",)),),
                    before=("cur = conn.cursor()",))
