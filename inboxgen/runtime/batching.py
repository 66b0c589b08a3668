"""Settlements written many at a time: which ones may wait for a batch, and how a batch of
them runs.

The values a settlement binds are the runtime's (id, lease token, attempt, now, retry_after);
each generated function takes those of them its statement names. Acks, by far the most common
settlement, go as one statement for the whole batch where the module has one (FINISH_MANY);
the rarer kinds run one statement per row, in the same round trip or transaction.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from inboxgen.descriptor import TableDescriptor
    from inboxgen.runtime.backends import Backend

# A dead letter to a table copies, checks and deletes: several statements, never batched.
_ONE_STATEMENT = frozenset({"finish", "retry", "retry_after", "dead_letter"})
# The values a batch statement takes one entry per row of (the guard's).
_PER_ROW = ("id", "locked_until", "attempt")


def one_statement(descriptor: TableDescriptor, op: str) -> bool:
    """Whether settlement `op` is one statement whose result needs no reading in between."""
    return op in _ONE_STATEMENT and not (op == "dead_letter"
                                         and descriptor.dead_letter_table is not None)


def by_op(pending: list[tuple[str, Any]]) -> dict[str, list[Any]]:
    """Queued settlements grouped by kind, in the order each kind first came."""
    groups: dict[str, list[Any]] = {}
    for op, item in pending:
        groups.setdefault(op, []).append(item)
    return groups


class Calls:
    """The generated functions of one table called with the runtime's values: each gets the
    keyword arguments it takes (they follow the table's roles)."""

    def __init__(self, descriptor: TableDescriptor, backend: Backend) -> None:
        self.descriptor = descriptor
        self.backend = backend
        self._names: dict[str, frozenset[str]] = {}

    def has(self, op: str) -> bool:
        return getattr(self.descriptor.ops, op, None) is not None

    def args(self, op: str, values: dict[str, Any]) -> dict[str, Any]:
        names = self._names.get(op)
        if names is None:
            fn = getattr(self.descriptor.ops, op)
            names = frozenset(inspect.signature(fn).parameters) - {"conn"}
            self._names[op] = names
        return {k: v for k, v in values.items() if k in names}

    async def __call__(self, conn: Any, op: str, **values: Any) -> Any:
        return await self.backend.call(conn, op, **self.args(op, values))

    async def many(self, conn: Any, op: str, rows: list[dict[str, Any]]) -> list[bool] | None:
        """Run settlement `op` for every row of `rows` on `conn`: one statement (`op`_many)
        where the module has it, else one per row. Returns whether each row changed, or None
        where the results are not known yet (a pipeline not yet sent)."""
        if len(rows) > 1 and self.has(f"{op}_many"):
            batch: dict[str, Any] = {k: [r[k] for r in rows] for k in _PER_ROW if k in rows[0]}
            batch.update({k: v for k, v in rows[0].items() if k not in _PER_ROW})
            changed = await self(conn, f"{op}_many", **batch)
            if isinstance(changed, int):
                return None  # a row lock's: the rows are the transaction's, a count says all
            settled = set(changed)
            return [r["id"] in settled for r in rows]
        results = await self.backend.call_each(conn, op, [self.args(op, r) for r in rows])
        return [bool(r) for r in results]
