"""What `verify --database-url` asks of a live database, on each dialect's connection."""

from __future__ import annotations

from typing import Any

import attrs

from inboxgen.runtime.engines import Engine


@attrs.frozen
class LiveIndex:
    name: str
    columns: list[str]  # key columns; an expression's part is "(expression)"
    # Where its WHERE is exactly `<column> IS NULL`: that column (see catalog.null_column).
    where_null: str | None = None


class LiveDatabase:
    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def columns(self, schema: str | None, table: str) -> list[tuple[str, str, bool]]:
        """(name, type as the server spells it, nullable) of each column; [] when the table is
        not there."""
        raise NotImplementedError

    def unique_keys(self, schema: str | None, table: str) -> list[tuple[str, ...]]:
        """The columns of each unique index or constraint over plain columns, without a WHERE
        (the primary key included)."""
        raise NotImplementedError

    def indexes(self, schema: str | None, table: str) -> list[LiveIndex]:
        """Every valid index of the table (the primary key included)."""
        raise NotImplementedError

    def names_in_use(self, schema: str | None, table: str) -> list[str]:
        """The names a new index of the table cannot take (see catalog.names_in_use)."""
        raise NotImplementedError

    def engine(self) -> Engine | None:
        """The engine the server's answers show (runtime/engines.py); None for SQLite."""
        return None

    def sample_time(self) -> Any:
        """A time as the driver takes it, for planning a claim."""
        raise NotImplementedError

    def explain(self, sql: str, bound: dict[str, Any]) -> Any:
        """The plan of `sql` (nothing runs); raises the driver's error when it fails."""
        raise NotImplementedError

    def run(self, sql: str, bound: dict[str, Any]) -> None:
        """Run `sql`, a statement that changes no table (a session lock's)."""
        raise NotImplementedError

    def ordered_by_index(self, plan: Any, table: str, *, filters_rows: bool = True,
                         others: frozenset[str] = frozenset(), walk: bool = False) -> bool:
        """Whether `plan` reads `table` through an index in the claim's order. Without
        `filters_rows` (no group, no finished rows kept: a claim passes over leased and
        not-yet-due rows only) a walk of the table itself in that order serves it as well. With
        `walk` ([flow] fair), the claim sorts the few rows its walk over the keys read: only
        a scan of the table counts."""
        raise NotImplementedError
