"""`inboxgen asyncapi`: an AsyncAPI 3.0 document of the queues: each table a channel (a grouped
table's group a parameter of its address), its jobs a message whose payload schema comes from the
typed payload where there is one, and, with a database URL, the server by host and port (never a
user or password)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

from inboxgen.ops.connect import url_scheme
from inboxgen.runtime.backends.mysql_server import MYSQL_SCHEMES

_CONTENT = {"json": "application/json", "text": "text/plain",
            "bytes": "application/octet-stream"}
_PROTOCOL = {"postgres": "postgresql", "mysql": "mysql", "sqlite": "sqlite"}


def document(modules: list[ModuleType], *, title: str, version: str,
             database_url: str | None) -> dict[str, Any]:
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    messages: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    url_dialect = _dialect_of(database_url) if database_url else None
    for module in modules:
        d = module.DESCRIPTOR
        key = _key(Path(d.source).stem)  # the spec's name: tables of two databases may share one
        message: dict[str, Any] = {
            "name": f"{key}_job",
            "title": f"A job of {d.qualified_name}",
            "summary": f"A row of table {d.qualified_name} ({d.dialect}, claimed by "
                       f"{d.form.replace('_', ' ')}), from {d.source}.",
            "payload": _payload_schema(module, schemas),
        }
        if d.codec in _CONTENT:
            message["contentType"] = _CONTENT[d.codec]
        if "headers" in d.roles:
            message["headers"] = {"type": "object",
                                  "additionalProperties": {"type": "string"}}
        messages[f"{key}_job"] = message
        channel: dict[str, Any] = {
            "address": d.qualified_name,
            "title": d.qualified_name,
            "description": _description(d),
            "messages": {"job": {"$ref": f"#/components/messages/{key}_job"}},
        }
        if "group" in d.roles:
            channel["address"] = f"{d.qualified_name}/{{group}}"
            channel["parameters"] = {"group": {
                "description": f"The job's group: the value of column {d.roles['group']}"
                               + (f"; dead letters go to {d.dead_letter_group!r}"
                                  if d.dead_letter_group else "")}}
        if d.dialect == url_dialect:
            channel["servers"] = [{"$ref": "#/servers/database"}]
        channels[key] = channel
        ref = {"$ref": f"#/channels/{key}"}
        operations[f"enqueue_{key}"] = {
            "action": "send", "channel": ref, "title": f"Enqueue into {d.qualified_name}",
            "summary": "insert() or insert_many() of the generated module, in the caller's "
                       "transaction", "messages": [{"$ref": f"#/channels/{key}/messages/job"}]}
        operations[f"work_{key}"] = {
            "action": "receive", "channel": ref, "title": f"Work {d.qualified_name}",
            "summary": "inboxgen.Worker claims, runs the handler and settles each job",
            "messages": [{"$ref": f"#/channels/{key}/messages/job"}]}
    doc: dict[str, Any] = {
        "asyncapi": "3.0.0",
        "info": {"title": title, "version": version,
                 "description": "Job queues kept in tables of the service's own database "
                                "(inboxgen)."},
    }
    if database_url and url_dialect is not None:
        doc["servers"] = {"database": _server(database_url, url_dialect)}
    doc["channels"] = channels
    doc["operations"] = operations
    doc["components"] = {"messages": messages, **({"schemas": schemas} if schemas else {})}
    return doc


def _dialect_of(url: str) -> str:
    scheme = url_scheme(url)
    if scheme in MYSQL_SCHEMES:
        return "mysql"
    if scheme in ("postgres", "postgresql") or (not scheme and "=" in url):
        return "postgres"  # a URL, or a conninfo string
    return "sqlite"


def _server(url: str, dialect: str) -> dict[str, Any]:
    """Host and port (and the database's name), never user or password."""
    protocol = _PROTOCOL[dialect]
    if dialect == "sqlite":
        return {"host": "localhost", "pathname": url.removeprefix("sqlite:///"),
                "protocol": protocol, "description": "a SQLite file"}
    if dialect == "postgres" and "://" not in url:
        from psycopg.conninfo import conninfo_to_dict

        params = conninfo_to_dict(url)
        host, port, db = params.get("host"), params.get("port"), params.get("dbname")
    else:
        parts = urlsplit(url)
        host, port, db = parts.hostname, parts.port, parts.path.lstrip("/")
    server: dict[str, Any] = {"host": f"{host or 'localhost'}:{port or _PORT[dialect]}",
                              "protocol": protocol}
    if db:
        server["pathname"] = f"/{db}"
    return server


_PORT = {"postgres": 5432, "mysql": 3306}


def _payload_schema(module: ModuleType, schemas: dict[str, Any]) -> dict[str, Any]:
    d = module.DESCRIPTOR
    if d.decode_payload is None:
        return {"type": "object", "description": "the whole row (the table has no payload "
                                                 "column)"}
    if d.codec == "bytes":
        return {"type": "string", "format": "binary"}
    if d.codec == "text":
        return {"type": "string"}
    # The typed payload's class, imported by the module under its own name (an annotation is
    # text there: the module has `from __future__ import annotations`).
    returned = vars(module).get(str(d.decode_payload.__annotations__.get("return", "")))
    if isinstance(returned, type) and returned.__module__ != "builtins":
        import msgspec

        # msgspec keeps the definitions under $defs, referenced from the schema's top; in the
        # document they are components, so the references point there.
        schema = msgspec.json.schema(returned, ref_template="#/components/schemas/{name}")
        schemas.update(schema.pop("$defs", {}))
        return dict(schema)
    return {"description": "any JSON value"}


def _description(d: Any) -> str:
    roles = ", ".join(f"{role}: {column}" for role, column in d.roles.items())
    return f"Table {d.qualified_name} on {d.dialect}; columns by role: {roles}."


def _key(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "_-" else "_" for ch in name)
