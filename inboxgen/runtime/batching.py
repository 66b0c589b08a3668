"""Settlements written many at a time: which ones are one generated statement, and that
statement bound for each row.

The values a settlement binds are the runtime's (id, lease token, attempt, now, retry_after),
the same ones its generated function would pass; a statement with a parameter of its own (a
dead-letter group is a constant of the module) is left to its function.
"""

from __future__ import annotations

from typing import Any

from inboxgen.descriptor import TableDescriptor

# A dead letter to a table copies, checks and deletes: several statements, never batched.
_ONE_STATEMENT = frozenset({"finish", "retry", "retry_after", "dead_letter"})


def one_statement(descriptor: TableDescriptor, op: str) -> bool:
    """Whether settlement `op` is one statement whose result needs no reading in between."""
    return op in _ONE_STATEMENT and not (op == "dead_letter"
                                         and descriptor.dead_letter_table is not None)


def bind_many(descriptor: TableDescriptor, op: str, values: list[dict[str, Any]]
              ) -> tuple[str, list[dict[str, Any]]] | None:
    """`op`'s generated statement and its parameters for each of `values`, or None where it
    is not one statement or takes a parameter the values do not hold."""
    name = op.upper()
    params = descriptor.statement_params.get(name)
    if not one_statement(descriptor, op) or params is None or not all(
            p in v for v in values for p in params):
        return None
    return descriptor.statements[name], [{p: v[p] for p in params} for v in values]


def by_op(pending: list[tuple[str, Any]]) -> dict[str, list[Any]]:
    """Queued settlements grouped by kind, in the order each kind first came."""
    groups: dict[str, list[Any]] = {}
    for op, item in pending:
        groups.setdefault(op, []).append(item)
    return groups
