"""A queue table resolved against its DDL: what the statements and the renderer work from."""

from __future__ import annotations

import itertools
import keyword
import re
from collections.abc import Collection, Sequence

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
class ClaimIndex:
    """The index that serves a table's claim: its key in claim `order` over the unfinished
    rows only, where the table keeps finished ones (`finished`, the processed_at column). On
    PostgreSQL and SQLite that is a partial index, `WHERE <finished> IS NULL`; MySQL/MariaDB
    has none, so there `finished` comes right after the group in the key instead: `IS NULL` is
    then a lookup, and the scan reads unfinished rows only, in order."""

    table: TableRef
    order: tuple[str, ...]
    finished: str | None = None
    grouped: bool = False  # the order starts with the group column

    @property
    def name(self) -> str:
        return f"{self.table.name}_claim"

    def free_name(self, d: Dialect, taken: Collection[str] = ()) -> str:
        """The name the advice gives the index: `name`, or where that is `taken` (the index
        the advice replaces often has it), the first of `name_2`, `name_3`, ... that is not,
        so that the advice runs as printed beside the old index. The table's part is cut to
        fit the server's limit on names (which would otherwise cut the name itself, maybe to
        one taken)."""
        for n in itertools.count(1):
            suffix = "_claim" if n == 1 else f"_claim_{n}"
            stem = self.table.name
            while stem and d.identifier_too_long(stem + suffix):
                stem = stem[:-1]  # the table's part gives way, as PostgreSQL's own names do
            candidate = stem + suffix
            if not any(d.same_name(candidate, t) for t in taken):
                return candidate
        raise AssertionError("unreachable")

    def columns(self, d: Dialect) -> tuple[str, ...]:
        if self.finished is None or d.partial_indexes:
            return self.order
        return self.keyed_by_finished()

    def keyed_by_finished(self) -> tuple[str, ...]:
        assert self.finished is not None
        g = 1 if self.grouped else 0
        return (*self.order[:g], self.finished, *self.order[g:])

    def where_null(self, d: Dialect) -> str | None:
        return self.finished if d.partial_indexes else None

    def served_by(self, d: Dialect, columns: Sequence[str], where_null: str | None) -> bool:
        """Whether an index with these key columns (and a WHERE that is exactly `<where_null>
        IS NULL`, where it has one) serves the claim. The key with processed_at after the group
        serves on every database."""
        if self.finished is None or (where_null is not None
                                     and d.same_name(where_null, self.finished)):
            return _leads(columns, self.order)
        return _leads(columns, self.keyed_by_finished())

    def ordered_by(self, columns: Sequence[str]) -> bool:
        """Whether a key leads with the claim order (over every row, finished ones too)."""
        return _leads(columns, self.order)

    def ddl(self, d: Dialect, taken: Collection[str] = ()) -> str:
        """The CREATE INDEX statement, as messages suggest it: named so as to run where the
        names in `taken` are the database's already (see `free_name`)."""
        n = d.advice_name
        table = (f"{n(self.table.schema)}.{n(self.table.name)}" if self.table.schema
                 else n(self.table.name))
        where = self.where_null(d)
        return (f"CREATE INDEX {n(self.free_name(d, taken))} ON {table} "
                f"({', '.join(n(c) for c in self.columns(d))})"
                + (f" WHERE {n(where)} IS NULL" if where else ""))


def _leads(columns: Sequence[str], order: Sequence[str]) -> bool:
    """Whether the key `columns` start with `order` (index names as written: compared without
    regard to case, as the claim-order check always has)."""
    return [c.lower() for c in columns[:len(order)]] == [c.lower() for c in order]


@attrs.frozen
class Limits:
    """[flow] limits, checked against the DDL: at most `concurrency` jobs of the queue in work at
    once, and at most `key_concurrency` of one value of column `key` (its name as the DDL
    writes it); with `fair`, claims take turns across the values of `key`."""

    concurrency: int | None
    key: str | None
    key_concurrency: int | None
    # At most `rate` claims in any `rate_seconds` (by the database's clock), each claim
    # recorded in `rate_table`.
    rate: int | None = None
    rate_seconds: float | None = None
    rate_table: TableRef | None = None
    rate_per_key: bool = False  # the rate counts each key's claims apart (column claim_key)
    fair: bool = False  # claims take turns across the key's values (round robin)
    # With `fair`, the table of weights (columns queue, fair_key, weight): a key of weight w
    # takes w turns in each round; 1 where it has no row.
    weights_table: TableRef | None = None
    # The index whose first column is the lease column, where one has a name: MySQL's counts
    # of the queue's jobs in work name it (statements/mysql.py).
    in_work_index: str | None = None


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
    result_type: str | None  # "module:Class": what the result column's JSON decodes to
    advisory_key: tuple[tuple[str, str], ...]  # (literal text, attr name or "") pieces
    dead_letter_group: str | None
    dead_letter_table: TableRef | None
    unique: tuple[Field, ...]
    runtime: RuntimeDefaults
    claim_index: str | None = None  # the index serving the claim order, where it has a name
    # The claim index the build asks for (verify --database-url looks for it on the server).
    suggested_index: ClaimIndex | None = None
    # [flow] pauses: the table whose rows pause the queue or one of its groups.
    pause_table: TableRef | None = None
    # [flow] limits on the jobs in work at once.
    limits: Limits | None = None
    # PostgreSQL's PARTITION BY: the rows are in partitions, which prune can drop whole.
    partitioned: bool = False
    # A column the database numbers on insert (AUTO_INCREMENT, serial, identity): on MySQL an
    # insert then reports the number it gave, and a statement that inserts nothing reports 0.
    numbers_inserts: bool = False
    # `after`: the table whose rows say which jobs each job waits for.
    after_table: TableRef | None = None

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
            "retry_after", "processed_at", "locked_until", "enqueued_at")



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
