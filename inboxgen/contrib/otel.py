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
from inboxgen.runtime.observe import QueueInfo, Watch
from inboxgen.runtime.tallies import OUTCOMES, Tally, Tallying

SCOPE = "inboxgen"
SYSTEM = "inboxgen"  # messaging.system: the queue is inboxgen's table, not a broker
CONSUMER = SpanKind.CONSUMER  # read once: an enum's member costs a lookup on Python 3.11
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


class _Queue(Tally):
    """One queue's counts, and its attributes, made once. (Its durations go to the SDK's
    histograms, not to the tally's buckets.)"""

    __slots__ = ("attrs", "outcome_attrs", "span_name", "span_attrs", "handler_duration")

    def __init__(self, queue: QueueInfo, handler_duration: metrics.Histogram | None) -> None:
        super().__init__()
        self.handler_duration = handler_duration  # None: not recorded
        self.attrs = queue_attributes(queue.table, queue.group, queue.dialect)
        self.outcome_attrs = {o: {**self.attrs, "inboxgen.outcome": o} for o in OUTCOMES}
        self.span_name = f"process {self.attrs['messaging.destination.name']}"
        self.span_attrs: dict[str, str | int] = {
            **self.attrs, "messaging.operation.name": "process",
            "messaging.operation.type": "process"}


class OpenTelemetry(Tallying[_Queue]):
    def __init__(self, *, tracer_provider: trace.TracerProvider | None = None,
                 meter_provider: metrics.MeterProvider | None = None,
                 durations: bool = True) -> None:
        super().__init__()
        self.tracer = trace.get_tracer(SCOPE, _version(), tracer_provider=tracer_provider)
        meter = metrics.get_meter(SCOPE, _version(), meter_provider=meter_provider)
        # The durations are histograms, recorded as things happen: OpenTelemetry has no
        # observable histogram, and a histogram is what a backend draws percentiles from (and
        # links to the delivery's trace by exemplars). They are the one call into the SDK's
        # metrics a job makes: `durations=False` leaves them out, and a meter that records
        # nothing (NoOpMeterProvider: spans alone) is not called. The counts, the lag and the
        # rows in work are kept in the worker (runtime/tallies.py) and read when the SDK
        # collects.
        self.handler_duration: metrics.Histogram | None = None
        self.claim_duration: metrics.Histogram | None = None
        if durations and not isinstance(meter, metrics.NoOpMeter):
            self.handler_duration = meter.create_histogram(
                "inboxgen.handler.duration", unit="s", description="Time a handler ran")
            self.claim_duration = meter.create_histogram(
                "inboxgen.claim.duration", unit="s", description="Round trip of a claim")
        meter.create_observable_counter(
            "inboxgen.deliveries", callbacks=[self._read_deliveries], unit="{delivery}",
            description="Deliveries whose settlement was written, by outcome")
        meter.create_observable_gauge(
            "inboxgen.queue.lag", callbacks=[self._read(lambda t: t.lag)], unit="s",
            description="How long the oldest job the last claim took had been due")
        meter.create_observable_counter(
            "inboxgen.leases.lost", callbacks=[self._read(lambda t: t.leases_lost)],
            unit="{lease}",
            description="Leases that ran out before the job's settlement was written")
        meter.create_observable_counter(
            "inboxgen.dead_lettered", callbacks=[self._read(lambda t: t.dead_lettered)],
            unit="{job}", description="Rows moved to the dead letters")
        meter.create_observable_up_down_counter(
            "inboxgen.jobs.in_work",
            callbacks=[self._read(lambda t: None if t.reading is None else t.in_work)],
            unit="{job}", description="Jobs claimed and not yet settled")

    def new_tally(self, queue: QueueInfo) -> _Queue:
        return _Queue(queue, self.handler_duration)

    def delivery(self, queue: QueueInfo, job_id: Any, attempt: int | None,
                 headers: Mapping[str, str]) -> Watch | None:
        q = self.tallies.get(queue) or self.tally(queue)
        # Everything the span carries is given at its start, in one dict: the SDK checks each
        # attribute it is given, once.
        attributes = {**q.span_attrs, "messaging.message.id": str(job_id)}
        if attempt is not None:
            attributes["inboxgen.attempt"] = attempt
        parent = propagate.extract(headers) if headers else None
        span = self.tracer.start_span(q.span_name, context=parent, kind=CONSUMER,
                                      attributes=attributes)
        # Current from here on, so that the handler's own spans are its children (a plain
        # handler's thread runs in a copy of this context). A span the sampler left out is made
        # current too: the handler's spans are then left out as well.
        return _Delivery(q, span, context.attach(trace.set_span_in_context(span)))

    def claimed(self, queue: QueueInfo, rows: int, seconds: float) -> None:
        if self.claim_duration is not None:
            self.claim_duration.record(seconds, self.tally(queue).attrs)

    def _read_deliveries(self, options: metrics.CallbackOptions
                         ) -> Iterator[metrics.Observation]:
        for q in list(self.tallies.values()):
            for outcome, n in q.deliveries.copy().items():
                if n:  # an outcome is reported from its first delivery on
                    yield metrics.Observation(n, q.outcome_attrs[outcome])

    def _read(self, value: Callable[[Tally], float | None]
              ) -> Callable[[metrics.CallbackOptions], Iterator[metrics.Observation]]:
        def read(options: metrics.CallbackOptions) -> Iterator[metrics.Observation]:
            for q in list(self.tallies.values()):
                v = value(q)
                if v is not None:
                    yield metrics.Observation(v, q.attrs)
        return read


class _Delivery(Watch):
    __slots__ = ("q", "span", "token")

    def __init__(self, q: _Queue, span: trace.Span, token: object) -> None:
        self.q = q
        self.span = span
        self.token = token

    def handled(self, seconds: float) -> None:
        q = self.q
        if q.handler_duration is not None:
            q.handler_duration.record(seconds, q.attrs)

    def decided(self, outcome: str, error: BaseException | None) -> None:
        span = self.span
        span.set_attribute("inboxgen.outcome", outcome)
        if error is not None and span.is_recording():
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))

    def end(self) -> None:
        # Detached where it was attached: the delivery's own task, after its handler.
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
