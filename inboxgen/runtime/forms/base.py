"""What a claim form is to the worker.

A form says how a slot claims and works a round, how a delivery in a transaction and a
settlement run, and what a row still in work is left as at shutdown. The worker holds one Form
(chosen once, in forms/__init__.py) and never asks which it is; the forms use the worker's
delivery steps (`_deliver`, `_execute_settlement`, `_run_handler`, ...), which are the same for
all of them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from inboxgen.runtime.connecting import first_line
from inboxgen.runtime.outcomes import FINISH, Settlement

if TYPE_CHECKING:
    from inboxgen.runtime.worker import Worker, _Held

log = logging.getLogger("inboxgen.worker")


class Form:
    # Shutdown: what becomes of rows still in work when their jobs are cancelled.
    unfinished = ""
    # Whether the form holds locks on one server session across transactions (advisory), which
    # a transaction pooler cannot give.
    needs_one_session = False
    # Tasks of the form's own that wait for work (their places in the worker's idle set): the
    # worker is quiet only when they wait too.
    waiters: frozenset[int] = frozenset()

    def __init__(self, worker: Worker) -> None:
        self.w = worker

    @property
    def connections(self) -> int:
        """How many connections the form keeps busy at once: one per slot."""
        return self.w.workers

    def claim_resources(self) -> None:
        """Before the worker's connections open: what the form holds outside the database."""

    def release_resources(self) -> None:
        """After the worker's connections closed (or its start failed)."""

    def start(self) -> None:
        """Once the statements are prepared: tasks of the form's own."""

    async def stop(self) -> None:
        """Once the slots have ended."""

    async def serve(self, index: int, worked: Callable[[], None]) -> None:
        """One round of slot `index`: claim, deliver, settle; then wait for the poll interval
        when the queue looked drained, or wake a waiting slot when the claim came back full."""
        drained = await self.round()
        worked()
        if drained:
            await self.w._wait(index, self.w.poll_interval)
        else:
            self.w._wake_waiting_slot()  # a full claim: more rows are likely due

    async def round(self) -> bool:
        """Claim and work one batch; True when the queue looked drained."""
        raise NotImplementedError

    async def deliver_in_transaction(self, h: _Held, payload: Any, conn: Any | None) -> None:
        """Run the handler with a connection whose writes commit with the ack, and settle."""
        raise NotImplementedError

    async def settle(self, h: _Held, s: Settlement, conn: Any | None) -> None:
        """Execute settlement `s` of row `h` (the worker counts it)."""
        raise NotImplementedError

    async def write(self, op: str, values: dict[str, Any]) -> bool:
        """A settlement of a row no connection of the worker holds, in a transaction of its
        own; True when it found its row."""
        w = self.w
        async with w._transaction() as tx:
            return bool(await w._call(tx, op, **values))

    def undecodable(self, h: _Held) -> Settlement:
        """A payload that does not decode, on a table with neither a dead-letter destination
        nor a retry_after column: dropped rather than looped on."""
        log.error("%s: row %s dropped: its payload does not decode and the table has neither a "
                  "dead-letter destination nor a retry_after column", self.w.name, h.id)
        return Settlement(FINISH, note="drop")

    def lost(self, held: list[_Held], err: BaseException) -> None:
        """A batch's transaction ended without its commit (a lost connection): what its rows
        settled is undone, and they will run again."""
        w = self.w
        ids = ", ".join(str(h.id) for h in held[:10]) + (", ..." if len(held) > 10 else "")
        w.stats.settlements_lost += len(held)
        # In an outage, counted in the line that ends it.
        quiet = w.outage.lost_connection(err, "settlements") and \
            w.outage.settlements_lost(len(held))
        (log.debug if quiet else log.error)(
            "%s: the settlements of row(s) %s were lost with their transaction (%s); those rows "
            "will run again", w.name, ids, first_line(err))

    async def missed(self, h: _Held, op: str) -> None:
        """A settlement changed no row: raises RowDeleted when the row is gone."""
        if await self.w.presence.gone(h.id):
            raise self.w._row_deleted(h, op)
        log.warning("%s: %s of row %s changed no row", self.w.name, op, h.id)
