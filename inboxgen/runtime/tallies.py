"""Counts a worker keeps for readers that come later (a Prometheus scrape, an OpenTelemetry
collection): plain numbers its event loop adds to on each job, which the metrics library reads
only when asked. A job then costs a few additions; a call into prometheus_client or the
OpenTelemetry SDK per job costs about what a no-op job does.

Only the event loop of the worker that serves a queue writes its tally; a reader on another
thread copies what it reads and may miss the job being counted at that moment, never a job that
was counted.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from inboxgen.runtime.observe import (
    ACKED,
    DEAD_LETTERED,
    DROPPED,
    RETRIED,
    Observer,
    QueueInfo,
    Watch,
)

OUTCOMES = (ACKED, DROPPED, RETRIED, DEAD_LETTERED)
# Handler times from a millisecond to a quarter of an hour; claim round trips are shorter.
HANDLER_BUCKETS = (.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300,
                   900)
CLAIM_BUCKETS = (.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5)


class Buckets:
    """Observations counted into fixed buckets, as a Prometheus histogram counts them: `counts[i]`
    holds the values over `bounds[i - 1]` and at most `bounds[i]`, the last count those past
    every bound."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def read(self) -> tuple[list[int], float]:
        """The count in each bucket (a copy, made in one step while the loop goes on counting)
        and the sum."""
        return self.counts.copy(), self.sum


class Tally:
    """One queue's counts since it was first seen: deliveries by outcome, dead letters, leases
    lost, the last lag, the rows in work (read from the worker), handler times and claim round
    trips."""

    __slots__ = ("deliveries", "dead_lettered", "leases_lost", "lag", "reading", "handler",
                 "claims", "created", "timing")

    def __init__(self) -> None:
        self.deliveries = dict.fromkeys(OUTCOMES, 0)
        self.dead_lettered = 0
        self.leases_lost = 0
        self.lag: float | None = None  # None until a claim told it
        self.reading: Callable[[], int] | None = None  # the worker's count, while it serves
        self.handler = Buckets(HANDLER_BUCKETS)
        self.claims = Buckets(CLAIM_BUCKETS)
        self.created = time.time()
        # Every delivery's watch: it only times the handler, so one serves them all.
        self.timing = Timing(self.handler)

    @property
    def in_work(self) -> int:
        reading = self.reading
        return 0 if reading is None else reading()


class Timing(Watch):
    """A delivery's watch that counts its handler's time, and nothing else."""

    __slots__ = ("buckets",)

    def __init__(self, buckets: Buckets) -> None:
        self.buckets = buckets

    def handled(self, seconds: float) -> None:
        self.buckets.observe(seconds)


T = TypeVar("T", bound=Tally)


class Tallying(Observer, Generic[T]):
    """An observer that counts into a tally per queue (`tally()`), for a reader to report."""

    def __init__(self) -> None:
        self.tallies: dict[QueueInfo, T] = {}

    def tally(self, queue: QueueInfo) -> T:
        """The queue's tally, made on first sight."""
        t = self.tallies.get(queue)
        if t is None:
            t = self.tallies[queue] = self.new_tally(queue)
        return t

    def new_tally(self, queue: QueueInfo) -> T:
        raise NotImplementedError

    # Told on every job, these look the tally up without a call to tally() where they can.

    def delivery(self, queue: QueueInfo, job_id: Any, attempt: int | None,
                 headers: Mapping[str, str]) -> Watch | None:
        return (self.tallies.get(queue) or self.tally(queue)).timing

    def claimed(self, queue: QueueInfo, rows: int, seconds: float) -> None:
        self.tally(queue).claims.observe(seconds)

    def lag(self, queue: QueueInfo, seconds: float) -> None:
        self.tally(queue).lag = seconds

    def settled(self, queue: QueueInfo, outcome: str) -> None:
        t = self.tallies.get(queue) or self.tally(queue)
        t.deliveries[outcome] += 1
        if outcome == DEAD_LETTERED:
            t.dead_lettered += 1

    def serving(self, queue: QueueInfo, in_work: Callable[[], int]) -> None:
        self.tally(queue).reading = in_work

    def stopped(self, queue: QueueInfo) -> None:
        self.tally(queue).reading = None

    def lease_lost(self, queue: QueueInfo) -> None:
        self.tally(queue).leases_lost += 1
