"""Prometheus metrics of a worker or service, through prometheus_client (`inboxgen[prometheus]`).

    service.expose_metrics(port=9464)            # http://127.0.0.1:9464/metrics while it runs
    Worker(..., observers=[Prometheus()])        # into the default registry, served by you

Every metric is labelled by `queue` (the worker's name), `table` and `group` ("" for a table
without groups); see docs/observability.md for the list.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import start_http_server

from inboxgen.runtime.observe import (
    ACKED,
    DEAD_LETTERED,
    DROPPED,
    RETRIED,
    Observer,
    QueueInfo,
    Watch,
)

log = logging.getLogger("inboxgen.metrics")

LABELS = ("queue", "table", "group")
# Handler times from a millisecond to a quarter of an hour; claim round trips are shorter.
HANDLER_BUCKETS = (.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300,
                   900)
OUTCOMES = (ACKED, DROPPED, RETRIED, DEAD_LETTERED)
CLAIM_BUCKETS = (.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5)


class Prometheus(Observer):
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else REGISTRY
        r = self.registry
        self.deliveries = Counter("inboxgen_deliveries", "Deliveries whose settlement was "
                                  "written, by outcome", (*LABELS, "outcome"), registry=r)
        self.handler_duration = Histogram("inboxgen_handler_duration_seconds",
                                          "Time a handler ran", LABELS, registry=r,
                                          buckets=HANDLER_BUCKETS)
        self.claim_duration = Histogram("inboxgen_claim_duration_seconds",
                                        "Round trip of a claim", LABELS, registry=r,
                                        buckets=CLAIM_BUCKETS)
        self.queue_lag = Gauge("inboxgen_queue_lag_seconds", "How long the oldest job the "
                               "last claim took had been due (0: nothing due waits)", LABELS,
                               registry=r)
        self.in_work = Gauge("inboxgen_jobs_in_work", "Jobs claimed and not yet settled",
                             LABELS, registry=r)
        self.leases_lost = Counter("inboxgen_leases_lost", "Leases that ran out before the "
                                   "job's settlement was written", LABELS, registry=r)
        self.dead_lettered = Counter("inboxgen_dead_lettered", "Rows moved to the dead letters",
                                     LABELS, registry=r)
        self._server: Any = None
        self._series: dict[QueueInfo, _Series] = {}

    @staticmethod
    def labels(queue: QueueInfo) -> Mapping[str, str]:
        return {"queue": queue.name, "table": queue.table, "group": queue.group or ""}

    def of(self, queue: QueueInfo) -> _Series:
        """The queue's series, looked up once: prometheus_client's labels() is slow next to
        a job."""
        series = self._series.get(queue)
        if series is None:
            series = self._series[queue] = _Series(self, self.labels(queue))
        return series

    def delivery(self, queue: QueueInfo, job_id: Any, attempt: int | None,
                 headers: Mapping[str, str]) -> Watch | None:
        return _Timed(self.of(queue).handler.observe)

    def claimed(self, queue: QueueInfo, rows: int, seconds: float) -> None:
        self.of(queue).claim.observe(seconds)

    def lag(self, queue: QueueInfo, seconds: float) -> None:
        self.of(queue).lag.set(seconds)

    def settled(self, queue: QueueInfo, outcome: str) -> None:
        series = self.of(queue)
        series.deliveries[outcome].inc()
        if outcome == DEAD_LETTERED:
            series.dead_lettered.inc()

    def serving(self, queue: QueueInfo, in_work: Callable[[], int]) -> None:
        # Every series exists from the start, at 0 (_Series makes them), so that rates and
        # alerts see the queue before its first failure.
        self.of(queue).in_work.set_function(in_work)

    def stopped(self, queue: QueueInfo) -> None:
        self.of(queue).in_work.set(0)

    def lease_lost(self, queue: QueueInfo) -> None:
        self.of(queue).leases_lost.inc()

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


class _Timed(Watch):
    def __init__(self, observe: Callable[[float], None]) -> None:
        self.observe = observe

    def handled(self, seconds: float) -> None:
        self.observe(seconds)


class _Series:
    """One queue's series of every metric."""

    def __init__(self, p: Prometheus, labels: Mapping[str, str]) -> None:
        self.deliveries = {o: p.deliveries.labels(**labels, outcome=o) for o in OUTCOMES}
        self.handler = p.handler_duration.labels(**labels)
        self.claim = p.claim_duration.labels(**labels)
        self.lag = p.queue_lag.labels(**labels)
        self.in_work = p.in_work.labels(**labels)
        self.leases_lost = p.leases_lost.labels(**labels)
        self.dead_lettered = p.dead_lettered.labels(**labels)
