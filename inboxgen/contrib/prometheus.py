"""Prometheus metrics of a worker or service, through prometheus_client (`inboxgen[prometheus]`).

    service.expose_metrics(port=9464)            # http://127.0.0.1:9464/metrics while it runs
    Worker(..., observers=[Prometheus()])        # into the default registry, served by you

Every metric is labelled by `queue` (the worker's name), `table` and `group` ("" for a table
without groups); see docs/observability.md for the list.

The worker counts into plain numbers (runtime/tallies.py) and prometheus_client reads them when
it is scraped, through one collector per registry: a call into prometheus_client per job costs
a sizeable share of a short job. Observers on the same registry share its collector, and a queue
seen by two of them is counted once per delivery, in one series.
"""

from __future__ import annotations

import functools
import logging
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import prometheus_client.metrics
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import start_http_server
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from inboxgen.runtime.observe import QueueInfo
from inboxgen.runtime.tallies import OUTCOMES, Buckets, Tally, Tallying

log = logging.getLogger("inboxgen.metrics")

LABELS = ("queue", "table", "group")


class Prometheus(Tallying[Tally]):
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        super().__init__()
        self.registry = registry if registry is not None else REGISTRY
        self.collector = _collector_of(self.registry)
        self._server: Any = None

    @staticmethod
    def labels(queue: QueueInfo) -> Mapping[str, str]:
        return {"queue": queue.name, "table": queue.table, "group": queue.group or ""}

    def new_tally(self, queue: QueueInfo) -> Tally:
        # Every series exists from the queue's first sight (its worker's start), at 0, so that
        # rates and alerts see the queue before its first failure.
        return self.collector.tally(tuple(self.labels(queue).values()))

    def serving(self, queue: QueueInfo, in_work: Callable[[], int]) -> None:
        # A worker told of by two observers of one registry (a service's expose_metrics() and a
        # Prometheus() of its own in observers=, say) is counted by the first alone: `in_work`
        # is the worker's, the same for each of its observers.
        if not self.collector.counts(in_work, self):
            log.warning("%s: another Prometheus observer counts this worker into the same "
                        "registry; this one leaves it to that one", queue.name)
            self.tallies[queue] = Tally()  # counted into, never read
            return
        super().serving(queue, in_work)

    def stopped(self, queue: QueueInfo) -> None:
        t = self.tally(queue)
        if t.reading is not None:
            self.collector.stopped(t.reading, self)
        super().stopped(queue)

    # -- the endpoint -----------------------------------------------------------------------

    def start_server(self, port: int, host: str = "127.0.0.1") -> None:
        """Serve /metrics on host:port (prometheus_client's server, on a thread of its own)."""
        self._server, _ = start_http_server(port, addr=host, registry=self.registry)
        log.info("metrics on http://%s:%d/metrics", host, self._server.server_port)

    @property
    def port(self) -> int | None:
        """The port the endpoint listens on (the one given, or the one chosen for port 0)."""
        return None if self._server is None else int(self._server.server_port)

    def stop_server(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()


# One collector per registry, registered once, whichever observer comes first.
_collectors: weakref.WeakKeyDictionary[CollectorRegistry, _Collector] = \
    weakref.WeakKeyDictionary()
_collectors_lock = threading.Lock()


def _collector_of(registry: CollectorRegistry) -> _Collector:
    with _collectors_lock:
        collector = _collectors.get(registry)
        if collector is None:
            collector = _collectors[registry] = _Collector()
            registry.register(collector)
        return collector


class _Collector(Collector):
    """The tallies of every queue observed into one registry, as metric families."""

    def __init__(self) -> None:
        self.tallies: dict[tuple[str, ...], Tally] = {}
        # The observer counting each worker (by its in_work reading) while it serves.
        self.counters: dict[Callable[[], int], Prometheus] = {}
        self._lock = threading.Lock()  # tallies are added on workers' loops, read by scrapes

    def counts(self, worker: Callable[[], int], observer: Prometheus) -> bool:
        """Whether `observer` is the one counting `worker` (the first to ask)."""
        with self._lock:
            return self.counters.setdefault(worker, observer) is observer

    def stopped(self, worker: Callable[[], int], observer: Prometheus) -> None:
        with self._lock:
            if self.counters.get(worker) is observer:
                del self.counters[worker]

    def tally(self, labels: tuple[str, ...]) -> Tally:
        with self._lock:
            t = self.tallies.get(labels)
            if t is None:
                t = self.tallies[labels] = Tally()
                t.lag = 0.0
            return t

    def describe(self) -> list[Any]:
        # The families without samples: what registry.register() checks names against.
        return list(self._families([]))

    def collect(self) -> Iterator[Any]:
        with self._lock:
            tallies = list(self.tallies.items())
        return self._families(tallies)

    @staticmethod
    def _families(tallies: list[tuple[tuple[str, ...], Tally]]) -> Iterator[Any]:
        created = getattr(prometheus_client.metrics, "_use_created", True)  # see its
        # disable_created_metrics(), which a custom collector has to honour itself

        def when(t: Tally) -> float | None:
            return t.created if created else None

        deliveries = CounterMetricFamily("inboxgen_deliveries", "Deliveries whose settlement "
                                         "was written, by outcome", labels=(*LABELS, "outcome"))
        handler = HistogramMetricFamily("inboxgen_handler_duration_seconds",
                                        "Time a handler ran", labels=LABELS)
        claims = HistogramMetricFamily("inboxgen_claim_duration_seconds",
                                       "Round trip of a claim", labels=LABELS)
        lag = GaugeMetricFamily("inboxgen_queue_lag_seconds", "How long the oldest job the "
                                "last claim took had been due (0: nothing due waits)",
                                labels=LABELS)
        in_work = GaugeMetricFamily("inboxgen_jobs_in_work",
                                    "Jobs claimed and not yet settled", labels=LABELS)
        leases_lost = CounterMetricFamily("inboxgen_leases_lost", "Leases that ran out before "
                                          "the job's settlement was written", labels=LABELS)
        dead_lettered = CounterMetricFamily("inboxgen_dead_lettered",
                                            "Rows moved to the dead letters", labels=LABELS)
        for labels, t in tallies:
            for outcome in OUTCOMES:
                deliveries.add_metric((*labels, outcome), t.deliveries[outcome],
                                      created=when(t))
            _histogram(handler, labels, t.handler, when(t))
            _histogram(claims, labels, t.claims, when(t))
            lag.add_metric(labels, t.lag or 0.0)
            in_work.add_metric(labels, t.in_work)
            leases_lost.add_metric(labels, t.leases_lost, created=when(t))
            dead_lettered.add_metric(labels, t.dead_lettered, created=when(t))
        yield from (deliveries, handler, claims, lag, in_work, leases_lost, dead_lettered)


@functools.cache
def _les(bounds: tuple[float, ...]) -> tuple[str, ...]:
    """The `le` labels of the buckets, written as prometheus_client's Histogram writes them."""
    return tuple(floatToGoString(b) for b in (*bounds, float("inf")))  # type: ignore[no-untyped-call]


def _histogram(family: HistogramMetricFamily, labels: tuple[str, ...], buckets: Buckets,
               created: float | None) -> None:
    counts, total = buckets.read()
    cumulative, running = [], 0
    for le, n in zip(_les(buckets.bounds), counts, strict=True):
        running += n
        cumulative.append((le, float(running)))
    family.add_metric(labels, cumulative, total)
    if created is not None:
        family.add_sample(family.name + "_created", dict(zip(LABELS, labels, strict=True)),
                          created)
