"""Which claim a table with priorities and due times runs: the plain one, or its twin that reads
the due rows priority by priority (CLAIM_BY_PRIORITY and CANDIDATES_BY_PRIORITY, PostgreSQL;
a key-limited lease's count of held-back rows follows the choice, HELD_BACK_BY_PRIORITY).

The plain claim reads the claim index (priority, retry_after, id) in one scan, so it reads past
every row due later at a more urgent priority than the due rows it takes: behind a million
of them a claim reads them all. Its twin skips them with one index probe per priority, but
the server plans it anew at every call (as it plans every claim), and that costs a claim of an
ordinary table a quarter more. So a worker counts the table's rows due later (SCHEDULED, which
stops counting at WALK_FROM) once a second (choices.py), and claims by priority while there
are WALK_FROM or more. Below that, reading past them costs the plain claim less than the twin's
planning does (about 8,000 index entries on PostgreSQL 15; docs/performance.md).

On a partitioned table each probe of that walk is made once per partition, so its module's
twin keeps to a list instead (as MySQL's, below): the priorities that have due rows, read
after each count that calls for the twin and after a claim that came back short (a priority
that falls due in between waits up to a second), each priority's due rows read in a LATERAL
of their own; where the list is empty, a claim (lease, row lock) and an advisory read are not sent
(forms/base.py: nothing_due). Behind 10,000,000 rows due later in ten partitions it took 0.90
ms a claim against 1.85 for the walk. Below WALK_FROM the worker claims with the plain claim,
as on one table.

A row lock's pipelined round runs the twin's generic plan (Backend's GENERIC_PLANS, for the
rest of the claim's transaction, sent with it), so it is planned once rather than at every
call. So do the lease's claim by priority and the advisory form's read by priority, each a
statement alone in autocommit: the setting goes with the statement in one pipeline, whose
Sync ends the implicit transaction the two share (Backend.planned_once), one round trip as
the statement alone. A transaction of its own (BEGIN, the setting, the statement, COMMIT)
took two, the rows fetched before COMMIT went: it cost the lease's drain 0.96x and the
advisory form's 0.76x of per-call plans behind 10,000,000 rows due later, where the setting
sent with the statement drained them at 1.09x and 1.01x, the claims at 0.86x-0.96x of the
plain claim on the empty table against 1.28x-1.55x (docs/performance.md). A row lock whose
handlers write in the job's transaction (transactional=True) keeps per-call plans: the
setting would hold for their statements; so does the advisory form's read where its
handlers are transactional.

Both claims take the same rows: the choice changes what a claim costs, never what it claims.

MySQL/MariaDB has no LATERAL: its twin is the plain claim kept to a list of priorities that
have due rows (`priorities`), one index range each, bounded by the due time. Its plain claim
reads every row due later at a more urgent priority, and every row due later after the due
ones where it comes back short, as a locking read that keeps each row it read locked (behind
1,000,000 of them, 2,000,000 row locks a claim; a row lock's slots filled the buffer pool with
lock heaps until the server aborted). So a MySQL worker always claims by priority, with the
list due_priorities() walked once a second (a probe per priority) and again after a claim
that came back short: a priority whose first row falls due meanwhile waits that long, as a row
ahead of a claim's start does (claimstart.py). A key-limited lease's count of held-back rows
keeps to the same list (HELD_BACK_BY_PRIORITY): the plain count, unlocked, read every row
due later ahead of the due ones, once a second (18 ms behind 200,000 of them, against 0.5).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from inboxgen.runtime.choices import CountedChoice

if TYPE_CHECKING:
    from inboxgen.runtime.batching import Calls

WALK_FROM = 5000


class PriorityChoice(CountedChoice):
    """One worker's choice between the plain claim and the claim by priority."""

    def __init__(self, calls: Calls, group: str | None) -> None:
        # MySQL, a partitioned PostgreSQL table: the list of priorities the claim keeps to.
        self._listed = calls.has("due_priorities")
        # PostgreSQL: the rows due later counted first (MySQL always claims by priority).
        counts = calls.has("scheduled") or not self._listed
        super().__init__(calls, group, "scheduled" if counts else "due_priorities", WALK_FROM)
        self._due: tuple[int, ...] | None = None  # the last list (None: not read)

    @property
    def by_priority(self) -> bool:
        return self.walks

    def counted(self, n: Any) -> None:
        if self.op == "due_priorities":
            self.then_read(n)
            self.walks = True
            return
        super().counted(n)

    def then(self) -> str | None:
        """A table whose claims by priority keep to a list and count first: the list, while
        the count calls for them."""
        return "due_priorities" if self._listed and self.op != "due_priorities" and \
            self.walks else None

    def then_read(self, result: Any) -> None:
        self._due = tuple(result)

    def claim_values(self) -> dict[str, Any]:
        """What a claim takes besides the choice: the priorities it keeps to, where it keeps
        to a list (None where the list could not be read: the claim reads it)."""
        return {"priorities": self._due} if self._listed and self.walks else {}

    @property
    def none_due(self) -> bool:
        """The claim keeps to a list, and the last one read was empty: a claim would take
        nothing."""
        return self._listed and self.walks and self._due == ()

    def came_short(self) -> None:
        """A claim came back short: where the claim by priority keeps to a list, read it again
        before the next (a priority may have come due)."""
        if self._listed and self.walks:
            self.recount()
