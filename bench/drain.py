"""Drain N pre-enqueued no-op jobs on a private PostgreSQL: one worker, 10 workers, per claim
form and batch size; prints jobs/s and the CPU time each job cost this process (the runtime's
Python and the driver) and the server's processes. CPU per job moves less from run to run than
jobs/s on a shared machine. Not a test: numbers depend on the machine.

    python bench/drain.py [N] [FORM ...]     # forms: row_lock row_lock_counted lease advisory
    python bench/drain.py --service [N] [FORM ...]

With --service, each form and batch drains twice, as a lone Worker and as the one queue of a
Service (its pool, its shared listener), each timed until its table is empty.

    python bench/drain.py --observe [N] [FORM ...]

With --observe, five times: a lone Worker; the same with OpenTelemetry (the SDK's tracer and
meter providers, spans batched to an exporter that keeps them in memory), every span recorded,
one trace in 100 sampled, and metrics alone (no tracer provider); and with Prometheus (a
registry of its own); each timed until its table is empty.
"""

from __future__ import annotations

import asyncio
import os
import resource
import sys
import tempfile
import time
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


def drain(server: PostgresServer, form: str, batch: int, n: int,
          served_by: str = "") -> tuple[float, float, float]:
    """jobs/s, and this process's and the server's CPU microseconds per job. `served_by`
    "worker", "service", "otel" or "prometheus" (a worker with those observers): that, timed
    until the table is empty (all the same way)."""
    root = Path(tempfile.mkdtemp())
    module: Any = build_module(root, SPECS[form], DDL.replace(
        "    locked_until TIMESTAMPTZ,\n", "" if form != "lease" else "    locked_until "
        "TIMESTAMPTZ,\n"), name=f"jobs_{form}_{batch}")
    dsn = server.create_database(f"{form}_{batch}{served_by.replace('-', '_')}")
    with psycopg.connect(dsn) as conn:
        conn.execute(ddl_of(root, f"jobs_{form}_{batch}"))
        module.insert_many(conn, [module.NewRow(payload={"n": i}) for i in range(n)])
    settings: dict[str, Any] = dict(workers=10, batch=batch, poll_interval=0.05, listen=False)
    cpu, server_before, started = own_cpu(), server_cpu(), time.perf_counter()
    if served_by:
        asyncio.run(until_empty(module, dsn, settings, served_by == "service",
                                observers_for(served_by)))
    else:
        asyncio.run(run_until_idle(Worker(module.DESCRIPTOR, noop, database=dsn, **settings),
                                   timeout=600))
    seconds = time.perf_counter() - started
    return (n / seconds, (own_cpu() - cpu) / n * 1e6, (server_cpu() - server_before) / n * 1e6)


def observers_for(served_by: str) -> list[Any]:
    """The observers a drain runs with: none, OpenTelemetry's or Prometheus'."""
    if served_by.startswith("otel"):
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
        from opentelemetry.trace import NoOpTracerProvider

        from inboxgen.contrib.otel import OpenTelemetry

        # otel: every span recorded; otel-sampled: 1 trace in 100; otel-metrics: no traces.
        tracing: Any = TracerProvider(sampler=ParentBased(TraceIdRatioBased(0.01))) \
            if served_by == "otel-sampled" else TracerProvider()
        tracing.add_span_processor(BatchSpanProcessor(InMemorySpanExporter()))
        if served_by == "otel-metrics":
            tracing = NoOpTracerProvider()
        meters = MeterProvider(metric_readers=[InMemoryMetricReader()])
        return [OpenTelemetry(tracer_provider=tracing, meter_provider=meters)]
    if served_by == "prometheus":
        from prometheus_client import CollectorRegistry

        from inboxgen.contrib.prometheus import Prometheus

        return [Prometheus(registry=CollectorRegistry())]
    return []


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


def main(n: int, forms: list[str], service: bool, observe: bool = False) -> None:
    server = PostgresServer()
    ways: tuple[str, ...] = ("",)
    if service:
        ways = ("worker", "service")
    elif observe:
        ways = ("worker", "otel", "otel-sampled", "otel-metrics", "prometheus")
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


if __name__ == "__main__":
    args = sys.argv[1:]
    with_service, observe = "--service" in args, "--observe" in args
    args = [a for a in args if a not in ("--service", "--observe")]
    main(int(args[0]) if args else 5000, args[1:], with_service, observe)
