"""A synchronous connection for the operations commands, from a URL, opened as the worker opens
its own (MySQL/MariaDB sessions at READ COMMITTED in UTC; SQLite files never created)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from inboxgen.errors import ConfigError, ConnectFailed
from inboxgen.runtime.backends.mysql_server import MYSQL_SCHEMES
from inboxgen.runtime.connecting import first_line


def url_scheme(url: str) -> str:
    """A URL's scheme, lower-cased ("" for a conninfo string or a file path)."""
    return url.split("://", 1)[0].lower() if "://" in url else ""


def connect(dialect: str, url: str) -> tuple[Any, str]:
    """(connection, label naming the database without its password) for a module of
    `dialect`. Raises ConfigError for a URL of another database, ConnectFailed when it cannot
    be reached."""
    if dialect == "postgres":
        return _postgres(url)
    if dialect == "mysql":
        return _mysql(url)
    return _sqlite(url)


def _postgres(url: str) -> tuple[Any, str]:
    import psycopg

    from inboxgen.runtime.backends.postgres import pg_label

    if url_scheme(url) in MYSQL_SCHEMES or url.startswith("sqlite:"):
        raise ConfigError("the table is on PostgreSQL, but --database-url names another "
                          "database")
    try:
        label = pg_label(url, {})
    except ValueError as err:
        raise ConfigError(f"--database-url: {err}") from None
    try:
        return psycopg.connect(url, connect_timeout=10), label
    except psycopg.Error as err:
        raise ConnectFailed(f"cannot connect to {label}: {first_line(err)}") from None


def _mysql(url: str) -> tuple[Any, str]:
    import pymysql

    from inboxgen.runtime.backends.mysql_server import (
        mysql_connect_args,
        mysql_label,
        open_session,
    )

    try:
        args = mysql_connect_args(url)
    except ValueError as err:
        raise ConfigError(f"--database-url: {err}") from None
    label = mysql_label(args)
    try:
        return open_session(args), label
    except pymysql.Error as err:
        raise ConnectFailed(f"cannot connect to {label}: {first_line(err)}") from None


def _sqlite(url: str) -> tuple[Any, str]:
    path = url.removeprefix("sqlite:///") if url.startswith("sqlite:///") else url
    if url_scheme(url) not in ("", "sqlite"):  # a URL of another database (never quoted)
        raise ConfigError("the table is on SQLite: --database-url is the database file's path "
                          "(or sqlite:///path)")
    label = f"SQLite file {path}"
    if not Path(path).is_file():
        raise ConnectFailed(f"cannot open {label}: no such file")
    try:
        uri = Path(path).resolve().as_uri() + "?mode=rw"
        return sqlite3.connect(uri, uri=True, isolation_level=None, timeout=30), label
    except sqlite3.Error as err:
        raise ConnectFailed(f"cannot open {label}: {first_line(err)}") from None
