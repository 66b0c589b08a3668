"""Every SQL statement the runtime may run for a queue table, rendered once, at build time:
what all dialects share in base.py, each dialect's own shapes in its module."""

from __future__ import annotations

from inboxgen.generate.model import Queue
from inboxgen.generate.statements.base import Statement, Statements
from inboxgen.generate.statements.mysql import MySQLStatements
from inboxgen.generate.statements.postgres import PostgresStatements
from inboxgen.generate.statements.sqlite import SqliteStatements

_BY_DIALECT: dict[str, type[Statements]] = {
    "postgres": PostgresStatements, "mysql": MySQLStatements, "sqlite": SqliteStatements}


def build_statements(queue: Queue) -> list[Statement]:
    return _BY_DIALECT[queue.dialect.name](queue).build()


__all__ = ["Statement", "build_statements"]
