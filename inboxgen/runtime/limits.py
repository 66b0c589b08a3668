"""[flow] limits: how a limited queue's claim runs. Its claims take turns, so each counts every
lease the claims before it wrote: on PostgreSQL claim() takes a transaction lock first, on SQLite
the transaction's write lock is the turn, and on MySQL a named lock is taken before the claim's
transaction and given up after its commit (a lock given up before the commit would let the next
claim count without this one's leases).

A key at its limit keeps its waiting rows due, and the claim reads past them to the first row
it may take: behind one tenant's backlog of 100,000 rows, every claim reads them all, and claims
take turns, so that read sets the pace of the whole queue. So a worker reads, once a second,
how many of the first LOOK_AHEAD due rows in claim order stand past the first key_concurrency
rows of their key (HELD_BACK: rows that wait behind their own key's, counted from the rows
alone, so that the count does not flip as a key's jobs come and go); while KEYS_WALK_FROM or
more do, it claims with CLAIM_BY_KEY, which walks the key's values as a fair claim does (the
first rows of each key it walks, one index probe a row) and takes turns across keys instead of
reading in claim order. Within a key, the claim order holds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from inboxgen.runtime.choices import CountedChoice
from inboxgen.values import KeyTurns, key_turns

if TYPE_CHECKING:
    from inboxgen.descriptor import TableDescriptor
    from inboxgen.runtime.backends.base import Backend, Step
    from inboxgen.runtime.batching import Calls


def limited(d: TableDescriptor) -> bool:
    """Whether the table's claims are limited ([flow] concurrency, key_concurrency, rate) or
    take turns across keys ([flow] fair) in two statements, CLAIM and CLAIM_MARK (PostgreSQL's
    fair claim without limits is one statement that needs no transaction of its own)."""
    params = d.statement_params.get("CLAIM", ())
    return any(p in params for p in ("concurrency", "key_concurrency", "rate")) or (
        "after" in params and "CLAIM_MARK" in d.statements)


def fair_turns(d: TableDescriptor, group: str | None, name: str = "CLAIM") -> KeyTurns | None:
    """Where the claims of `group` in this process by statement `name` (a [flow] fair table's
    CLAIM, a key-limited table's CLAIM_BY_KEY) stand in their walk over the key (the KeyTurns
    the generated claim() keeps); None where that statement does not walk."""
    params = d.statement_params.get(name, ())
    if "after" not in params:
        return None
    return key_turns(d.statements[name], group if "group" in params else None)


LOOK_AHEAD = 1000
KEYS_WALK_FROM = 900  # where the plain claim reads ten rows or more for each it takes


class KeyChoice(CountedChoice):
    """One worker's choice between a key-limited table's CLAIM and CLAIM_BY_KEY."""

    def __init__(self, calls: Calls, group: str | None) -> None:
        super().__init__(calls, group, "held_back", KEYS_WALK_FROM, LOOK_AHEAD)

    @property
    def by_key(self) -> bool:
        return self.walks


async def claim_in_turn(backend: Backend, calls: Calls, claim: Step, *,
                        generic_plan: bool) -> Any:
    """Run `claim` in a transaction of its own, under the claim turn where the table has one;
    returns its result. With `generic_plan` it runs its generic plan (a walk over the key's
    values, or a lease's claim by priority): planned anew at each call, its
    planning costs more than the claim (PostgreSQL)."""
    # MySQL: the turn outlives the transaction. Should its wait give up, CLAIM reads nothing
    # (it checks the turn is held).
    turned = calls.has("claim_turn")
    # One call: on PostgreSQL in pipeline mode (BEGIN, the turn and the claim's read travel
    # together, its marks with COMMIT), on MySQL one call on the connection's thread.
    async with backend.session() as conn:
        (result,) = await backend.transaction_together(
            conn, [claim], generic_plans=generic_plan,
            before=calls.step("claim_turn", {}) if turned else None,
            after=calls.step("claim_turn_end", {}) if turned else None)
    return result
