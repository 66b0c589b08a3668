"""MySQL/MariaDB on PyMySQL: the generated functions called on a thread per connection, and
the choice of driver.

A worker runs on asyncmy (mysql_async.py: on the event loop, no threads, about half the CPU per
job) unless its handlers write on the job's connection (transactional=True), whose users expect
a PyMySQL connection, or its address or its module leaves asyncmy out. `mysql+pymysql://` and
`mysql+asyncmy://` choose the driver.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from inboxgen.descriptor import TableDescriptor
from inboxgen.runtime.backends import mysql_async
from inboxgen.runtime.backends.base import Backend, Database, NoDatabase, ThreadedBackend
from inboxgen.runtime.backends.mysql_server import (
    MySQLServer,
    bind_lists,
    check_connect_args,
    mysql_connect_args,
    mysql_driver,
    open_session,
)


class MySQLBackend(MySQLServer, ThreadedBackend):
    """PyMySQL connections (a small pool of the worker's own), at READ COMMITTED and in UTC,
    each with a thread of its own."""

    driver = "PyMySQL"

    @classmethod
    def for_worker(cls, descriptor: TableDescriptor, database: Database, pool: Any,
                   size: int, *, transactional: bool = False) -> Backend:
        if database is None:
            raise NoDatabase("a MySQL/MariaDB worker needs database=<URL like "
                             "mysql://user@host:3306/name, or connect() arguments>")
        if isinstance(database, Path):
            database = str(database)
        args = mysql_connect_args(database)
        check_connect_args(args)
        driver = mysql_driver(database)
        if driver == "pymysql":
            return MySQLBackend(descriptor, args)
        why_not = mysql_async.unsuitable(descriptor, args, transactional=transactional)
        if why_not is None:
            return mysql_async.AsyncMySQLBackend(descriptor, args)
        if driver == "asyncmy":
            raise ValueError(f"mysql+asyncmy:// cannot serve this worker: {why_not}")
        return MySQLBackend(descriptor, args)

    def _connect(self) -> Any:
        return open_session(self.connect_args)

    def _usable(self, conn: Any) -> bool:
        return bool(conn.open)

    def _begin_now(self, conn: Any) -> None:
        if conn.get_autocommit():  # as `begin`
            conn.begin()

    async def begin_explicit(self, conn: Any) -> None:
        await self._run(conn, conn.begin)

    async def autocommit(self, conn: Any, on: bool) -> None:
        await self._run(conn, conn.autocommit, on)

    def _in_transaction(self, conn: Any) -> bool:
        from pymysql.constants.SERVER_STATUS import SERVER_STATUS_IN_TRANS

        # As the server last reported it (every reply carries the status).
        return bool(conn.server_status & SERVER_STATUS_IN_TRANS)

    async def commit(self, conn: Any) -> None:
        await self._run(conn, conn.commit)

    async def end_session(self, conn: Any) -> None:
        # Closed, the connection is not usable: its return discards it.
        with contextlib.suppress(Exception):
            await self._run(conn, conn.close)

    async def rollback(self, conn: Any) -> None:
        await self._run(conn, conn.rollback)

    async def execute(self, conn: Any, sql: str) -> None:
        def run() -> None:
            with conn.cursor() as cur:
                cur.execute(sql)

        await self._run(conn, run)

    async def query(self, conn: Any, sql: str, params: Mapping[str, Any] | None = None) -> Any:
        def run() -> Any:
            with conn.cursor() as cur:
                cur.execute(sql, params)
                return cur.fetchone()

        return await self._run(conn, run)

    async def explain(self, conn: Any, name: str) -> None:
        sql, params = self._explain_args(name)
        bound = bind_lists(sql, params)

        def run() -> None:
            with conn.cursor() as cur:
                cur.execute(sql, bound)

        await self._run(conn, run)
