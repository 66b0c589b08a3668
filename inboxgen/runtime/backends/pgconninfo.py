"""A PostgreSQL connection string checked as libpq and psycopg will read it, before any
connection: an unknown parameter or a value the driver refuses (connect_timeout=abc,
sslmode=bogus, port=abc) fails when the worker is built, in one line naming the parameter, and
never a minute later as a stream of pool warnings. Nothing here quotes a password."""

from __future__ import annotations

import ipaddress
import re
from typing import Any

# AsyncConnection.connect() arguments that are not connection parameters.
CONNECT_ONLY = frozenset({"autocommit", "prepare_threshold", "context", "row_factory",
                          "cursor_factory"})
# Integers libpq reads only once a TCP connection is made (so the check below cannot see them).
_TCP_INTEGERS = ("keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count",
                 "tcp_user_timeout")
_INTEGER = re.compile(r"\s*[+-]?\d+\s*")  # libpq's parse_int_param
# A socket directory that does not exist: libpq's own checks run, and no connection is made.
_NOWHERE = "/nonexistent/inboxgen-conninfo-check"
_UNKNOWN = re.compile(r'invalid (?:connection option|URI query parameter):? "([^"]*)"')
_NAMED = (re.compile(r'invalid "?(\w+)"? value'), re.compile(r'connection option "(\w+)"'),
          re.compile(r"invalid (port) number"), re.compile(r"(port) numbers to"),
          re.compile(r"weak (sslmode)"), re.compile(r"(service) \""),
          re.compile(r"(ssl_\w+_protocol_version)"), re.compile(r"SSL (protocol) version"))


def connect_params(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The connection parameters among `connect()` keyword arguments (a pool's kwargs)."""
    return {k: v for k, v in kwargs.items()
            if k not in CONNECT_ONLY and isinstance(v, (str, int))}


def pg_params(conninfo: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The parameters of `conninfo` with `kwargs`, checked. Raises ValueError naming the first
    parameter that libpq or psycopg refuses."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, timeout_from_conninfo

    try:
        params = conninfo_to_dict(conninfo, **connect_params(kwargs))
    except psycopg.ProgrammingError as err:
        unknown = _UNKNOWN.search(str(err))
        if unknown:
            raise ValueError(f"the PostgreSQL connection string has an unknown parameter "
                             f"{unknown[1]!r}") from None
        # libpq's reason quotes the text, which may hold a password.
        raise ValueError("the database address is neither a PostgreSQL connection string "
                         "(host=... dbname=...) nor a URL (postgresql://user@host/db)") from None
    try:
        timeout_from_conninfo(params)  # psycopg reads connect_timeout itself
    except psycopg.ProgrammingError:
        raise ValueError(f"the PostgreSQL connection string has connect_timeout="
                         f"{params.get('connect_timeout')!r}, which is not a number of "
                         f"seconds") from None
    for name in _TCP_INTEGERS:
        value = params.get(name)
        if value is not None and not _INTEGER.fullmatch(str(value)):
            raise ValueError(f"the PostgreSQL connection string has {name}={value!r}, which is "
                             f"not an integer")
    for addr in str(params.get("hostaddr") or "").split(","):
        try:
            if addr.strip():
                ipaddress.ip_address(addr.strip())
        except ValueError:
            raise ValueError(f"the PostgreSQL connection string has hostaddr={addr!r}, which is "
                             f"not a numeric IP address") from None
    refusal = _libpq_refusal(params)
    if refusal:
        password = str(params.get("password") or "")
        if password:
            refusal = refusal.replace(password, "***")
        named = next((m[1] for p in _NAMED if (m := p.search(refusal))), None)
        where = f"a bad {named}" if named else "a parameter libpq refuses"
        raise ValueError(f"the PostgreSQL connection string has {where}: {refusal}")
    return params


def _libpq_refusal(params: dict[str, Any]) -> str:
    """What libpq says of `params` before it would connect ("" when it has nothing against
    them): the values of sslmode, port, target_session_attrs, ... as the linked libpq knows
    them. The hosts are replaced by a socket directory that does not exist, so nothing leaves
    the machine."""
    from psycopg import pq
    from psycopg.conninfo import make_conninfo

    hosts = max(len(str(params.get("host") or "").split(",")),
                len(str(params.get("hostaddr") or "").split(",")))
    checked = {**params, "host": ",".join([_NOWHERE] * hosts), "hostaddr": ""}
    if checked.get("gssencmode") == "require":
        checked["gssencmode"] = "prefer"  # a local socket never has GSSAPI encryption
    conn = pq.PGconn.connect_start(make_conninfo(**checked).encode())
    try:
        text = conn.error_message.decode("utf-8", "replace").strip()
    finally:
        conn.finish()
    if _NOWHERE in text or not text:
        return ""  # it went as far as connecting: the parameters passed
    return text.splitlines()[0]


def pg_label(conninfo: str, kwargs: dict[str, Any]) -> str:
    """How messages name the database: host, port, database and user, never the password.
    Raises ValueError when `conninfo` is malformed or has a parameter the driver refuses."""
    return label_of(pg_params(conninfo, kwargs))


def label_of(params: dict[str, Any]) -> str:
    host = params.get("host") or "localhost (socket)"
    port = params.get("port") or 5432
    return (f"PostgreSQL at {host}:{port}, database {params.get('dbname') or '(default)'}, "
            f"user {params.get('user') or '(default)'}")
