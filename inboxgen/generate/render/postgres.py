"""PostgreSQL (psycopg): JSON bound as Jsonb and decoded by the driver, UUIDs as uuid.UUID, and
every function twinned for psycopg's async connections."""

from __future__ import annotations

from inboxgen.generate import catalog as cat
from inboxgen.generate.render.base import Func, Renderer, Step
from inboxgen.generate.render.text import py_str


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

    def partition_functions(self) -> list[Func]:
        st = self.st
        if "PARTITIONS" not in st:
            return []
        q = self.q
        table = py_str(q.dialect.qualified(q.table.schema, q.table.name))
        one = "*, schema: str, name: str"

        # A partition's name is no value to bind: psycopg quotes it into the statement.
        named = ("partition = psycopg.sql.Identifier(schema, name)",)

        def ddl(fname: str, stmt: str, doc: str) -> Func:
            if fname != "attach_partition":
                return Func(fname, one, "None", doc, (Step("exec", (
                    f"AWAIT conn.execute(psycopg.sql.SQL({stmt}).format(partition=partition))",
                )),), before=named)
            # The bounds as pg_get_expr wrote them (PARTITIONS): the server's own SQL.
            return Func(fname, one + ", bounds: LiteralString", "None", doc, (Step("exec", (
                f"sql = psycopg.sql.SQL({stmt}).format(",
                "    partition=partition, bounds=psycopg.sql.SQL(bounds))",
                "AWAIT conn.execute(sql)",
            )),), before=named)

        return [
            Func("partitions", "", "list[tuple[str, str, str, bool]]",
                 "The table's partitions: (schema, name, bounds, whether a detach of it is "
                 "pending), bounds as `FOR VALUES ...` or `DEFAULT` (inboxgen prune "
                 "--partitions).", (
                     Step("many", self.cur("PARTITIONS", [f'"table": {table}']),
                          "(str(r[0]), str(r[1]), str(r[2]), bool(r[3]))"),)),
            Func("partition_keeps", one + ", before: datetime.datetime", "bool",
                 "Whether partition `schema`.`name` holds a row not processed, or processed at "
                 "or after `before`: such a partition is kept.", (
                     Step("scalar", (
                         "sql = psycopg.sql.SQL(PARTITION_KEEPS).format(partition=partition)",
                         'cur = AWAIT conn.execute(sql, {"before": before})',
                     ), "row is not None and bool(row[0])"),), before=named),
            ddl("detach_partition", "DETACH_PARTITION",
                "Detach partition `schema`.`name` without blocking claims; run it outside a "
                "transaction (autocommit): it waits for the transactions that may still read "
                "the partition."),
            ddl("finish_detach", "FINISH_DETACH",
                "Finish an interrupted detach of partition `schema`.`name`."),
            ddl("attach_partition", "ATTACH_PARTITION",
                "Attach partition `schema`.`name` again, with its `bounds` as partitions() "
                "read them."),
            ddl("drop_partition", "DROP_PARTITION", "Drop detached partition `schema`.`name`."),
        ]
