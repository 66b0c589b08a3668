"""Where the next claim of a table starts: after the last row claimed, in claim order, not at
the head of it.

Every row a drain finished leaves an index entry at the head of the claim order until vacuum
removes it (autovacuum looks once a minute by default, and removes nothing an older snapshot
may still see: a long report, a backup, a replica's query), and every claim starting at the
head reads past them all; so does it past the rows due later at a more urgent priority than
the due ones, where no claim reads priority by priority (MySQL/MariaDB, SQLite). Rows ahead
of the start are finished, held by another claim, or came back since (a retry, a lease that
ran out, a row lock's rollback, an insert that committed late), or, where the claim order has
a priority or a due time, more urgent or due earlier than the last row claimed: for those,
claims start at the head once every REWIND_EVERY, and whenever a claim from the start comes
back short.

Behind a snapshot held open, a claim from the head reads every index entry the drain left
there (vacuum and InnoDB's purge keep them for that snapshot), so its cost grows with the
drain: 1,000,000 rows in, one such claim a second would take most of the claimer's time. So
the periodic claim from the head comes no more often than keeps what it costs beyond a claim
from the start within HEAD_SHARE of the time between two; a row behind the start then waits
that much longer while claims keep coming back full.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from inboxgen.descriptor import TableDescriptor

# How often claims go back to the head of the claim order: the longest a row behind the start
# waits while claims keep coming back full.
REWIND_EVERY = 1.0
# The most of the time between two periodic claims from the head that their extra cost may take.
HEAD_SHARE = 0.05


# A claim's start: claim()'s arguments naming the row to start after (None: the head).
Start = dict[str, Any] | None

# claim()'s argument for each role of the claim order after the group, the id last.
_ARGS = (("priority", "from_priority"), ("retry_after", "from_retry_after"), ("id", "from_id"))


def _claim_params(d: TableDescriptor) -> tuple[str, ...]:
    """The parameters of the statement that reads a claim's rows: CLAIM, or the advisory
    form's CANDIDATES."""
    params = d.statement_params
    return tuple(params.get("CLAIM", ()) or params.get("CANDIDATES", ()))


def claims_from_id(d: TableDescriptor) -> bool:
    """Whether the table's claim takes a start (`from_id`): the generator gives one to lease,
    row-lock and advisory tables with an integer id whose claim order columns are NOT NULL
    (FIFO claims take their groups' heads instead). A module built without one (SQLite's,
    before they took one) claims from the head."""
    return "from_id" in _claim_params(d) and not d.fifo


_LAST_UUID = 2**128 - 1


def one_past(row_id: Any) -> Any:
    """The id after `row_id` in claim order: an integer plus one, or the uuid whose number is
    one more (PostgreSQL sorts uuids as their numbers)."""
    if isinstance(row_id, uuid.UUID):
        return uuid.UUID(int=min(row_id.int + 1, _LAST_UUID))
    return int(row_id) + 1


class ClaimStart:
    """The start the next claim of a worker takes (None: the head). Concurrent claims (a row
    lock's slots) share it: each starts where the furthest claim so far ended, and passes
    over the rows the others hold."""

    def __init__(self, d: TableDescriptor) -> None:
        params = _claim_params(d)
        # (claim() argument, row attribute), in claim order.
        self._order = [(arg, d.role_attrs[role]) for role, arg in _ARGS if arg in params]
        self.key: tuple[Any, ...] | None = None  # the start's values, the id one past the row's
        self._every = REWIND_EVERY  # between two periodic claims from the head
        self._rewind_at = time.monotonic() + self._every
        self._returned_at = float("-inf")  # when this worker last returned rows (returned())
        self._usual: float | None = None  # what a claim from a start takes (a moving average)

    def at(self) -> Start:
        if self.key is not None and time.monotonic() >= self._rewind_at:
            self.rewind()
        if self.key is None:
            return None
        return {arg: value for (arg, _), value in zip(self._order, self.key, strict=True)}

    def rewind(self) -> None:
        self.key = None
        self._rewind_at = time.monotonic() + self._every

    def returned(self) -> None:
        """This worker returned rows behind the start (a retry, a round rolled back): the next
        claim starts at the head."""
        self._returned_at = time.monotonic()
        self.rewind()

    def after(self, row: Any) -> None:
        *first, last = (getattr(row, attr) for _, attr in self._order)
        key = (*first, one_past(last))
        self.key = key if self.key is None else max(self.key, key)

    def took(self, start: Start, rows: Sequence[Any], limit: int, seconds: float) -> bool:
        """Note a claim that started at `start` and took `rows` (in claim order) of `limit`,
        in `seconds`: the next starts after them, or at the head
        where this one came back short from a start (rows behind it may be due). Returns
        whether the caller should claim again at once, from the head, rather than wait as a
        drained queue does: where this worker returned rows within the last REWIND_EVERY,
        which a claim from the head since may have missed, uncommitted (a drain that ends
        within a second of a retry would leave it to the poll)."""
        self.timed(start, seconds)
        if rows:
            self.after(rows[-1])
        if start is not None and len(rows) < limit:
            self.rewind()
            return time.monotonic() - self._returned_at < REWIND_EVERY
        return False

    def timed(self, start: Start, seconds: float) -> None:
        """A claim from `start` took `seconds`: from a start, what such claims take; from the
        head, how long until the next periodic one (HEAD_SHARE)."""
        if start is not None:
            usual = self._usual
            self._usual = seconds if usual is None else usual + (seconds - usual) / 16
            return
        extra = max(0.0, seconds - (self._usual or 0.0))
        self._every = max(REWIND_EVERY, extra / HEAD_SHARE)
        self._rewind_at = time.monotonic() + self._every
