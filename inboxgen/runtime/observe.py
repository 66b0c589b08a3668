"""What a worker tells those watching it: claims and their round trips, the queue's lag, each
delivery (its handler's time and what became of the row), rows in work and leases lost.

An `Observer` overrides the calls it cares about; each is made on the worker's event loop and
must be quick. inboxgen.contrib.otel (OpenTelemetry traces and metrics) and
inboxgen.contrib.prometheus are observers; a worker without observers makes none of these calls.
A leaf module: it imports nothing of the runtime.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

# What became of a delivery's row, as Observer.settled() and Watch.decided() name it.
ACKED, DROPPED, RETRIED, DEAD_LETTERED = "acked", "dropped", "retried", "dead_lettered"


@attrs.frozen(cache_hash=True)  # observers look their state up by it on every job
class QueueInfo:
    """The queue a worker serves, as observers label it."""

    name: str  # the worker's name: "table" or "table:group" unless named otherwise
    table: str
    group: str | None
    dialect: str  # "postgres", "mysql" or "sqlite"


class Watch:
    """One delivery as an observer follows it, from before its handler runs to its end."""

    __slots__ = ()

    def handled(self, seconds: float) -> None:
        """The handler returned or raised after `seconds`."""

    def decided(self, outcome: str, error: BaseException | None) -> None:
        """What becomes of the row (ACKED, DROPPED, RETRIED or DEAD_LETTERED), and the
        handler's error where it failed."""

    def end(self) -> None:
        """The delivery is over (its settlement written, or handed to a later flush)."""


class Observer:
    def delivery(self, queue: QueueInfo, job_id: Any, attempt: int | None,
                 headers: Mapping[str, str]) -> Watch | None:
        """A delivery starts; the handler runs in the context this call leaves current (so a
        span made current here is the handler's parent). None: not followed."""
        return None

    def claimed(self, queue: QueueInfo, rows: int, seconds: float) -> None:
        """A claim came back with `rows` rows after a round trip of `seconds` (pipelined, the
        round trip that carried it)."""

    def lag(self, queue: QueueInfo, seconds: float) -> None:
        """How long the oldest job a claim took had been due (0 once a claim comes back short:
        nothing due is left waiting). Only for tables with a retry_after column."""

    def settled(self, queue: QueueInfo, outcome: str) -> None:
        """A row's settlement was written: ACKED, DROPPED, RETRIED or DEAD_LETTERED."""

    def serving(self, queue: QueueInfo, in_work: Callable[[], int]) -> None:
        """The worker started; `in_work()` says how many rows it holds at any time."""

    def stopped(self, queue: QueueInfo) -> None:
        """The worker shut down."""

    def lease_lost(self, queue: QueueInfo) -> None:
        """A lease ran out (or its row was taken) before the job's settlement was written."""


class Observation:
    """The observers of one worker, told together."""

    def __init__(self, queue: QueueInfo, observers: Sequence[Observer]) -> None:
        self.queue = queue
        # One given twice is told once (by identity: an observer need not be hashable).
        self.observers = tuple(o for i, o in enumerate(observers)
                               if not any(o is earlier for earlier in observers[:i]))
        # Told on every job: with one observer (the common case) its own methods, bound to the
        # queue, with no call of ours between.
        self.delivery: Callable[[Any, int | None, Mapping[str, str]], Watch | None]
        self.settled: Callable[[str], None]
        if len(self.observers) == 1:
            (one,) = self.observers
            self.delivery = functools.partial(one.delivery, queue)
            self.settled = functools.partial(one.settled, queue)
        else:
            self.delivery = self._deliveries
            self.settled = self._settled

    def _deliveries(self, job_id: Any, attempt: int | None,
                    headers: Mapping[str, str]) -> Watch | None:
        watches = [w for o in self.observers
                   if (w := o.delivery(self.queue, job_id, attempt, headers)) is not None]
        if not watches:
            return None
        return watches[0] if len(watches) == 1 else _Watches(watches)

    def claimed(self, rows: int, seconds: float) -> None:
        for o in self.observers:
            o.claimed(self.queue, rows, seconds)

    def lag(self, seconds: float) -> None:
        for o in self.observers:
            o.lag(self.queue, seconds)

    def _settled(self, outcome: str) -> None:
        for o in self.observers:
            o.settled(self.queue, outcome)

    def serving(self, in_work: Callable[[], int]) -> None:
        for o in self.observers:
            o.serving(self.queue, in_work)

    def stopped(self) -> None:
        for o in self.observers:
            o.stopped(self.queue)

    def lease_lost(self) -> None:
        for o in self.observers:
            o.lease_lost(self.queue)


class _Watches(Watch):
    __slots__ = ("watches",)

    def __init__(self, watches: list[Watch]) -> None:
        self.watches = watches

    def handled(self, seconds: float) -> None:
        for w in self.watches:
            w.handled(seconds)

    def decided(self, outcome: str, error: BaseException | None) -> None:
        for w in self.watches:
            w.decided(outcome, error)

    def end(self) -> None:
        # The last made current is the first to leave.
        for w in reversed(self.watches):
            w.end()
