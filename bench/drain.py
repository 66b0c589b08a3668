"""Drain N pre-enqueued no-op jobs on a private PostgreSQL: one worker, 10 workers, per claim
form and batch size; prints jobs/s and the CPU time each job cost this process (the runtime's
Python and the driver) and the server's processes. CPU per job moves less from run to run than
jobs/s on a shared machine. Not a test: numbers depend on the machine.

    python bench/drain.py [N] [FORM ...]     # forms: row_lock row_lock_counted lease advisory
    python bench/drain.py --service [N] [FORM ...]

With --service, each form and batch drains twice, as a lone Worker and as the one queue of a
Service (its pool, its shared listener), each timed until its table is empty.

    python bench/drain.py --transactional [N] [FORM ...]

With --transactional, each form and batch drains with transactional handlers that each insert
one row with a foreign key, twice: the key checked at once, then declared DEFERRABLE INITIALLY
DEFERRED (checked at COMMIT: a row lock then checks each job's writes before they join its
batch's transaction).

    python bench/drain.py --observe [N] [FORM ...]

With --observe, each form drains at batch 16 (where a job costs the least, so an observer's
share shows the most) in eight ways, three rounds in turn, each round in another order (a
drain's place in the turn moves its CPU as much as an observer does), each timed until its table
is empty: a lone Worker; with Prometheus (a registry of its own, scraped once at the end); with
the SDK's providers (spans batched to an exporter that drops them, metrics read once at the
end), an observer that makes the SDK's delivery span and nothing else, then inboxgen's
OpenTelemetry, every span recorded (a no-op meter provider), then both again with no span
sampled; inboxgen's OpenTelemetry with spans and metrics, and with metrics alone. Each line
gives a way's least CPU per job and best rate of the three (the machine's other work only
adds), and the observer's CPU per job over the lone Worker's; a span drain's, its ratio to the
SDK's span in a loop and to the SDK's observer in a drain (where the SDK's allocations cost more
than in a loop: the garbage collector walks a bigger heap). Before the drains it measures, in
this process and with the same providers, what the SDK itself costs a span: started and ended
bare, and started, made current and ended as a delivery uses it (attributes, the outcome set),
recorded and sampled out; the same for inboxgen's own delivery calls (ratio: inboxgen's / the
SDK's); and one SDK histogram recording.
"""

from __future__ import annotations

import asyncio
import os
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests")]

import psycopg  # noqa: E402
from genutil import build_module, ddl_of  # noqa: E402
from servers import PostgresServer  # noqa: E402

from inboxgen import Service, Worker  # noqa: E402
from inboxgen.testing import run_until_idle  # noqa: E402

DDL = """
CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    attempt INTEGER NOT NULL DEFAULT 1,
    locked_until TIMESTAMPTZ,
    payload JSONB NOT NULL
);
"""
SPECS = {
    "row_lock": 'table = "jobs"\ndialect = "postgres"\n[columns]\n'
                'id = { role = "id", generated = true }\n'
                'attempt = { role = "attempt", generated = true }\npayload = "payload"\n',
    # Row lock counting every claim (count_crashes, the default with max_attempts): a job that
    # kills its worker still spends its attempt.
    "row_lock_counted": 'table = "jobs"\ndialect = "postgres"\ncount_crashes = true\n'
                        '[columns]\nid = { role = "id", generated = true }\n'
                        'attempt = { role = "attempt", generated = true }\npayload = "payload"\n',
    "lease": 'table = "jobs"\ndialect = "postgres"\n[columns]\n'
             'id = { role = "id", generated = true }\n'
             'attempt = { role = "attempt", generated = true }\n'
             'locked_until = "locked_until"\npayload = "payload"\n',
    "advisory": 'table = "jobs"\ndialect = "postgres"\nadvisory_key = "job-{id}"\n[columns]\n'
                'id = { role = "id", generated = true }\n'
                'attempt = { role = "attempt", generated = true }\npayload = "payload"\n',
}


async def noop(job: object) -> None:
    return None


def server_cpu(name: str = "postgres", root: int | None = None) -> float:
    """CPU seconds of the server's processes so far (the postmaster counts the backends that
    ended): every process called `name`, or with `root` (the server's main process id) only
    that one and its children, so that other servers on the machine do not count."""
    total = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if stat[stat.index("(") + 1:stat.rindex(")")] == name:
            fields = stat[stat.rindex(")") + 2:].split()
            if root is not None and root not in (int(pid), int(fields[1])):
                continue  # fields[1]: the parent's id
            total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    return total / os.sysconf("SC_CLK_TCK")


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# --transactional: what each job's handler writes, on its transaction's connection, under a
# foreign key checked at once ("immediate") or at COMMIT ("deferred").
EFFECTS = {"immediate": "", "deferred": " DEFERRABLE INITIALLY DEFERRED"}


async def insert_effect(job: Any) -> None:
    await job.connection.execute("INSERT INTO effects (id, parent) VALUES (%s, 1)", (job.id,))


def drain(server: PostgresServer, form: str, batch: int, n: int,
          served_by: str = "", run: str = "", effects: str = "") -> tuple[float, float, float]:
    """jobs/s, and this process's and the server's CPU microseconds per job. `served_by`
    "worker", "service" or one of OBSERVED (a worker with those observers): that, timed
    until the table is empty (all the same way). The CPU counts the observers' own ending
    (spans exported, metrics collected), the rate does not."""
    root = Path(tempfile.mkdtemp())
    module: Any = build_module(root, SPECS[form], DDL.replace(
        "    locked_until TIMESTAMPTZ,\n", "" if form != "lease" else "    locked_until "
        "TIMESTAMPTZ,\n"), name=f"jobs_{form}_{batch}")
    dsn = server.create_database(f"{form}_{batch}{served_by.replace('-', '_')}{run}{effects}")
    with psycopg.connect(dsn) as conn:
        conn.execute(ddl_of(root, f"jobs_{form}_{batch}"))
        if effects:
            conn.execute("CREATE TABLE parents (id INTEGER PRIMARY KEY)")
            conn.execute("INSERT INTO parents VALUES (1)")
            conn.execute("CREATE TABLE effects (id BIGINT PRIMARY KEY, parent INTEGER NOT NULL "
                         f"REFERENCES parents (id){EFFECTS[effects]})")
        module.insert_many(conn, [module.NewRow(payload={"n": i}) for i in range(n)])
    settings: dict[str, Any] = dict(workers=10, batch=batch, poll_interval=0.05, listen=False)
    observers, finish = observers_for(served_by)
    # The private server's processes alone: other servers on the machine do not count.
    postmaster = int((server.data_dir / "postmaster.pid").read_text().split()[0])
    cpu, server_before, started = own_cpu(), server_cpu(root=postmaster), time.perf_counter()
    if served_by:
        asyncio.run(until_empty(module, dsn, settings, served_by == "service", observers))
    else:
        handler = insert_effect if effects else noop
        asyncio.run(run_until_idle(Worker(module.DESCRIPTOR, handler, database=dsn,
                                          transactional=bool(effects), **settings),
                                   timeout=600))
    seconds = time.perf_counter() - started
    finish()
    return (n / seconds, (own_cpu() - cpu) / n * 1e6,
            (server_cpu(root=postmaster) - server_before) / n * 1e6)


# The observed drains: Prometheus; the SDK's delivery span alone (sdk-, an observer that makes
# only that) and OpenTelemetry's spans, every one recorded or none sampled; spans and metrics;
# metrics alone.
OBSERVED = ("prometheus", "sdk-spans", "otel-spans", "sdk-unsampled", "otel-unsampled",
            "otel-all", "otel-metrics")
# Each OpenTelemetry drain of spans alone, against the SDK's: the sampling, and its SDK drain.
SPANS = {"otel-spans": (True, "sdk-spans"), "otel-unsampled": (False, "sdk-unsampled")}
# A delivery span's attributes but the job's own (its id and attempt).
ATTRS = {"messaging.system": "inboxgen", "messaging.destination.name": "jobs",
         "db.system.name": "postgresql", "messaging.operation.name": "process",
         "messaging.operation.type": "process"}


def observers_for(served_by: str) -> tuple[list[Any], Callable[[], None]]:
    """The observers a drain runs with, and what ends them (a scrape, the spans' last export,
    a collection)."""
    if served_by.startswith("sdk"):
        tracing, _, finish = otel_providers(spans=True, sampled=served_by == "sdk-spans",
                                            metrics=False)
        return [sdk_spans(tracing)], finish
    if served_by.startswith("otel"):
        from inboxgen.contrib.otel import OpenTelemetry

        tracing, meters, finish = otel_providers(
            spans=served_by != "otel-metrics", sampled=served_by != "otel-unsampled",
            metrics=served_by in ("otel-all", "otel-metrics"))
        return [OpenTelemetry(tracer_provider=tracing, meter_provider=meters)], finish
    if served_by == "prometheus":
        from prometheus_client import CollectorRegistry, generate_latest

        from inboxgen.contrib.prometheus import Prometheus

        registry = CollectorRegistry()

        def scrape() -> None:
            generate_latest(registry)

        return [Prometheus(registry=registry)], scrape
    return [], lambda: None


def sdk_spans(tracing: Any) -> Any:
    """An observer that does no more than the SDK needs for a delivery's span (span_costs()'
    SDK loop, split over a delivery): the SDK's own cost in a draining worker, where its
    allocations cost more than in a loop (a bigger heap for the garbage collector to walk)."""
    from opentelemetry import context, trace
    from opentelemetry.trace import SpanKind

    from inboxgen import Observer, Watch

    tracer = trace.get_tracer("bench", tracer_provider=tracing)
    consumer = SpanKind.CONSUMER

    class Span(Watch):
        __slots__ = ("span", "token")

        def __init__(self, span: Any, token: Any) -> None:
            self.span, self.token = span, token

        def decided(self, outcome: str, error: BaseException | None) -> None:
            self.span.set_attribute("inboxgen.outcome", outcome)

        def end(self) -> None:
            context.detach(self.token)
            self.span.end()

    class SdkSpans(Observer):
        def delivery(self, queue: Any, job_id: Any, attempt: int | None,
                     headers: Any) -> Watch:
            span = tracer.start_span("process jobs", kind=consumer, attributes={
                **ATTRS, "messaging.message.id": str(job_id), "inboxgen.attempt": attempt})
            return Span(span, context.attach(trace.set_span_in_context(span)))

    return SdkSpans()


def otel_providers(spans: bool, sampled: bool,
                   metrics: bool) -> tuple[Any, Any, Callable[[], None]]:
    """The SDK's tracer and meter providers as an application would set them up (no-op ones
    where `spans` or `metrics` is off): spans batched to an exporter that drops them, metrics
    read by a reader collected once, by the returned function, which also exports the spans
    left."""
    from opentelemetry.metrics import NoOpMeterProvider
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON
    from opentelemetry.trace import NoOpTracerProvider

    class Drop(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    tracing: Any = NoOpTracerProvider()
    if spans:
        tracing = TracerProvider(sampler=ALWAYS_ON if sampled else ALWAYS_OFF)
        tracing.add_span_processor(BatchSpanProcessor(Drop()))
    reader = InMemoryMetricReader()
    meters: Any = MeterProvider(metric_readers=[reader]) if metrics else NoOpMeterProvider()

    def finish() -> None:
        if spans:
            tracing.force_flush()
        if metrics:
            reader.get_metrics_data()

    return tracing, meters, finish


# What span_costs() measures: the SDK's span started and ended bare; the same as a delivery
# uses it; inboxgen's own delivery calls.
BARE, SDK, INBOXGEN = "SDK span, bare", "SDK span as a delivery", "inboxgen's delivery"


def span_costs(sampled: bool, n: int = 10000) -> dict[str, float]:
    """CPU microseconds per span, in this process (the batch processor's thread too), with the
    providers the drains use, every span recorded or none sampled: the SDK's span started and
    ended bare (BARE); as a delivery uses it (SDK: its attributes, made current, the outcome
    set, ended); and inboxgen's own delivery calls (INBOXGEN: the observer's delivery(), the
    handler's time, the outcome, end(), settled())."""
    from opentelemetry import context, trace
    from opentelemetry.trace import SpanKind

    from inboxgen.contrib.otel import OpenTelemetry
    from inboxgen.runtime.observe import Observation, QueueInfo

    tracing, meters, finish = otel_providers(spans=True, sampled=sampled, metrics=False)
    tracer = trace.get_tracer("bench", tracer_provider=tracing)
    consumer = SpanKind.CONSUMER  # read once, as inboxgen does (an enum's member costs)
    observation = Observation(QueueInfo("jobs", "jobs", None, "postgres"),
                              [OpenTelemetry(tracer_provider=tracing, meter_provider=meters)])

    def bare() -> None:
        for _ in range(n):
            tracer.start_span("process jobs").end()

    def sdk() -> None:
        for i in range(n):
            span = tracer.start_span("process jobs", kind=consumer, attributes={
                **ATTRS, "messaging.message.id": str(i), "inboxgen.attempt": 1})
            token = context.attach(trace.set_span_in_context(span))
            span.set_attribute("inboxgen.outcome", "acked")
            context.detach(token)
            span.end()

    def inboxgen() -> None:
        for i in range(n):
            watch = observation.delivery(i, 1, {})
            assert watch is not None
            watch.handled(0.001)
            watch.decided("acked", None)
            watch.end()
            observation.settled("acked")

    loops = {BARE: bare, SDK: sdk, INBOXGEN: inboxgen}
    for loop in loops.values():
        loop()  # warm up
    finish()
    costs = dict.fromkeys(loops, float("inf"))
    for _ in range(7):  # the least of seven, taken in turns: the machine is shared
        for name, loop in loops.items():
            cpu = own_cpu()
            loop()
            finish()
            costs[name] = min(costs[name], (own_cpu() - cpu) / n * 1e6)
    tracing.shutdown()
    return costs


def histogram_cost(n: int = 10000) -> float:
    """CPU microseconds of one SDK histogram recording with a queue's attributes, with the
    meter provider the drains use (what inboxgen.handler.duration costs a job)."""
    from opentelemetry import metrics

    _, meters, finish = otel_providers(spans=False, sampled=False, metrics=True)
    histogram = metrics.get_meter("bench", meter_provider=meters).create_histogram("h")
    attrs = {"messaging.system": "inboxgen", "messaging.destination.name": "jobs",
             "db.system.name": "postgresql"}
    best = float("inf")
    for _ in range(5):
        cpu = own_cpu()
        for _ in range(n):
            histogram.record(0.001, attrs)
        finish()
        best = min(best, (own_cpu() - cpu) / n * 1e6)
    return best


async def until_empty(module: Any, dsn: str, settings: dict[str, Any], service: bool,
                      observers: list[Any] | None = None) -> None:
    """Serve the table with a Worker or a one-queue Service until it is empty."""
    if service:
        runs: Any = Service(dsn)
        runs.queue(module.DESCRIPTOR, noop, **settings)
    else:
        runs = Worker(module.DESCRIPTOR, noop, database=dsn, observers=observers, **settings)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await runs.start()
        try:
            while (await (await conn.execute("SELECT EXISTS (SELECT FROM jobs)")).fetchone()
                   or (False,))[0]:
                await asyncio.sleep(0.01)
        finally:
            await runs.shutdown()


def main(n: int, forms: list[str], service: bool, observe: bool = False,
         transactional: bool = False) -> None:
    if observe:
        return observed(n, forms)
    if transactional:
        return transactional_drains(n, forms)
    ways = ("worker", "service") if service else ("",)
    server = PostgresServer()
    try:
        for form in forms or SPECS:
            for batch in (1, 16):
                for served_by in ways:
                    rate, python_us, server_us = drain(server, form, batch, n, served_by)
                    print(f"{form:16} batch {batch:2}{' ' + served_by if served_by else ''}: "
                          f"{rate:7.0f} jobs/s, CPU per job {python_us:5.1f} us here and "
                          f"{server_us:5.1f} us in the server", flush=True)
    finally:
        server.stop()


def transactional_drains(n: int, forms: list[str]) -> None:
    """--transactional: each form and batch, its handlers' foreign key immediate, then
    deferred; the deferred drain's rate over the immediate one's."""
    server = PostgresServer()
    try:
        for form in forms or SPECS:
            for batch in (1, 16):
                rates = {}
                for effects in EFFECTS:
                    rate, python_us, server_us = drain(server, form, batch, n, effects=effects)
                    rates[effects] = rate
                    ratio = (f"; {rate / rates['immediate']:.2f}x of immediate"
                             if effects != "immediate" else "")
                    print(f"{form:16} batch {batch:2} transactional, key {effects:9}: "
                          f"{rate:7.0f} jobs/s, CPU per job {python_us:5.1f} us here and "
                          f"{server_us:5.1f} us in the server{ratio}", flush=True)
    finally:
        server.stop()


def observed(n: int, forms: list[str], batch: int = 16, rounds: int = 3) -> None:
    """--observe: the SDK's costs in loops, then each form's drains, `rounds` times in turn;
    each way's least CPU per job and best rate (what the machine's other work disturbed
    least), and its CPU per job over the lone Worker's."""
    loop: dict[bool, float] = {}  # the SDK's delivery span in a loop, by sampling
    for sampled in (True, False):
        costs = span_costs(sampled)
        print(f"spans {'recorded' if sampled else 'sampled out'}: "
              + ", ".join(f"{name} {us:.1f} us" for name, us in costs.items())
              + f" of CPU; inboxgen's / the SDK's: {costs[INBOXGEN] / costs[SDK]:.2f}x",
              flush=True)
        loop[sampled] = costs[SDK]
    print(f"SDK histogram recording: {histogram_cost():.1f} us of CPU", flush=True)
    ways = ("worker", *OBSERVED)
    server = PostgresServer()
    try:
        for form in forms or SPECS:
            runs: dict[str, list[tuple[float, float, float]]] = {way: [] for way in ways}
            for r in range(rounds):
                # Each round starts elsewhere in the list (see the module's docstring).
                shift = r * len(ways) // rounds
                for way in ways[shift:] + ways[:shift]:
                    runs[way].append(drain(server, form, batch, n, way, f"_{r}"))
            rate = {way: max(run[0] for run in runs[way]) for way in ways}
            cpu = {way: min(run[1] for run in runs[way]) for way in ways}
            for way in ways:
                line = (f"{form:16} batch {batch:2} {way:14}: {rate[way]:7.0f} jobs/s, CPU per "
                        f"job {cpu[way]:5.1f} us here, "
                        f"{min(run[2] for run in runs[way]):5.1f} us in the server")
                if way != "worker":
                    added = cpu[way] - cpu["worker"]
                    line += f"; {rate[way] / rate['worker']:.2f}x, {added:+5.1f} us a job"
                    if way in SPANS:
                        sampled, sdk = SPANS[way]
                        alone = cpu[sdk] - cpu["worker"]
                        line += (f" ({added / loop[sampled]:.2f}x the SDK's span in a loop, "
                                 + (f"{added / alone:.2f}x" if alone > 0 else "-")
                                 + " in a drain)")
                print(line, flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    args = sys.argv[1:]
    with_service, observe = "--service" in args, "--observe" in args
    transactional = "--transactional" in args
    args = [a for a in args if a not in ("--service", "--observe", "--transactional")]
    main(int(args[0]) if args else 5000, args[1:], with_service, observe, transactional)
