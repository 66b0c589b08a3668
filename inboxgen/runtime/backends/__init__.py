"""The drivers under the worker, one module per driver."""

from inboxgen.runtime.backends.base import Backend, ThreadedBackend
from inboxgen.runtime.backends.mysql import MySQLBackend, mysql_connect_args
from inboxgen.runtime.backends.postgres import PostgresBackend
from inboxgen.runtime.backends.sqlite import AdvisoryRegistry, SqliteBackend

__all__ = ["AdvisoryRegistry", "Backend", "MySQLBackend", "PostgresBackend", "SqliteBackend",
           "ThreadedBackend", "mysql_connect_args"]
