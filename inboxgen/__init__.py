"""inboxgen: job queues in your own SQL tables.

The generator (`inboxgen build` / `inboxgen verify`) writes one typed module per queue table; the
runtime here serves those tables: `Worker(module.DESCRIPTOR, handler, database=...)`, or
several of them in one process: `Service(database=...)`.
"""

from inboxgen.errors import (
    CheckFailed,
    ConfigError,
    ConnectFailed,
    GeneratorBug,
    InboxgenError,
    LeaseLost,
    ProgressNotKept,
    SchemaError,
    ServerTooOld,
    ServiceStartFailed,
    WorkerConfigError,
    WorkerError,
)
from inboxgen.runtime.clock import Clock, SystemClock
from inboxgen.runtime.observe import Observer, QueueInfo, Watch
from inboxgen.runtime.outcomes import Backoff, Outcome, ack, drop, retry, retry_after
from inboxgen.runtime.service import Service
from inboxgen.runtime.worker import Job, Stats, Worker

__all__ = [
    "Backoff",
    "CheckFailed",
    "Clock",
    "ConfigError",
    "ConnectFailed",
    "GeneratorBug",
    "InboxgenError",
    "Job",
    "LeaseLost",
    "Observer",
    "Outcome",
    "ProgressNotKept",
    "QueueInfo",
    "SchemaError",
    "ServerTooOld",
    "Service",
    "ServiceStartFailed",
    "Stats",
    "SystemClock",
    "Watch",
    "Worker",
    "WorkerConfigError",
    "WorkerError",
    "ack",
    "drop",
    "retry",
    "retry_after",
]
