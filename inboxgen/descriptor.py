"""What a generated module tells the runtime about its table (the contract committed modules
import, with values.py): no SQL parsing at run time."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs


@attrs.frozen
class RuntimeDefaults:
    """Spec defaults for settings that shape no SQL; the runtime's arguments override them."""

    workers: int = 1
    batch: int = 1
    lease_seconds: int = 30
    poll_interval: float = 1.0
    max_attempts: int | None = None


@attrs.frozen(kw_only=True)
class Operations:
    """The generated functions of one table (sync or async); None where the form has none.

    Their keyword arguments follow the table's roles (a table without groups takes no `group`),
    which the runtime reads from the descriptor.
    """

    claim: Callable[..., Any] | None = None
    fifo_claim: Callable[..., Any] | None = None
    candidates: Callable[..., Any] | None = None
    take: Callable[..., Any] | None = None
    relock: Callable[..., Any] | None = None
    claim_guard: Callable[..., Any] | None = None
    claim_unguard: Callable[..., Any] | None = None
    lock: Callable[..., Any] | None = None
    unlock: Callable[..., Any] | None = None
    renew: Callable[..., Any] | None = None
    finish: Callable[..., Any] | None = None
    retry: Callable[..., Any] | None = None
    retry_after: Callable[..., Any] | None = None
    dead_letter: Callable[..., Any] | None = None
    insert: Callable[..., Any] | None = None
    insert_many: Callable[..., Any] | None = None
    notify: Callable[..., Any] | None = None


@attrs.frozen
class TableDescriptor:
    """A queue table as generated: its claim form, roles, statements and row types."""

    table: str
    schema: str | None
    dialect: str  # "postgres", "mysql" or "sqlite"
    form: str  # "row_lock", "lease" or "advisory"
    fifo: bool
    count_crashes: bool  # row lock: claims count the attempt in a transaction of their own
    roles: Mapping[str, str]  # role -> column name
    role_attrs: Mapping[str, str]  # role -> attribute of the claimed row
    columns: tuple[str, ...]
    statements: Mapping[str, str]  # statement name -> exact SQL text
    statement_params: Mapping[str, tuple[str, ...]]  # statement name -> placeholder names
    claimed_row: type[Any]
    new_row: type[Any]
    codec: str | None
    decode_payload: Callable[[Any], Any] | None
    advisory_key: Callable[[Any], str] | None
    dead_letter_group: str | None
    dead_letter_table: str | None
    defaults: RuntimeDefaults
    source: str  # the spec the module was generated from
    ops: Operations
    async_ops: Operations | None  # PostgreSQL only

    @property
    def claim_counts_attempt(self) -> bool:
        """Lease and advisory claims count the attempt; row lock counts it at a retry."""
        return (self.form != "row_lock" or self.count_crashes) and "attempt" in self.roles

    @property
    def qualified_name(self) -> str:
        return f"{self.schema}.{self.table}" if self.schema else self.table
