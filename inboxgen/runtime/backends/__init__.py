"""The drivers under the worker, one module per driver."""

from inboxgen.runtime.backends.base import Backend, NoDatabase, ThreadedBackend
from inboxgen.runtime.backends.mysql import MySQLBackend
from inboxgen.runtime.backends.mysql_server import mysql_connect_args
from inboxgen.runtime.backends.postgres import PostgresBackend
from inboxgen.runtime.backends.sqlite import AdvisoryRegistry, SqliteBackend

# The backend of each dialect a generated module names.
BACKENDS: dict[str, type[Backend]] = {b.dialect: b for b in (PostgresBackend, MySQLBackend,
                                                            SqliteBackend)}

__all__ = ["BACKENDS", "AdvisoryRegistry", "Backend", "MySQLBackend", "NoDatabase",
           "PostgresBackend", "SqliteBackend", "ThreadedBackend", "mysql_connect_args"]
