"""Settlements written many at a time: which ones may wait for a batch, and how a batch of
them runs.

The values a settlement binds are the runtime's (id, lease token, attempt, now, retry_after);
each generated function takes those of them its statement names. Acks, by far the most common
settlement, go as one statement for the whole batch where the module has one (FINISH_MANY);
the rarer kinds run one statement per row, in the same round trip or transaction.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from inboxgen.descriptor import TableDescriptor
    from inboxgen.runtime.backends.base import Backend, Step

# Settlements that are one statement each; a dead letter to a table is not where the module
# copies, checks and deletes (DEAD_LETTER_COPY: MySQL/MariaDB, SQLite).
_ONE_STATEMENT = frozenset({"finish", "retry", "retry_after", "dead_letter"})
# The values a batch statement takes one entry per row of (the guard's).
_PER_ROW = ("id", "locked_until", "attempt", "result", "progress")
# What a row may carry that only some batch statements write (PostgreSQL's take one per row).
_OWN = ("result", "progress")


def one_statement(descriptor: TableDescriptor, op: str) -> bool:
    """Whether settlement `op` is one statement whose result needs no reading in between."""
    return op in _ONE_STATEMENT and not (op == "dead_letter"
                                         and "DEAD_LETTER_COPY" in descriptor.statements)


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

    def step(self, op: str, values: dict[str, Any]) -> Step:
        """A call of `op` with the values it takes, for `Backend.together`."""
        return op, self.args(op, values)

    def batch_holds(self, op: str, rows: list[dict[str, Any]]) -> bool:
        """Whether `op`_many writes all that `rows` carry: an ack's result (a renewal's
        progress) is written only by a batch statement that takes one per row (PostgreSQL's),
        else by FINISH (RENEW), row by row."""
        carried = {k for k in _OWN if any(r.get(k) is not None for r in rows)}
        return not carried or carried <= set(self.args(f"{op}_many", dict.fromkeys(carried)))

    def plan(self, op: str, rows: list[dict[str, Any]]
             ) -> tuple[list[Step], Callable[[list[Any]], list[bool] | None]]:
        """The steps that settle every row of `rows` with `op`: one statement (`op`_many)
        where the module has it, else one per row; and how to read their results: whether
        each row changed, or None where a count is all they say (a row lock's rows are the
        transaction's, so a count says all)."""
        if len(rows) > 1 and self.has(f"{op}_many") and self.batch_holds(op, rows):
            batch: dict[str, Any] = {k: [r[k] for r in rows] for k in _PER_ROW if k in rows[0]}
            batch.update({k: v for k, v in rows[0].items() if k not in _PER_ROW})

            def settled(results: list[Any]) -> list[bool] | None:
                (changed,) = results
                if isinstance(changed, int):
                    return None
                ids = set(changed)
                return [r["id"] in ids for r in rows]

            return [self.step(f"{op}_many", batch)], settled
        return [self.step(op, r) for r in rows], lambda results: [bool(x) for x in results]

    async def many(self, conn: Any, op: str, rows: list[dict[str, Any]]) -> list[bool] | None:
        """Run settlement `op` for every row of `rows` on `conn` (see `plan`): whether each
        row changed, or None where a count is all the statement says. (In a pipeline not yet
        sent the results mean nothing: a row lock's settlements need no reading.)"""
        steps, read = self.plan(op, rows)
        return read(await self.backend.together(conn, steps))
