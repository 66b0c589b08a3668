"""OpenTelemetry traces and metrics of a worker or service, on the official API
(`inboxgen[otel]`); the SDK, its exporters and providers are the application's to set up.

    Service(url, observers=[OpenTelemetry()])      # the global tracer and meter providers

Each delivery is a CONSUMER span, "process <queue>", following the messaging semantic
conventions, whose parent is the trace the job was enqueued in when the table has a headers
column and the producer used `enqueue()` below; without a headers column each delivery starts
a trace of its own. The metrics are the Prometheus module's, named OpenTelemetry's way; see
docs/observability.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from opentelemetry import context, metrics, propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from inboxgen.descriptor import TableDescriptor
from inboxgen.runtime.observe import DEAD_LETTERED, Observer, QueueInfo, Watch

SCOPE = "inboxgen"
SYSTEM = "inboxgen"  # messaging.system: the queue is inboxgen's table, not a broker
DB_SYSTEMS = {"postgres": "postgresql", "mysql": "mysql", "sqlite": "sqlite"}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("inboxgen")
    except PackageNotFoundError:
        return "0"


def destination(table: str, group: str | None) -> str:
    """A queue's name in spans and metrics: the table, and the group where there is one."""
    return table if group is None else f"{table}:{group}"


def queue_attributes(table: str, group: str | None, dialect: str) -> dict[str, str]:
    """The attributes every span and metric of a queue carries."""
    return {"messaging.system": SYSTEM, "messaging.destination.name": destination(table, group),
            "db.system.name": DB_SYSTEMS.get(dialect, dialect)}


class OpenTelemetry(Observer):
    def __init__(self, *, tracer_provider: trace.TracerProvider | None = None,
                 meter_provider: metrics.MeterProvider | None = None) -> None:
        self.tracer = trace.get_tracer(SCOPE, _version(), tracer_provider=tracer_provider)
        meter = metrics.get_meter(SCOPE, _version(), meter_provider=meter_provider)
        # The histograms are recorded as things happen. The counts and the lag are kept here
        # and read when the SDK collects (observable instruments): a recording through the
        # SDK costs tens of microseconds, about a no-op job's own cost.
        self.handler_duration = meter.create_histogram(
            "inboxgen.handler.duration", unit="s", description="Time a handler ran")
        self.claim_duration = meter.create_histogram(
            "inboxgen.claim.duration", unit="s", description="Round trip of a claim")
        self._queues: dict[QueueInfo, _Queue] = {}
        meter.create_observable_counter(
            "inboxgen.deliveries", callbacks=[self._read_deliveries], unit="{delivery}",
            description="Deliveries whose settlement was written, by outcome")
        meter.create_observable_gauge(
            "inboxgen.queue.lag", callbacks=[self._read("lag")], unit="s",
            description="How long the oldest job the last claim took had been due")
        meter.create_observable_counter(
            "inboxgen.leases.lost", callbacks=[self._read("leases_lost")], unit="{lease}",
            description="Leases that ran out before the job's settlement was written")
        meter.create_observable_counter(
            "inboxgen.dead_lettered", callbacks=[self._read("dead_lettered")], unit="{job}",
            description="Rows moved to the dead letters")
        meter.create_observable_up_down_counter(
            "inboxgen.jobs.in_work", callbacks=[self._read("in_work")], unit="{job}",
            description="Jobs claimed and not yet settled")

    def of(self, queue: QueueInfo) -> _Queue:
        q = self._queues.get(queue)
        if q is None:
            q = self._queues[queue] = _Queue(queue)
        return q

    def delivery(self, queue: QueueInfo, job_id: Any, attempt: int | None,
                 headers: Mapping[str, str]) -> Watch | None:
        q = self.of(queue)
        span_attrs: dict[str, str | int] = {**q.span_attrs, "messaging.message.id": str(job_id)}
        if attempt is not None:
            span_attrs["inboxgen.attempt"] = attempt
        parent = propagate.extract(headers) if headers else None
        span = self.tracer.start_span(q.span_name, context=parent, kind=SpanKind.CONSUMER,
                                      attributes=span_attrs)
        # Current from here on, so that the handler's own spans are its children (a plain
        # handler's thread runs in a copy of this context).
        token = context.attach(trace.set_span_in_context(span))
        return _Delivery(self, q, span, token)

    def claimed(self, queue: QueueInfo, rows: int, seconds: float) -> None:
        self.claim_duration.record(seconds, self.of(queue).attrs)

    def lag(self, queue: QueueInfo, seconds: float) -> None:
        self.of(queue).lag = seconds

    def settled(self, queue: QueueInfo, outcome: str) -> None:
        q = self.of(queue)
        q.deliveries[outcome] = q.deliveries.get(outcome, 0) + 1
        if outcome == DEAD_LETTERED:
            q.dead_lettered += 1

    def serving(self, queue: QueueInfo, in_work: Callable[[], int]) -> None:
        self.of(queue).reading = in_work

    def stopped(self, queue: QueueInfo) -> None:
        self.of(queue).reading = None

    def lease_lost(self, queue: QueueInfo) -> None:
        self.of(queue).leases_lost += 1

    def _read_deliveries(self, options: metrics.CallbackOptions
                         ) -> Iterator[metrics.Observation]:
        for q in list(self._queues.values()):
            for outcome, n in list(q.deliveries.items()):
                yield metrics.Observation(n, {**q.attrs, "inboxgen.outcome": outcome})

    def _read(self, name: str) -> Callable[[metrics.CallbackOptions],
                                           Iterator[metrics.Observation]]:
        def read(options: metrics.CallbackOptions) -> Iterator[metrics.Observation]:
            for q in list(self._queues.values()):
                value = getattr(q, name)
                if value is not None:
                    yield metrics.Observation(value, q.attrs)
        return read


class _Queue:
    """One queue's attributes, made once, and its counts since the observer was made."""

    def __init__(self, queue: QueueInfo) -> None:
        self.attrs = queue_attributes(queue.table, queue.group, queue.dialect)
        self.span_name = f"process {self.attrs['messaging.destination.name']}"
        self.span_attrs = {**self.attrs, "messaging.operation.name": "process",
                           "messaging.operation.type": "process"}
        self.deliveries: dict[str, int] = {}
        self.dead_lettered = 0
        self.leases_lost = 0
        self.lag: float | None = None
        self.reading: Callable[[], int] | None = None

    @property
    def in_work(self) -> int | None:
        return None if self.reading is None else self.reading()


class _Delivery(Watch):
    def __init__(self, otel: OpenTelemetry, q: _Queue, span: trace.Span, token: object) -> None:
        self.otel = otel
        self.q = q
        self.span = span
        self.token = token

    def handled(self, seconds: float) -> None:
        self.otel.handler_duration.record(seconds, self.q.attrs)

    def decided(self, outcome: str, error: BaseException | None) -> None:
        self.span.set_attribute("inboxgen.outcome", outcome)
        if error is not None:
            self.span.record_exception(error)
            self.span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))

    def end(self) -> None:
        with contextlib.suppress(ValueError):  # detached in another context: nothing to undo
            context.detach(self.token)  # type: ignore[arg-type]
        self.span.end()


class Sent:
    """What `enqueue()` gives the producer: the headers to write with the row (they carry the
    trace to the consumer), and `sent(id)` to name the message once inserted."""

    def __init__(self, span: trace.Span, headers: dict[str, str]) -> None:
        self.span = span
        self.headers = headers

    def sent(self, job_id: Any) -> None:
        self.span.set_attribute("messaging.message.id", str(job_id))


@contextlib.contextmanager
def enqueue(descriptor: TableDescriptor, group: str | None = None, *,
            headers: Mapping[str, str] | None = None,
            tracer_provider: trace.TracerProvider | None = None) -> Iterator[Sent]:
    """A PRODUCER span, "send <queue>", around an enqueue; yields the headers (yours, plus the
    trace context) to give the row's headers column:

        with enqueue(email_jobs.DESCRIPTOR, "receipts") as out:
            job_id = email_jobs.insert(conn, email_jobs.NewRow(..., headers=out.headers))
            out.sent(job_id)
    """
    tracer = trace.get_tracer(SCOPE, _version(), tracer_provider=tracer_provider)
    attrs = {**queue_attributes(descriptor.qualified_name, group, descriptor.dialect),
             "messaging.operation.name": "send", "messaging.operation.type": "send"}
    with tracer.start_as_current_span(f"send {attrs['messaging.destination.name']}",
                                      kind=SpanKind.PRODUCER,
                                      attributes=attrs) as span:
        carrier = dict(headers or {})
        propagate.inject(carrier)
        yield Sent(span, carrier)
