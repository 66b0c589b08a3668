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

    @staticmethod
    def labels(queue: QueueInfo) -> Mapping[str, str]:
        return {"queue": queue.name, "table": queue.table, "group": queue.group or ""}

    def delivery(self, queue: QueueInfo, job_id: Any, attempt: int | None,
                 headers: Mapping[str, str]) -> Watch | None:
        return _Timed(self.handler_duration.labels(**self.labels(queue)).observe)

    def claimed(self, queue: QueueInfo, rows: int, seconds: float) -> None:
        self.claim_duration.labels(**self.labels(queue)).observe(seconds)

    def lag(self, queue: QueueInfo, seconds: float) -> None:
        self.queue_lag.labels(**self.labels(queue)).set(seconds)

    def settled(self, queue: QueueInfo, outcome: str) -> None:
        labels = self.labels(queue)
        self.deliveries.labels(**labels, outcome=outcome).inc()
        if outcome == DEAD_LETTERED:
            self.dead_lettered.labels(**labels).inc()

    def serving(self, queue: QueueInfo, in_work: Callable[[], int]) -> None:
        labels = self.labels(queue)
        self.in_work.labels(**labels).set_function(in_work)
        # Every series exists from the start, at 0, so that rates and alerts see the queue
        # before its first failure.
        for outcome in OUTCOMES:
            self.deliveries.labels(**labels, outcome=outcome)
        for metric in (self.leases_lost, self.dead_lettered, self.handler_duration,
                       self.claim_duration):
            metric.labels(**labels)

    def stopped(self, queue: QueueInfo) -> None:
        self.in_work.labels(**self.labels(queue)).set(0)

    def lease_lost(self, queue: QueueInfo) -> None:
        self.leases_lost.labels(**self.labels(queue)).inc()

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
