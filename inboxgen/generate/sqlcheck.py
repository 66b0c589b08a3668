"""Parse every rendered statement back and check what it names against the catalog.

A generator bug (a misspelt column, a table that is not there) then fails the build, not a user's
worker at three in the morning.
"""

from __future__ import annotations

import re

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from inboxgen.descriptor import PARTITION_SLOT, names_a_partition
from inboxgen.errors import GeneratorBug
from inboxgen.generate.catalog import Catalog, Table
from inboxgen.generate.model import Queue
from inboxgen.generate.statements import Statement

# PostgreSQL's views and catalogs that status statements read; their columns are the server's.
_SERVER_VIEWS = frozenset({"pg_stat_activity", "pg_locks", "pg_database", "pg_stat_user_tables",
                           "pg_inherits", "pg_class", "pg_namespace"})
# The partition statements of prune --partitions name a partition of the table, filled in when
# they run ({partition}): checked as if on the table (a partition's columns are its table's).
# Their DDL (ALTER TABLE ... DETACH, DROP TABLE) names no column, and sqlglot reads it only as
# a command: it is not checked further.
_PARTITION_DDL = re.compile(r"(ALTER|DROP) TABLE\b")


def check_statements(queue: Queue, statements: list[Statement], catalog: Catalog) -> None:
    d = queue.dialect
    for st in statements:
        # A list parameter (MySQL's `IN %(ids)s`) becomes a parenthesised list when bound.
        text = re.sub(r"\bIN %\(\w+\)s", "IN (NULL)", st.sql)
        text = d.sub_params(text, lambda name: "NULL")
        if names_a_partition(text):
            if _PARTITION_DDL.match(text):
                continue
            text = text.replace(PARTITION_SLOT, d.qualified(queue.table.schema, queue.table.name))
        where = f"{queue.spec.display}: statement {st.name} of table \"{queue.table.name}\""
        try:
            tree = sqlglot.parse_one(text, read=d.sqlglot_name,
                                     error_level=sqlglot.ErrorLevel.RAISE)
        except ParseError as err:
            raise GeneratorBug(f"{where} does not parse: {str(err).splitlines()[0]}") from None
        if isinstance(tree, exp.Command):
            raise GeneratorBug(f"{where} is not understood by sqlglot")
        tables: list[Table] = []
        # Row sources the statement makes itself (unnest(...) AS held(...), json_each(...)):
        # their columns are the statement's own.
        made = {a.name for a in tree.find_all(exp.TableAlias)
                if not isinstance(a.parent, exp.Table) or not isinstance(a.parent.this,
                                                                          exp.Identifier)}
        ctes = {c.alias for c in tree.find_all(exp.CTE)}  # WITH new AS (...)
        for node in tree.find_all(exp.Table):
            if node.name in ctes and not node.args.get("db"):
                continue
            if not isinstance(node.this, exp.Identifier):
                continue  # a table function (json_each)
            if node.name in _SERVER_VIEWS and queue.dialect.name == "postgres":
                continue  # the server's own views (inboxgen status)
            if node.name.upper() == "DUAL" and queue.dialect.name == "mysql":
                continue  # SELECT ... FROM DUAL WHERE ...: values, no table
            db = node.args.get("db")
            schema = db.name if isinstance(db, exp.Identifier) else None
            table = catalog.table(schema, node.name)
            if table is None:
                raise GeneratorBug(f"{where} names table \"{node.name}\", which the DDL lacks")
            tables.append(table)
        aliases = {a.alias for a in tree.find_all(exp.Alias)}  # names the statement defines
        server_views = any(t.name in _SERVER_VIEWS for t in tree.find_all(exp.Table))
        for col in tree.find_all(exp.Column):
            if col.name in aliases and not col.table or col.table in made:
                continue
            if server_views and not tables:
                continue  # a status statement on the server's views alone
            if not any(t.column(col.name, d) is not None for t in tables):
                raise GeneratorBug(f"{where} names column \"{col.name}\", which its tables lack")
