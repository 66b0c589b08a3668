"""MySQL/MariaDB on either driver (PyMySQL in mysql.py, asyncmy in mysql_async.py): addresses,
session settings, the server's checks, and which errors mean what."""

from __future__ import annotations

import contextlib
import datetime as _dt
import re
import socket
from collections.abc import Mapping
from typing import Any

from inboxgen.descriptor import TableDescriptor
from inboxgen.errors import WorkerConfigError
from inboxgen.runtime.backends.base import Backend, ServerOffers
from inboxgen.runtime.engines import MYSQL_ASKS, mysql_engine

# The URL schemes of a MySQL/MariaDB address, and the driver each one names.
MYSQL_SCHEMES: dict[str, str | None] = {"mysql": None, "mariadb": None, "mysql+pymysql": "pymysql",
                                        "mysql+asyncmy": "asyncmy"}


def mysql_driver(database: str | Mapping[str, Any]) -> str | None:
    """The driver a URL names (`mysql+pymysql://`, `mysql+asyncmy://`); None leaves the choice
    to the worker."""
    if not isinstance(database, str):
        return None
    from urllib.parse import urlsplit

    return MYSQL_SCHEMES.get(urlsplit(database).scheme)


def mysql_connect_args(database: str | Mapping[str, Any]) -> dict[str, Any]:
    """PyMySQL connect() arguments from a URL (mysql://user:password@host:port/db) or a mapping
    of them."""
    if not isinstance(database, str):
        return dict(database)
    from urllib.parse import parse_qs, unquote, urlsplit

    url = urlsplit(database)
    if url.scheme not in MYSQL_SCHEMES:
        raise ValueError("a MySQL/MariaDB database is a URL like mysql://user@host:3306/name")
    try:
        port = url.port
    except ValueError:  # its text names the port alone
        raise ValueError("the MySQL/MariaDB URL has a port that is not a number from 1 to "
                         "65535") from None
    args: dict[str, Any] = {"host": url.hostname or "localhost", "port": port or 3306,
                            "database": unquote(url.path.lstrip("/")) or None}
    if url.username:
        args["user"] = unquote(url.username)
    if url.password:
        args["password"] = unquote(url.password)
    for key, values in parse_qs(url.query, keep_blank_values=True).items():
        if key not in URL_PARAMETERS:
            # Left out, it would be ignored: a worker meant to use TLS would connect without.
            raise ValueError(f"the MySQL/MariaDB URL has an unknown parameter {key!r} (it takes "
                             f"{', '.join(URL_PARAMETERS)})")
        args[key] = values[-1]
    return args


# What a MySQL/MariaDB URL may say after its "?".
URL_PARAMETERS = ("unix_socket", "charset", "ssl_ca")


def check_connect_args(args: Mapping[str, Any]) -> None:
    """Raises ValueError naming the first of PyMySQL's connect() arguments that it would
    refuse (or trip over) when it connects; never with the password."""
    import inspect
    import os

    import pymysql
    from pymysql.charset import charset_by_name

    known = set(inspect.signature(pymysql.connections.Connection.__init__).parameters)
    where = "the MySQL/MariaDB connection"
    for key in args:
        if key == "self" or key not in known:
            raise ValueError(f"{where} has an unknown argument {key!r}")
    port = args.get("port", 3306)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ValueError(f"{where} has port={port!r}, not a number from 1 to 65535")
    charset = args.get("charset")
    if charset is not None and (not isinstance(charset, str) or not charset
                                or charset_by_name(charset) is None):
        raise ValueError(f"{where} has charset={charset!r}, which PyMySQL does not know")
    timeout = args.get("connect_timeout")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or timeout <= 0):
        raise ValueError(f"{where} has connect_timeout={timeout!r}, not a number of seconds "
                         f"above 0")
    for key in ("ssl_ca", "ssl_cert", "ssl_key"):
        path = args.get(key)
        if path is not None and not (os.path.isfile(path) and os.access(path, os.R_OK)):
            raise ValueError(f"{where} has {key}={str(path)!r}, which is not a readable file")


def bind_lists(sql: str, bound: Mapping[str, Any]) -> dict[str, Any]:
    """`bound` for planning `sql`: a list parameter (`IN %(ids)s`, which the drivers write
    from a tuple as a parenthesised list) bound as a one-element tuple."""
    lists = set(re.findall(r"\bIN %\((\w+)\)s", sql))
    return {k: ((None,) if k in lists else v) for k, v in bound.items()}


def mysql_label(args: Mapping[str, Any]) -> str:
    """How messages name the database: host and port (or socket), database, user; never the
    password."""
    where = args.get("unix_socket") or f"{args.get('host', 'localhost')}:{args.get('port', 3306)}"
    return (f"MySQL/MariaDB at {where}, database {args.get('database') or '(none)'}, "
            f"user {args.get('user') or '(default)'}")


def open_session(connect_args: Mapping[str, Any]) -> Any:
    """A PyMySQL connection as inboxgen's statements expect it: READ COMMITTED, times in UTC,
    and UPDATE counting the rows it matched."""
    import pymysql
    from pymysql.constants import CLIENT

    # FOUND_ROWS: an UPDATE reports the rows it matched, not only those it changed, so a
    # renewal that writes the expiry already held still counts as held.
    args = dict(connect_args)
    flags = int(args.pop("client_flag", 0)) | CLIENT.FOUND_ROWS
    conn = pymysql.connect(**args, client_flag=flags, autocommit=False)
    with conn.cursor() as cur:
        # Claims run at READ COMMITTED; times travel as naive UTC.
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        cur.execute("SET SESSION time_zone = '+00:00'")
    return conn


class MySQLServer(Backend):
    """What a MySQL/MariaDB backend is on either driver."""

    dialect = "mysql"
    # A round's statements run back to back on one connection: in one call on PyMySQL's
    # thread, or one after another on the event loop (the protocol has no pipelining).
    rounds_together = True
    server_clock = True

    def __init__(self, descriptor: TableDescriptor, connect_args: Mapping[str, Any]) -> None:
        super().__init__(descriptor)
        self.connect_args = dict(connect_args)
        self.label = mysql_label(self.connect_args)

    async def check_server(self, conn: Any, where: Mapping[str, str]) -> ServerOffers:
        """The version floor, and a binary log format that allows READ COMMITTED writes."""
        from inboxgen.runtime.serverversion import require_supported

        answers = [await self.query(conn, sql) for sql in MYSQL_ASKS]
        engine = mysql_engine(answers)
        text = answers[0][0] if answers[0] else ""
        if engine.name != "TiDB":  # (which reports MySQL 5.7's version: its refusal says more)
            require_supported(str(text), **where)
        log_bin, binlog_format = await self.query(conn, "SELECT @@log_bin, @@binlog_format")
        if int(log_bin or 0) and str(binlog_format).upper() == "STATEMENT":
            raise WorkerConfigError(
                "the server's binlog_format is STATEMENT, which refuses the READ COMMITTED "
                "transactions the claims run in: set binlog_format to ROW or MIXED", **where)
        return ServerOffers(engine=engine)

    async def server_now(self, conn: Any) -> _dt.datetime | None:
        (now,) = await self.query(conn, "SELECT UTC_TIMESTAMP(6)")
        return now.replace(tzinfo=_dt.UTC)  # type: ignore[no-any-return]

    def permanent(self, err: Exception) -> bool:
        # Access denied (to the server or the database), an unknown database or host, an
        # authentication method or TLS the two sides do not share: no retry changes them.
        if not isinstance(err, (OSError, *_driver_errors())):
            return True  # the driver tripped over its arguments
        code = err.args[0] if err.args and isinstance(err.args[0], int) else None
        if code in _REFUSED:
            return True
        if "[SSL" in str(err):  # asyncmy: a TLS handshake with a server that has none
            return True
        return isinstance(err.__cause__ or err.__context__, socket.gaierror)

    def rolled_back(self, err: Exception) -> bool:
        # ER_LOCK_DEADLOCK: InnoDB rolled the whole transaction back (a lock wait timeout
        # rolls back only its statement, so it is not one of these).
        return isinstance(err, _driver_errors()) and bool(err.args) and err.args[0] == 1213

    def disconnected(self, err: Exception, conn: Any = None) -> bool:
        if conn is not None and getattr(conn, "open", True) and getattr(conn, "connected", True):
            return False  # the job's connection is alive: the error is the handler's own
        if isinstance(err, OSError):
            return True
        if not isinstance(err, _driver_errors()):
            return False
        code = err.args[0] if err.args and isinstance(err.args[0], int) else None
        # Both drivers raise InterfaceError (code 0) for a connection already closed.
        return code in _GONE or (code == 0 and type(err).__name__ == "InterfaceError")

    def unreachable(self, err: Exception) -> bool:
        code = err.args[0] if err.args and isinstance(err.args[0], int) else None
        return code == 2003 or isinstance(err, OSError)  # cannot connect

    async def begin(self, conn: Any, *, immediate: bool = True) -> None:
        # Where autocommit is off (as connections open), the first statement opens the
        # transaction: no round trip.
        if conn.get_autocommit():
            await self.begin_explicit(conn)

    async def begin_explicit(self, conn: Any) -> None:
        """BEGIN on a session in autocommit mode."""
        raise NotImplementedError

    # GET_LOCK and RELEASE_LOCK read no table, and a session lock outlives any transaction: a
    # key's lock and unlock are one statement each, with no COMMIT or ROLLBACK around them.

    async def lock_key(self, conn: Any, key: str, owner: object) -> bool:
        return bool(await self.call(conn, "lock", key=key))

    async def unlock_key(self, conn: Any, key: str, owner: object) -> None:
        with contextlib.suppress(Exception):  # a broken session has released it already
            await self.call(conn, "unlock", key=key)


# Cannot connect, server gone away, lost during a query, lost at a read, server shutting down,
# the connection killed, too many connections, disconnected by the server.
_GONE = frozenset({2003, 2006, 2013, 2055, 1053, 1927, 1040, 4031})
# Access denied to the database, to the server; an unknown database; a host that may not
# connect; an authentication method the client lacks; a server that demands TLS; an unknown host;
# an authentication plugin that cannot be loaded; TLS the server does not offer.
_REFUSED = frozenset({1044, 1045, 1049, 1130, 1251, 3159, 2005, 2059, 2026})


def _driver_errors() -> tuple[type[Exception], ...]:
    """The errors the drivers raise of a database (the others are mistakes in the arguments)."""
    import pymysql

    errors: tuple[type[Exception], ...] = (pymysql.Error,)
    try:
        import asyncmy.errors
    except ImportError:
        return errors
    return (*errors, asyncmy.errors.Error)
