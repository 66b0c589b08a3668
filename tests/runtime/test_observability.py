"""Seeing a queue: a worker's observers (OpenTelemetry, read with the SDK's in-memory
exporters; Prometheus, scraped from a service's endpoint) see each delivery, its outcome and
error, its handler's time, the claims and the queue's lag, on real databases."""

from __future__ import annotations

import asyncio
import datetime as dt
import re
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from dbcases import Layout, MakeQueue, Queue
from opentelemetry import trace
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import inboxgen.contrib.otel
from inboxgen import Backoff, Job, Service, Worker
from inboxgen.contrib.otel import OpenTelemetry, enqueue
from inboxgen.contrib.prometheus import Prometheus
from inboxgen.testing import run_until_idle

SHAPE = Layout(form="lease", group=True, dead="table", headers=True)  # retry_after
DOC = Path(__file__).resolve().parents[2] / "docs" / "observability.md"


class Otel:
    def __init__(self, durations: bool = True) -> None:
        self.spans = InMemorySpanExporter()
        self.tracing = TracerProvider()
        self.tracing.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.meters = MeterProvider(metric_readers=[self.reader])
        self.observer = OpenTelemetry(tracer_provider=self.tracing, meter_provider=self.meters,
                                      durations=durations)

    def points(self, name: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        assert data is not None
        return [p for rm in data.resource_metrics for sm in rm.scope_metrics
                for m in sm.metrics if m.name == name for p in m.data.data_points]


@pytest.fixture
def otel() -> Iterator[Otel]:
    o = Otel()
    yield o
    o.tracing.shutdown()
    o.meters.shutdown()


def jobs(q: Queue, otel: Otel, due: dt.datetime) -> dict[str, Any]:
    """Three jobs: one enqueued under a producer span (its headers carry the trace), one that
    fails every time, one without headers. Returns their ids."""
    conn = q.connect()
    ids: dict[str, Any] = {}
    with enqueue(q.mod.DESCRIPTOR, "g", tracer_provider=otel.tracing) as out:
        q.mod.insert(conn, q.new(payload="traced", headers=out.headers, retry_after=due))
        conn.commit()
        ids["traced"] = max(q.ids())
        out.sent(ids["traced"])
    for payload in ("fails", "plain"):
        q.mod.insert(conn, q.new(payload=payload, headers=None, retry_after=due))
        conn.commit()
        ids[payload] = max(q.ids())
    return ids


@pytest.mark.parametrize("dialect", ["postgres", "sqlite"])
def test_opentelemetry_follows_each_delivery_from_its_enqueue(queue: MakeQueue, otel: Otel,
                                                              dialect: str) -> None:
    q = queue(dialect, SHAPE)
    ids = jobs(q, otel, due=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=30))
    inner = trace.get_tracer("shop", tracer_provider=otel.tracing)

    def handler(job: Job[Any]) -> None:
        with inner.start_as_current_span("send the email"):  # the handler's own span
            if job.payload == "fails":
                raise RuntimeError("the mail server said no")

    worker = Worker(q.mod.DESCRIPTOR, handler, database=q.target, group="g", workers=2,
                    max_attempts=2, backoff=Backoff(base=0.01), listen=False,
                    observers=[otel.observer])
    asyncio.run(run_until(worker, lambda: worker.stats.dead_lettered == 1
                          and worker.stats.acked == 2))

    spans = otel.spans.get_finished_spans()
    consumer = [s for s in spans if s.kind == SpanKind.CONSUMER]
    by_id: dict[str, list[Any]] = {}
    for s in consumer:
        by_id.setdefault(str(s.attributes["messaging.message.id"]), []).append(s)
    assert sorted(by_id) == sorted(str(i) for i in ids.values())
    assert [s.attributes["inboxgen.attempt"] for s in by_id[str(ids["fails"])]] == [1, 2]
    assert [s.attributes["inboxgen.outcome"] for s in by_id[str(ids["fails"])]] == [
        "retried", "dead_lettered"]
    failed = by_id[str(ids["fails"])][-1]
    assert failed.status.status_code == StatusCode.ERROR
    assert [e.attributes["exception.message"] for e in failed.events] == [
        "the mail server said no"]
    (traced,) = by_id[str(ids["traced"])]
    assert traced.name == "process jobs:g"
    assert set(traced.attributes) == documented_span_attributes()
    assert traced.attributes["messaging.destination.name"] == "jobs:g"
    assert traced.attributes["inboxgen.outcome"] == "acked"
    # The delivery continues the producer's trace, carried in the headers column...
    (producer,) = [s for s in spans if s.kind == SpanKind.PRODUCER]
    assert producer.attributes["messaging.message.id"] == str(ids["traced"])
    assert traced.parent is not None and traced.parent.span_id == producer.context.span_id
    assert traced.context.trace_id == producer.context.trace_id
    # ...a job enqueued without them starts a trace of its own...
    (plain,) = by_id[str(ids["plain"])]
    assert plain.parent is None
    # ...and the handler's spans are the delivery's children, on the handler's thread too.
    handler_spans = [s for s in spans if s.name == "send the email"]
    assert {s.parent.span_id for s in handler_spans if s.parent} == {
        s.context.span_id for s in consumer}

    outcomes = {p.attributes["inboxgen.outcome"]: p.value
                for p in otel.points("inboxgen.deliveries")}
    assert outcomes == {"acked": 2, "retried": 1, "dead_lettered": 1}
    assert [p.value for p in otel.points("inboxgen.dead_lettered")] == [1]
    (handled,) = otel.points("inboxgen.handler.duration")
    assert handled.count == 4
    assert sum(p.count for p in otel.points("inboxgen.claim.duration")) >= 2
    # The first claim took jobs due 30 s ago; the last came back short: nothing waits now.
    (lag,) = otel.points("inboxgen.queue.lag")
    assert lag.value == 0


async def run_until(worker: Worker, done: Callable[[], bool], timeout: float = 60) -> None:
    await worker.start()
    try:
        async with asyncio.timeout(timeout):
            while not done():
                await asyncio.sleep(0.01)
    finally:
        worker.stop()
        await worker.shutdown()


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


@pytest.mark.parametrize("dialect", ["postgres", "mysql"])
def test_a_service_serves_prometheus_metrics_of_its_queues(queue: MakeQueue,
                                                           dialect: str) -> None:
    q = queue(dialect, SHAPE)
    conn = q.connect()
    q.mod.insert_many(conn, [q.new(payload=p, retry_after=dt.datetime.now(dt.UTC))
                             for p in ("a", "b", "fails")])
    conn.commit()

    def handler(job: Job[Any]) -> None:
        if job.payload == "fails":
            raise RuntimeError("no")

    service = Service(q.target)
    service.queue(q.mod.DESCRIPTOR, handler, group="g", max_attempts=1, listen=False)
    metrics = service.expose_metrics(port=0, registry=CollectorRegistry())

    async def main() -> dict[Any, float]:
        await service.start()
        try:
            (worker,) = service.workers
            await run_until_idle(worker, timeout=60)
            assert metrics.port is not None
            return await asyncio.to_thread(scrape, metrics.port)
        finally:
            service.stop()
            await service.shutdown()

    seen = asyncio.run(main())
    labels = (("group", "g"), ("queue", "jobs:g"), ("table", "jobs"))
    assert seen[("inboxgen_deliveries_total", tuple(sorted(
        (*labels, ("outcome", "acked")))))] == 2
    assert seen[("inboxgen_deliveries_total", tuple(sorted(
        (*labels, ("outcome", "dead_lettered")))))] == 1
    assert seen[("inboxgen_dead_lettered_total", labels)] == 1
    assert seen[("inboxgen_handler_duration_seconds_count", labels)] == 3
    assert seen[("inboxgen_claim_duration_seconds_count", labels)] >= 1
    assert seen[("inboxgen_jobs_in_work", labels)] == 0
    assert seen[("inboxgen_leases_lost_total", labels)] == 0
    assert metrics.port is None  # the endpoint closed with the service


def test_a_delivery_the_sampler_leaves_out_records_nothing(queue: MakeQueue) -> None:
    """A span left out by the sampler is still the handler's parent (so the handler's spans are
    left out too); a failure on it records nothing, and the metrics count as ever."""
    q = queue("sqlite", SHAPE)
    conn = q.connect()
    due = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
    q.mod.insert_many(conn, [q.new(payload=p, headers=None, retry_after=due)
                             for p in ("a", "fails")])
    conn.commit()
    spans = InMemorySpanExporter()
    tracing = TracerProvider(sampler=ParentBased(ALWAYS_OFF))
    tracing.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    inner = trace.get_tracer("shop", tracer_provider=tracing)
    parents: list[bool] = []

    def handler(job: Job[Any]) -> None:
        parents.append(trace.get_current_span().get_span_context().is_valid)
        with inner.start_as_current_span("send the email"):
            if job.payload == "fails":
                raise RuntimeError("no")

    worker = Worker(q.mod.DESCRIPTOR, handler, database=q.target, group="g", max_attempts=1,
                    listen=False, observers=[OpenTelemetry(tracer_provider=tracing,
                                                           meter_provider=meters)])
    try:
        asyncio.run(run_until_idle(worker, timeout=60))
        assert spans.get_finished_spans() == ()
        assert parents == [True, True]  # the delivery's span was current, though left out
        data = reader.get_metrics_data()
        assert data is not None
        outcomes = {p.attributes["inboxgen.outcome"]: p.value
                    for rm in data.resource_metrics for sm in rm.scope_metrics
                    for m in sm.metrics if m.name == "inboxgen.deliveries"
                    for p in m.data.data_points}
        assert outcomes == {"acked": 1, "dead_lettered": 1}
    finally:
        tracing.shutdown()
        meters.shutdown()


def test_spans_alone_with_a_meter_provider_that_records_nothing(queue: MakeQueue) -> None:
    """A no-op meter provider (spans alone): each delivery is still its span, with its
    outcome."""
    q = queue("sqlite", SHAPE)
    conn = q.connect()
    due = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
    q.mod.insert_many(conn, [q.new(payload=str(i), headers=None, retry_after=due)
                             for i in range(3)])
    conn.commit()
    spans = InMemorySpanExporter()
    tracing = TracerProvider()
    tracing.add_span_processor(SimpleSpanProcessor(spans))
    worker = Worker(q.mod.DESCRIPTOR, lambda job: None, database=q.target, group="g",
                    listen=False, observers=[OpenTelemetry(tracer_provider=tracing,
                                                           meter_provider=NoOpMeterProvider())])
    try:
        asyncio.run(run_until_idle(worker, timeout=60))
        assert sorted(s.attributes["inboxgen.outcome"] for s in spans.get_finished_spans()) \
            == ["acked"] * 3
    finally:
        tracing.shutdown()


def test_opentelemetry_reads_the_counts_kept_in_the_worker_when_it_collects(
        queue: MakeQueue, otel: Otel) -> None:
    """The counts are the worker's own, read at each collection: cumulative from one to the
    next, and still there once the worker has stopped; the durations are histograms."""
    q = queue("sqlite", SHAPE)
    conn = q.connect()

    def drain(n: int) -> None:
        due = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
        q.mod.insert_many(conn, [q.new(payload=str(i), headers=None, retry_after=due)
                                 for i in range(n)])
        conn.commit()
        worker = Worker(q.mod.DESCRIPTOR, lambda job: None, database=q.target, group="g",
                        batch=4, listen=False, observers=[otel.observer])
        asyncio.run(run_until_idle(worker, timeout=60))

    drain(25)
    (acked,) = otel.points("inboxgen.deliveries")
    assert (acked.attributes["inboxgen.outcome"], acked.value) == ("acked", 25)
    assert acked.attributes["messaging.destination.name"] == "jobs:g"
    assert [p.count for p in otel.points("inboxgen.handler.duration")] == [25]
    assert [p.value for p in otel.points("inboxgen.dead_lettered")] == [0]
    assert [p.value for p in otel.points("inboxgen.leases.lost")] == [0]
    assert otel.points("inboxgen.jobs.in_work") == []  # read from a worker while it serves
    drain(7)
    assert [p.value for p in otel.points("inboxgen.deliveries")] == [32]
    assert [p.count for p in otel.points("inboxgen.handler.duration")] == [32]


def test_opentelemetry_without_durations_reports_the_counts_alone(queue: MakeQueue) -> None:
    """durations=False: no histogram (no call into the SDK's metrics per job), the same counts."""
    q = queue("sqlite", SHAPE)
    conn = q.connect()
    due = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
    q.mod.insert_many(conn, [q.new(payload=str(i), headers=None, retry_after=due)
                             for i in range(5)])
    conn.commit()
    o = Otel(durations=False)
    worker = Worker(q.mod.DESCRIPTOR, lambda job: None, database=q.target, group="g",
                    listen=False, observers=[o.observer])
    try:
        asyncio.run(run_until_idle(worker, timeout=60))
        assert [p.value for p in o.points("inboxgen.deliveries")] == [5]
        assert o.points("inboxgen.handler.duration") == []
        assert o.points("inboxgen.claim.duration") == []
        assert len(o.spans.get_finished_spans()) == 5
    finally:
        o.tracing.shutdown()
        o.meters.shutdown()


def exposition(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]],
                                                     float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(generate_latest(registry).decode())
            for s in family.samples}


def test_prometheus_reads_each_queues_counts_at_the_scrape(queue: MakeQueue) -> None:
    """Two workers, each with a Prometheus observer of its own on one registry: one collector
    serves both queues; a scrape shows each queue's deliveries, and its histogram counts every
    handler call in its buckets. A worker with two observers on the registry counts once."""
    q = queue("sqlite", Layout(form="lease", group=True))
    conn = q.connect()
    due = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
    q.mod.insert_many(conn, [q.new(payload=g, retry_after=due, **{q.group_attr: g})
                             for g in ["a"] * 30 + ["b"] * 12])
    conn.commit()
    registry = CollectorRegistry()
    workers = [Worker(q.mod.DESCRIPTOR, lambda job: None, database=q.target, group=g, batch=8,
                      listen=False, observers=[Prometheus(registry) for _ in range(n)])
               for g, n in (("a", 1), ("b", 2))]

    async def main() -> None:
        for worker in workers:
            await run_until_idle(worker, timeout=60)

    asyncio.run(main())
    seen = exposition(registry)
    for group, n in (("a", 30), ("b", 12)):
        labels = (("group", group), ("queue", f"jobs:{group}"), ("table", "jobs"))
        assert seen[("inboxgen_deliveries_total",
                     tuple(sorted((*labels, ("outcome", "acked")))))] == n
        assert seen[("inboxgen_deliveries_total",
                     tuple(sorted((*labels, ("outcome", "retried")))))] == 0
        assert seen[("inboxgen_handler_duration_seconds_count", labels)] == n
        buckets = sorted((float(dict(key)["le"]), value) for (name, key), value in seen.items()
                         if name == "inboxgen_handler_duration_seconds_bucket"
                         and dict(key)["group"] == group)
        assert len(buckets) == 18 and buckets[-1] == (float("inf"), n)
        assert [v for _, v in buckets] == sorted(v for _, v in buckets)  # cumulative
        assert seen[("inboxgen_claim_duration_seconds_count", labels)] >= n / 8
        assert seen[("inboxgen_jobs_in_work", labels)] == 0
        assert seen[("inboxgen_queue_lag_seconds", labels)] == 0
    # One family of each metric, whichever observer was made first.
    names = [f.name for f in registry.collect()]
    assert len(names) == len(set(names)) == 7


def documented_span_attributes() -> set[str]:
    """The span attributes docs/observability.md lists (its "### Spans" table)."""
    section = DOC.read_text().split("### Spans", 1)[1].split("\n#", 1)[0]
    return {name for row in re.findall(r"^\| (`.*?) \|", section, re.M)
            for name in re.findall(r"`([\w.]+)`", row)}


def test_the_docs_name_every_metric_as_it_is_exported() -> None:
    doc = DOC.read_text()
    registry = CollectorRegistry()
    Prometheus(registry=registry)
    exported = {f.name + ("_total" if f.type == "counter" else ""): f.type
                for f in registry.collect()}
    assert dict(re.findall(r"^\| `(inboxgen_\w+)` \| (\w+) \|", doc, re.M)) == exported
    source = (Path(inboxgen.contrib.otel.__file__)).read_text()
    instruments = {name: kind.removeprefix("create_").replace("_", " ").replace("up down",
                                                                               "up-down")
                   for kind, name in re.findall(r'(create_\w+)\(\s*"(inboxgen\.[\w.]+)"',
                                                source)}
    assert len(instruments) == 7
    assert dict(re.findall(r"^\| `(inboxgen\.[\w.]+)` \| ([a-z -]+) \|", doc, re.M)) \
        == instruments
