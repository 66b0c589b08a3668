"""The values a worker passes around: the job a handler receives, a claimed row while it is in
work, and the worker's counts. A leaf module: it imports nothing of the runtime."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import attrs

from inboxgen.errors import ProgressNotKept

if TYPE_CHECKING:
    from inboxgen.descriptor import AfterState
    from inboxgen.runtime.observe import Watch
    from inboxgen.runtime.outcomes import Outcome, Settlement

P = TypeVar("P")


@attrs.frozen
class Job(Generic[P]):
    """One delivery, as the handler receives it."""

    payload: P  # the decoded payload (the whole row where the table has no payload column)
    id: Any
    attempt: int | None  # this delivery's number: the first reads 1
    row: Any  # the claimed row (the generated ClaimedRow)
    group: str | None
    headers: Mapping[str, str]
    connection: Any | None  # in transactional mode: writes here commit with the ack
    worker: str
    # Where progress() leaves what it reports (a table with a progress column); None: none.
    _on_progress: Callable[[dict[str, Any]], None] | None = attrs.field(
        default=None, alias="on_progress", repr=False)
    # What became of the jobs this one was enqueued after (`after`: a batch's callback reads
    # its batch here); None where it waited for none.
    after: AfterState | None = None

    def progress(self, fraction: float, note: str = "") -> None:
        """Report how far the job has come (0 to 1) and what it is doing: written with the
        next renewal of its lease, where the table has a progress column (and nowhere else:
        ProgressNotKept)."""
        if self._on_progress is None:
            raise ProgressNotKept("job.progress() needs a table with a progress column (role "
                                  "progress, on a lease): this one keeps none")
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"progress is a fraction from 0 to 1, not {fraction!r}")
        self._on_progress({"fraction": float(fraction), "note": str(note)})


Handler = Callable[[Job[Any]], "Outcome | None | Awaitable[Outcome | None]"]


@attrs.define
class Stats:
    delivered: int = 0
    acked: int = 0
    dropped: int = 0
    retried: int = 0
    dead_lettered: int = 0
    renewed: int = 0
    lease_lost: int = 0
    settlements_lost: int = 0  # written on a connection lost before they committed
    deleted: int = 0  # rows deleted while their jobs ran: their outcomes were not recorded
    failed_claims: int = 0

    def summary(self, lease: bool) -> str:
        """What a worker did, as its last line says it (`lease`: its renewals too)."""
        text = (f"{self.delivered} delivered, {self.acked} acked, {self.dropped} dropped, "
                f"{self.retried} retried, {self.dead_lettered} dead-lettered")
        if lease:
            text += f", {self.renewed} lease renewal(s)"
        if self.lease_lost:
            text += f", {self.lease_lost} lease(s) lost"
        if self.deleted:
            text += f", {self.deleted} row(s) deleted while in work"
        return text


@attrs.define
class Held:
    """A claimed row while it is in work."""

    row: Any
    id: Any
    attempt: int | None
    token: _dt.datetime | None = None  # lease: the expiry we wrote, our ownership token
    key: str | None = None  # advisory: the lock key
    lost: bool = False
    gone: bool = False  # lost because the row was deleted (not taken by another worker)
    settling: bool = False
    # Row lock, pipelined: settlements wait here for the next round trip (op, arguments).
    deferred: list[tuple[str, dict[str, Any]]] | None = None
    renewing: bool = False  # lease: in a renewal on its way (its settlement waits for it)
    started: float = 0.0  # when its delivery began (the event loop's clock)
    settled: bool = False  # its settlement ran (or waits for its batch's commit)
    # Row lock: its settlement commits with its round's transaction, so it is counted once
    # that has committed (Delivery.committed), and kept here until then.
    commits_later: bool = False
    uncounted: Settlement | None = None
    # Lease: its settlement waits for the settler's flush, which then counts it or reports it
    # lost (Delivery.settled_later); the slot has gone on meanwhile.
    flushing: bool = False
    handled: bool = False  # lease: its handler finished (its slot has room for another row)
    # What the handler raised (or the non-outcome it returned): logged once its settlement is
    # decided, so the line says what becomes of the row.
    failure: BaseException | None = None
    # What the error column keeps where no exception of the handler's says it (a payload that
    # does not decode).
    error: str | None = None
    # What the handler returned, where the table keeps results (its ack writes it).
    result: Any = None
    # What the handler last reported with job.progress(), until a renewal writes it.
    progress: Any = None
    # `after`: what became of the jobs it waited for, read before its handler runs.
    after: AfterState | None = None
    watch: Watch | None = None  # its observers' view of the delivery (observe.py)
    headers: Mapping[str, str] | None = None  # decoded once, where the observers read them
