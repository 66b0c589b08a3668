"""A queue table resolved against its DDL: what the statements and the renderer work from."""

from __future__ import annotations

import keyword
import re

import attrs

from inboxgen.descriptor import RuntimeDefaults
from inboxgen.generate.catalog import Column
from inboxgen.generate.dialects import LEASE, Dialect
from inboxgen.generate.spec import Spec


@attrs.frozen
class Field:
    """One column of the queue table as the generated module sees it."""

    column: Column
    attr: str  # the Python attribute name
    role: str | None
    generated: bool  # left out of insert: the database fills it

    @property
    def name(self) -> str:
        return self.column.name

    @property
    def optional(self) -> bool:
        """Enqueue may leave it at None: the column's DDL default fills it then."""
        return not self.generated and self.column.default_sql is not None


@attrs.frozen
class TableRef:
    schema: str | None
    name: str


@attrs.frozen
class Queue:
    spec: Spec
    dialect: Dialect
    table: TableRef
    form: str
    fifo: bool
    count_crashes: bool
    fields: tuple[Field, ...]
    codec: str | None  # payload codec: json, bytes, text
    payload_type: str | None  # "module:Class"
    advisory_key: tuple[tuple[str, str], ...]  # (literal text, attr name or "") pieces
    dead_letter_group: str | None
    dead_letter_table: TableRef | None
    unique: tuple[Field, ...]
    runtime: RuntimeDefaults
    claim_index: str | None = None  # the index serving the claim order, where it has a name

    def role(self, role: str) -> Field | None:
        return next((f for f in self.fields if f.role == role), None)

    @property
    def id(self) -> Field:
        f = self.role("id")
        assert f is not None
        return f

    @property
    def insert_fields(self) -> tuple[Field, ...]:
        return tuple(f for f in self.fields if not f.generated)

    @property
    def lease(self) -> bool:
        return self.form == LEASE

    def time_text(self, field: Field) -> bool:
        """SQLite keeps times as text in one fixed UTC format."""
        return self.dialect.name == "sqlite" and field.role in (
            "retry_after", "processed_at", "locked_until")



def attr_name(column: str) -> str:
    """A Python attribute name for a column: kept where it is one, else made one."""
    name = re.sub(r"\W+", "_", column).strip("_") or "column"
    if name[0].isdigit():
        name = "c_" + name
    # Soft keywords (match, case, type, _) are valid names; the list of those varies between
    # Python versions, and the output must not.
    if keyword.iskeyword(name) or name in ("self", "cls"):
        name += "_"
    return name
