"""A shape's migration and spec, written as a user would from docs/spec.md, and its jobs.

Every shape's tables carry its name: the queue `<name>`, its dead letters `<name>_dead` and
`<name>_ledger`, where a transactional handler writes one row per effect (no unique key: a
second committed effect must show).
"""

from __future__ import annotations

import uuid
import zlib
from dataclasses import dataclass

from conformance.axes import Shape

MAX_ATTEMPTS = 3
LEASE_SECONDS = 2
GROUP = "g"
DEAD_GROUP = "dead"
# The payload class of typed shapes, and the result class of typed results (a module the
# project puts on sys.path).
PAYLOAD_MODULE = "conformance_payload"
PAYLOAD_SOURCE = '''"""The payload and result types of the conformance matrix's typed shapes."""

import msgspec


class Task(msgspec.Struct):
    key: str
    kind: str


class Done(msgspec.Struct):
    job: str
'''

_TYPES = {
    "postgres": {"serial": "BIGSERIAL", "bigint": "BIGINT", "uuid": "UUID", "text": "TEXT",
                 "group": "TEXT", "integer": "INTEGER", "smallint": "SMALLINT",
                 "time": "TIMESTAMPTZ", "due_default": "now()", "now_default": "now()",
                 "bytes": "BYTEA", "json": "JSONB"},
    "mysql": {"serial": "BIGINT NOT NULL AUTO_INCREMENT", "bigint": "BIGINT", "uuid": "UUID",
              "text": "VARCHAR(64)", "group": "VARCHAR(64)", "integer": "INT",
              "smallint": "SMALLINT", "time": "DATETIME(6)",
              "due_default": "CURRENT_TIMESTAMP(6)", "now_default": "(UTC_TIMESTAMP(6))",
              "bytes": "LONGBLOB", "json": "JSON"},
    "sqlite": {"serial": "INTEGER", "bigint": "INTEGER", "uuid": "TEXT", "text": "TEXT",
               "group": "TEXT", "integer": "INTEGER", "smallint": "SMALLINT", "time": "TEXT",
               "due_default": "(strftime('%Y-%m-%d %H:%M:%f', 'now'))",
               "now_default": "(strftime('%Y-%m-%d %H:%M:%f', 'now'))", "bytes": "BLOB",
               "json": "TEXT"},
}


@dataclass(frozen=True)
class Names:
    """How a shape's tables are named: its own plain name by default; the generator's edge
    (test_generator_edge.py) draws a schema and quoted names with capitals and spaces."""

    table: str
    schema: str | None = None
    quoted: bool = False

    def sql(self, dialect: str, suffix: str = "") -> str:
        """The table's name in the DDL (`suffix`: `_dead`, `_ledger`, `_claim`)."""
        name = self.table + suffix
        if not self.quoted and self.schema is None:
            return name
        q = "`" if dialect == "mysql" else '"'
        quoted = f"{q}{name}{q}"
        return f"{q}{self.schema}{q}.{quoted}" if self.schema else quoted

    def spec(self, suffix: str = "") -> str:
        """The table's name in the spec."""
        return (f"{self.schema}." if self.schema else "") + self.table + suffix


def partition_key(s: Shape) -> str:
    """The column a partitioned shape's table is partitioned by: its replace key where it has
    one (a unique index must hold the partition key, and one on the key and the generated id
    would never conflict), else its id."""
    return "job_key" if s.replace != "none" else "id"


def columns(s: Shape, *, dead: bool) -> list[str]:
    """The column definitions of the queue table (or, `dead`, of its dead-letter table). A
    table partitioned by its replace key has the primary key (id, job_key)."""
    t = _TYPES[s.dialect]
    if s.id == "integer":
        idt = t["bigint"] if dead else t["serial"]
    else:
        idt = t["uuid"] if s.id == "uuid" else t["text"]
    by_key = not dead and s.storage == "partitioned" and partition_key(s) != "id"
    cols = [f"id {idt}" if by_key else f"id {idt} PRIMARY KEY"]
    if s.group != "none":
        cols.append(f"grp {t['group']} NOT NULL")
    if s.has_priority:
        cols.append(f"priority {t['integer']} NOT NULL DEFAULT 0")
    if s.has_retry_after:
        cols.append(f"retry_after {t['time']} NOT NULL DEFAULT {t['due_default']}")
    cols.append(f"attempt {t[s.attempt]} NOT NULL DEFAULT 1")
    if s.finished == "kept":
        cols.append(f"processed_at {t['time']} NULL")
    if s.form == "lease":
        cols.append(f"locked_until {t['time']} NULL")
    if s.error == "text":
        cols.append("last_error TEXT NULL")
    if s.result != "none":
        cols.append(f"result {t['json']} NULL")
    if s.progress == "json":
        cols.append(f"progress {t['json']} NULL")
    cols.append(f"payload {t['bytes'] if s.payload == 'bytes' else t['json']} NOT NULL")
    if s.limits in ("key", "rate_key", "fair", "weighted"):
        cols.append(f"tenant {t['group']} NOT NULL DEFAULT 't0'")
    if s.after != "none":
        cols.append(f"parents {t['integer']} NOT NULL DEFAULT 0")
    if s.replace == "debounce":
        cols.append(f"job_key {t['group']} NOT NULL")
        if s.has_retry_after:
            cols.append(f"enqueued_at {t['time']} NOT NULL DEFAULT {t['now_default']}")
    if by_key:
        cols.append("PRIMARY KEY (id, job_key)")
    return cols


def claim_index(s: Shape, names: Names) -> str:
    """The claim-order index the build asks for: over unfinished rows only where finished
    rows are kept (MySQL/MariaDB, which has no partial index, puts processed_at after the
    group)."""
    order = (["grp"] if s.group != "none" else []) + (["priority"] if s.has_priority else []) \
        + (["retry_after"] if s.has_retry_after else []) + ["id"]
    where = ""
    if s.finished == "kept":
        if s.dialect == "mysql":
            order.insert(1 if s.group != "none" else 0, "processed_at")
        else:
            where = " WHERE processed_at IS NULL"
    index = names.sql(s.dialect, "_claim")
    if names.schema is not None and s.dialect == "postgres":
        index = f'"{names.table}_claim"'  # an index lives in its table's schema
    return f"CREATE INDEX {index} ON {names.sql(s.dialect)} ({', '.join(order)}){where};"


def ddl(s: Shape, names: Names | None = None) -> str:
    names = names or Names(s.name)
    table = names.sql(s.dialect)
    out = []
    if names.schema is not None:
        out.append(f'CREATE SCHEMA "{names.schema}";')
    queue = f"CREATE TABLE {table} (\n    " + ",\n    ".join(columns(s, dead=False)) + "\n)"
    by = partition_key(s)
    if s.storage == "partitioned" and s.dialect == "mysql":
        out.append(f"{queue} PARTITION BY KEY ({by}) PARTITIONS 2;")
    elif s.storage == "partitioned":
        # PostgreSQL: hash partitions, the claim index on the parent (SQLite, which has none,
        # refuses the clause).
        out.append(f"{queue} PARTITION BY HASH ({by});")
        for n in range(2 if s.dialect == "postgres" else 0):
            out.append(f"CREATE TABLE {names.sql(s.dialect, f'_p{n}')} PARTITION OF {table} "
                       f"FOR VALUES WITH (MODULUS 2, REMAINDER {n});")
    else:
        out.append(f"{queue};")
    out.append(claim_index(s, names))
    if s.replace == "debounce":
        index = names.sql(s.dialect, "_key")
        if names.schema is not None and s.dialect == "postgres":
            index = f'"{names.table}_key"'
        out.append(f"CREATE UNIQUE INDEX {index} ON {table} (job_key);")
    # The indexes a limited lease claim counts the jobs in work through (elsewhere its limits
    # are seats, session locks that no index counts).
    leased = s.form == "lease"
    counted = {"queue": [("_in_work", "locked_until")] if leased else [],
               "key": ([("_in_work", "locked_until"), ("_tenant", "tenant, locked_until")]
                       if leased else [])}
    # The walk over the tenants (a fair claim's, a key-limited claim's behind a tenant at its
    # limit): group, tenant, claim order.
    walk = ", ".join((["grp"] if s.group != "none" else []) + ["tenant"]
                     + (["priority"] if s.has_priority else [])
                     + (["retry_after"] if s.has_retry_after else []) + ["id"])
    counted["fair"] = counted["weighted"] = [("_tenant", walk)]
    if leased:
        counted["key"].append(("_walk", walk))
    for suffix, column in counted.get(s.limits, []):
        index = (f'"{names.table}{suffix}"' if names.schema is not None
                 and s.dialect == "postgres" else names.sql(s.dialect, suffix))
        out.append(f"CREATE INDEX {index} ON {table} ({column});")
    if s.limits in ("rate", "rate_key"):
        wide = "TEXT" if s.dialect != "mysql" else "VARCHAR(255)"
        when = {"postgres": "TIMESTAMPTZ", "mysql": "DATETIME(6)", "sqlite": "TEXT"}[s.dialect]
        per_key = s.limits == "rate_key"
        key = f", claim_key {_TYPES[s.dialect]['group']} NOT NULL" if per_key else ""
        out.append(f"CREATE TABLE {names.sql(s.dialect, '_claims')} (queue {wide} NOT NULL, "
                   f"claimed_at {when} NOT NULL{key});")
        index = (f'"{names.table}_window"' if names.schema is not None
                 and s.dialect == "postgres" else names.sql(s.dialect, "_window"))
        out.append(f"CREATE INDEX {index} ON {names.sql(s.dialect, '_claims')} "
                   f"(queue, {'claim_key, ' if per_key else ''}claimed_at);")
    if s.limits == "weighted":
        key = _TYPES[s.dialect]["group"]
        weights = names.sql(s.dialect, "_weights")
        out += [f"CREATE TABLE {weights} (queue {key} NOT NULL, fair_key {key} NOT NULL, "
                f"weight INTEGER NOT NULL, PRIMARY KEY (queue, fair_key));",
                f"INSERT INTO {weights} (queue, fair_key, weight) "
                f"VALUES ('{names.spec('')}', 't0', 2);"]
    if s.dead == "table":
        out.append(f"CREATE TABLE {names.sql(s.dialect, '_dead')} (\n    "
                   + ",\n    ".join(columns(s, dead=True)) + "\n);")
    text = "TEXT" if s.dialect != "mysql" else "VARCHAR(64)"
    out.append(f"CREATE TABLE {names.sql(s.dialect, '_ledger')} (job_key {text} NOT NULL);")
    if s.pauses == "table":
        wide = "TEXT" if s.dialect != "mysql" else "VARCHAR(255)"
        out.append(f"CREATE TABLE {names.sql(s.dialect, '_pauses')} (queue {wide} NOT NULL, "
                   f"paused_group {text} NULL);")
    if s.after != "none":
        t = _TYPES[s.dialect]
        idt = t["bigint"] if s.id == "integer" else t[s.id]
        out.append(f"CREATE TABLE {names.sql(s.dialect, '_after')} (job_id {idt} NOT NULL, "
                   f"after_id {idt} NOT NULL, on_failure {text} NOT NULL, "
                   f"PRIMARY KEY (job_id, after_id));")
    return "\n".join(out) + "\n"


def spec(s: Shape, names: Names | None = None) -> str:
    names = names or Names(s.name)
    lines = [f'table = "{names.spec()}"', f'dialect = "{s.dialect}"',
             f'ddl = "migrations/{s.name}.sql"', f'claim = "{s.form}"']
    if s.form == "advisory":
        lines.append('advisory_key = "job-{id}"')
    if s.group == "fifo":
        lines.append("fifo = true")
    if s.count_crashes != "default":
        lines.append(f"count_crashes = {s.count_crashes}")
    if s.replace == "debounce":
        lines.append('unique = ["job_key"]')
    if s.after != "none":
        lines.append(f'after = "{names.spec("_after")}"')
    lines += ["", "[columns]",
              'id = { role = "id", generated = true }' if s.id == "integer" else 'id = "id"']
    if s.group != "none":
        lines.append('grp = "group"')
    if s.has_priority:
        lines.append('priority = "priority"')
    if s.has_retry_after:
        lines.append('retry_after = "retry_after"')
    lines.append('attempt = { role = "attempt", generated = true }')
    if s.finished == "kept":
        lines.append('processed_at = "processed_at"')
    if s.form == "lease":
        lines.append('locked_until = "locked_until"')
    if s.error == "text":
        lines.append('last_error = "error"')
    if s.result == "json":
        lines.append('result = "result"')
    if s.result == "typed":
        lines.append(f'result = {{ role = "result", type = "{PAYLOAD_MODULE}:Done" }}')
    if s.progress == "json":
        lines.append('progress = "progress"')
    if s.replace == "debounce" and s.has_retry_after:
        lines.append('enqueued_at = "enqueued_at"')
    if s.after != "none":
        lines.append('parents = "parents"')
    lines.append({"bytes": 'payload = { role = "payload", codec = "bytes" }',
                  "json": 'payload = { role = "payload", codec = "json" }',
                  "typed": 'payload = { role = "payload", codec = "json", '
                           f'type = "{PAYLOAD_MODULE}:Task" }}'}[s.payload])
    lines += ["", "[runtime]", f"lease = {LEASE_SECONDS}"]
    if s.dead != "none":
        lines.append(f"max_attempts = {MAX_ATTEMPTS}")
        lines += ["", "[dead_letter]", f'group = "{DEAD_GROUP}"' if s.dead == "group"
                  else f'table = "{names.spec("_dead")}"']
    flow = [f'pauses = "{names.spec("_pauses")}"'] if s.pauses == "table" else []
    flow += {"queue": ["concurrency = 3"], "key": ['key = "tenant"', "key_concurrency = 2"],
             "rate": ["rate = 50", "rate_seconds = 1",
                      f'rate_table = "{names.spec("_claims")}"'],
             "rate_key": ['key = "tenant"', "rate = 50", "rate_seconds = 1",
                          f'rate_table = "{names.spec("_claims")}"', "rate_per_key = true"],
             "fair": ['key = "tenant"', "fair = true"],
             "weighted": ['key = "tenant"', "fair = true",
                          f'weights_table = "{names.spec("_weights")}"'],
             }.get(s.limits, [])
    if flow:
        lines += ["", "[flow]", *flow]
    return "\n".join(lines) + "\n"


# The jobs of the ledger scenario: key -> what its handler does.
ACK, DROP, FAIL_ONCE, FAIL_ALWAYS, UNDECODABLE, CRASH, CANCELLED = (
    "ack", "drop", "fail_once", "fail_always", "undecodable", "crash", "cancelled")


@dataclass(frozen=True)
class Job:
    key: str  # A, B, ...: the job's name in the ledger
    kind: str


def jobs(s: Shape) -> list[Job]:
    """The jobs of the drain (the crashing job runs first, alone; see scenario.py)."""
    out = [Job("A", ACK), Job("B", DROP), Job("C", FAIL_ONCE)]
    if s.dead != "none":
        out.append(Job("D", FAIL_ALWAYS))  # without a destination it would fail for ever
    if undecodable_raw(s) is not None:
        out.append(Job("E", UNDECODABLE))
    return out


def undecodable_raw(s: Shape) -> str | None:
    """A stored payload that does not decode, where the column can hold one: text that is not
    JSON in a text column, JSON without the typed payload's fields. None for bytes payloads
    (every value decodes) and plain JSON in a JSON column (the server refuses non-JSON)."""
    if s.payload == "typed":
        return '{"other": 1}'
    if s.payload == "json" and s.dialect == "sqlite":
        return "{this is not json"
    return None


def payload(s: Shape, job: Job, task_type: type | None) -> object:
    if s.payload == "bytes":
        return f"{job.key}:{job.kind}".encode()
    if s.payload == "typed":
        assert task_type is not None
        return task_type(key=job.key, kind=job.kind)
    return {"key": job.key, "kind": job.kind}


def job_of(value: object) -> tuple[str, str]:
    """(key, kind) of a decoded payload."""
    if isinstance(value, bytes):
        key, kind = value.decode().split(":")
        return key, kind
    if isinstance(value, dict):
        return str(value["key"]), str(value["kind"])
    return str(value.key), str(value.kind)  # type: ignore[attr-defined]


def new_id(s: Shape, n: int) -> object | None:
    """The id a caller gives (None where the database generates it)."""
    if s.id == "integer":
        return None
    if s.id == "uuid":
        value = uuid.UUID(int=zlib.crc32(s.name.encode()) << 64 | n)
        return value if s.dialect == "postgres" else str(value)
    return f"job-{n:04d}"
