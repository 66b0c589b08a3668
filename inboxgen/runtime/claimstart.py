"""Where the next claim of a table claimed in id order starts (PostgreSQL, MySQL/MariaDB):
after the last row claimed, not at the head of the claim order.

Every row a drain finished leaves an index entry at the head of the claim order until vacuum
removes it (autovacuum looks once a minute by default, and removes nothing an older snapshot
may still see: a long report, a backup, a replica's query), and every claim starting at the
head reads past them all. Rows ahead of the start are finished, held by another claim, or came
back since (a retry, a lease that ran out, a row lock's rollback, an insert that committed
late): for those, claims start at the head once every REWIND_EVERY, and whenever a claim from
the start comes back short.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from inboxgen.descriptor import TableDescriptor

# How often claims go back to the head of the claim order: the longest a row behind the start
# waits while claims keep coming back full.
REWIND_EVERY = 1.0


def claims_from_id(d: TableDescriptor) -> bool:
    """Whether the table's claim takes a start (`from_id`): the generator gives one to
    PostgreSQL and MySQL/MariaDB lease and row-lock tables claimed in id order with an integer
    id (FIFO claims take their groups' heads instead)."""
    return "from_id" in d.statement_params.get("CLAIM", ()) and not d.fifo


class ClaimStart:
    """The start the next claim of a worker takes (None: the head). Concurrent claims (a row
    lock's slots) share it: each starts where the furthest claim so far ended, and passes
    over the rows the others hold."""

    def __init__(self) -> None:
        self.from_id: int | None = None
        self._rewind_at = time.monotonic() + REWIND_EVERY

    def at(self) -> int | None:
        if self.from_id is not None and time.monotonic() >= self._rewind_at:
            self.rewind()
        return self.from_id

    def rewind(self) -> None:
        self.from_id = None
        self._rewind_at = time.monotonic() + REWIND_EVERY

    def after(self, last_id: Any) -> None:
        start = int(last_id) + 1
        self.from_id = start if self.from_id is None else max(self.from_id, start)

    def took(self, start: int | None, ids: Sequence[Any], limit: int) -> None:
        """Note a claim that started at `start` and took `ids` (in claim order) of `limit`:
        the next starts after them, or at the head where this one came back short from a
        start (rows behind it may be due)."""
        if ids:
            self.after(ids[-1])
        if start is not None and len(ids) < limit:
            self.rewind()
