"""MySQL/MariaDB on asyncmy: the generated `_async` twins on the worker's event loop.

PyMySQL blocks, so under an event loop every call is a hop to the connection's thread and back,
and each hop trades the GIL twice; asyncmy speaks the protocol on the loop itself.

A call that is cancelled leaves its connection in the middle of a reply: the connection is
closed (the server then rolls back what it had open) instead of being used again.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Mapping
from typing import Any

from inboxgen.descriptor import Operations, TableDescriptor
from inboxgen.runtime.backends.base import KeptConnections
from inboxgen.runtime.backends.mysql_server import MySQLServer, bind_lists

# PyMySQL's connect() arguments that asyncmy's connect() takes as they are.
_SAME = frozenset({"host", "port", "user", "password", "database", "db", "unix_socket",
                   "charset", "sql_mode", "read_default_file", "conv", "use_unicode",
                   "client_flag", "init_command", "connect_timeout", "read_default_group",
                   "local_infile", "max_allowed_packet", "read_timeout", "binary_prefix",
                   "program_name", "server_public_key"})


def asyncmy_args(args: Mapping[str, Any]) -> dict[str, Any] | None:
    """asyncmy connect() arguments meaning what PyMySQL's `args` mean, or None when one of
    them has no asyncmy equivalent (a write timeout, a client certificate, ...)."""
    out: dict[str, Any] = {}
    for key, value in args.items():
        if key in _SAME:
            out[key] = value
        elif key == "passwd":
            out["password"] = value
        elif key == "ssl_ca":  # as PyMySQL builds it: the server's certificate and name checked
            out["ssl"] = ssl.create_default_context(cafile=value)
        elif key == "ssl" and isinstance(value, ssl.SSLContext):
            out["ssl"] = value
        else:
            return None
    return out


def unsuitable(descriptor: TableDescriptor, args: Mapping[str, Any], *,
               transactional: bool) -> str | None:
    """Why asyncmy cannot serve a worker (None when it can)."""
    if transactional:
        return "a transactional handler's job.connection is a PyMySQL connection"
    if descriptor.async_ops is None:
        return (f"the module generated from {descriptor.source} has no async functions: "
                f"run inboxgen build")
    if asyncmy_args(args) is None:
        return "its connect() arguments include one asyncmy does not take"
    try:
        import asyncmy  # noqa: F401
    except ImportError:
        return "asyncmy is not installed (pip install 'inboxgen[mysql]')"
    return None


class AsyncMySQLBackend(MySQLServer, KeptConnections):
    """asyncmy connections (a small pool of the worker's own), at READ COMMITTED and in UTC."""

    driver = "asyncmy"

    def __init__(self, descriptor: TableDescriptor, connect_args: Mapping[str, Any]) -> None:
        super().__init__(descriptor, connect_args)
        args = asyncmy_args(self.connect_args)
        assert args is not None and descriptor.async_ops is not None  # see unsuitable()
        self._args = args
        self.ops: Operations = descriptor.async_ops
        self._open: set[Any] = set()

    async def _new(self) -> Any:
        import asyncmy
        from asyncmy.constants import CLIENT

        # As open_session does for PyMySQL: UPDATE counts the rows it matched, claims run at
        # READ COMMITTED, times travel as naive UTC.
        args = dict(self._args)
        flags = int(args.pop("client_flag", 0)) | CLIENT.FOUND_ROWS
        with self.busy_call:  # a test clock waits for it, as for any call
            conn = await asyncmy.connect(**args, client_flag=flags, autocommit=False)
            try:
                cur = conn.cursor()
                await cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                await cur.execute("SET SESSION time_zone = '+00:00'")
            except BaseException:
                conn.close()
                raise
        self._open.add(conn)
        return conn

    def _drop(self, conn: Any) -> None:
        """Close `conn` at once (its socket; the server ends the session)."""
        self._open.discard(conn)
        conn.close()

    async def end_session(self, conn: Any) -> None:
        self._drop(conn)  # its return finds it closed and lets it go

    async def probe(self) -> None:
        conn = await self._new()
        self._open.discard(conn)
        with contextlib.suppress(Exception):
            await conn.ensure_closed()

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in list(self._open):
            self._open.discard(conn)
            if conn in idle:  # a polite QUIT; one still in use may be mid-reply: cut off
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(conn.ensure_closed(), 5)
            conn.close()

    async def _give_back(self, conn: Any) -> None:
        if conn not in self._open or not conn.connected:
            self._open.discard(conn)  # closed by shutdown or a cancelled call meanwhile
            return
        if conn.get_transaction_status():  # as the server last reported it
            try:
                await self._run(conn, conn.rollback())
            except Exception:
                self._drop(conn)
                return
        self._idle.append(conn)

    async def _run(self, conn: Any, call: Any) -> Any:
        """Await `call` on `conn`; a cancellation closes the connection, which it left in the
        middle of a reply."""
        with self.busy_call:
            try:
                return await call
            except asyncio.CancelledError:
                self._drop(conn)
                raise

    async def call(self, conn: Any, op: str, *args: Any, **kwargs: Any) -> Any:
        return await self._run(conn, getattr(self.ops, op)(conn, *args, **kwargs))

    async def commit(self, conn: Any) -> None:
        await self._run(conn, conn.commit())

    async def rollback(self, conn: Any) -> None:
        await self._run(conn, conn.rollback())

    async def begin_explicit(self, conn: Any) -> None:
        await self._run(conn, conn.begin())

    async def autocommit(self, conn: Any, on: bool) -> None:
        await self._run(conn, conn.autocommit(on))

    async def _statement(self, conn: Any, sql: str, params: Any = None) -> Any:
        cur = conn.cursor()
        await cur.execute(sql, params)
        return await cur.fetchone()

    async def execute(self, conn: Any, sql: str) -> None:
        await self._run(conn, self._statement(conn, sql))

    async def query(self, conn: Any, sql: str, params: Mapping[str, Any] | None = None) -> Any:
        return await self._run(conn, self._statement(conn, sql, params))

    async def explain(self, conn: Any, name: str) -> None:
        sql, params = self._explain_args(name)
        await self._run(conn, self._statement(conn, sql, bind_lists(sql, params)))
