"""Every error inboxgen raises, under one base class.

    InboxgenError
    ├── ConfigError        project settings ([tool.inboxgen]) or command-line usage are wrong
    ├── CheckFailed        one or more specs failed their checks; carries the diagnostics
    ├── GeneratorBug       a rendered statement did not survive its own check (a bug in inboxgen)
    ├── WrongConnection    an enqueue function was given a connection it cannot run on (TypeError)
    ├── ProgressNotKept    job.progress() on a table with no progress column (TypeError)
    ├── WrongPayload       an enqueue function was given a payload its table cannot hold
    │                      (ValueError): not JSON, or JSON the spec's payload type refuses
    └── WorkerError        the runtime failed; names the worker, table and statement
        ├── ConnectFailed       the database refused the worker or stayed out of reach
        ├── SchemaError         a statement does not prepare against the live database
        ├── LeaseLost           a lease settlement or renewal found the row taken by another
        ├── RowDeleted          a settlement or renewal found the row deleted while it ran
        ├── SettlementLost      a settlement was lost with its connection (the job runs again)
        ├── ServerTooOld        the MySQL/MariaDB server lacks what the claims need
        ├── ServiceStartFailed  queues of a service could not start; names every one
        └── WorkerConfigError   the worker's settings contradict each other or the table

The generator's internal signals (caught by the command line, never seen as tracebacks):
SpecInvalid (a spec's own checks failed), BuildCrashed (a fault in inboxgen while building one
spec), WriteFailed (a module could not be written).

Errors caused by user input carry where the problem is (file and line, table, column) so that the
message is one line a person can act on.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import attrs


@attrs.frozen
class Diagnostic:
    """One finding about a spec or its DDL: `file:line: message`."""

    path: str
    line: int
    message: str
    severity: str = "error"  # "error" or "warning"

    def format(self) -> str:
        prefix = "" if self.severity == "error" else "warning: "
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"{where}: {prefix}{self.message}"


class InboxgenError(Exception):
    """Base class of every error inboxgen raises."""


class ConfigError(InboxgenError):
    """The project's settings or the command line are wrong (exit code 2)."""


class CheckFailed(InboxgenError):
    """Specs failed their checks; `diagnostics` holds every finding, warnings included."""

    def __init__(self, diagnostics: Sequence[Diagnostic]) -> None:
        self.diagnostics = list(diagnostics)
        errors = [d for d in self.diagnostics if d.severity == "error"]
        super().__init__("\n".join(d.format() for d in errors))


class GeneratorBug(InboxgenError):
    """A statement inboxgen rendered names a table or column the catalog does not have."""


class WrongConnection(InboxgenError, TypeError):
    """A generated enqueue function was given a connection of the wrong kind (another driver's,
    an engine rather than a connection): names what was given and what the function needs."""


class ProgressNotKept(InboxgenError, TypeError):
    """job.progress() on a table with no progress column: nothing would keep what it says."""


class WrongPayload(InboxgenError, ValueError):
    """A generated enqueue function was given a payload that JSON cannot encode, or whose JSON
    does not decode as the spec's payload type (as the worker would decode it): names the
    table, the type and where in the payload. Raised before anything is written."""


class WorkerError(InboxgenError):
    """A worker could not do its job; names the worker, the table and the statement involved."""

    def __init__(self, message: str, *, worker: str = "", table: str = "",
                 statement: str = "") -> None:
        self.worker = worker
        self.table = table
        self.statement = statement
        where = ", ".join(f"{k} {v}" for k, v in (("worker", worker), ("table", table),
                                                  ("statement", statement)) if v)
        super().__init__(f"{message} ({where})" if where else message)


class SchemaError(WorkerError):
    """A generated statement does not prepare against the live database (table or column gone)."""


class LeaseLost(WorkerError):
    """A lease settlement or renewal found the row no longer held by this worker."""


class ServerTooOld(WorkerError):
    """The server is older than inboxgen's floor (MySQL 8.0.1, MariaDB 10.6: SKIP LOCKED)."""


class SettlementLost(WorkerError):
    """A settlement did not commit (its connection was lost): the job will run again."""


class WorkerConfigError(WorkerError):
    """The worker's settings contradict each other or the table (e.g. max_attempts alone)."""


class ServiceStartFailed(WorkerError):
    """Queues of a service could not start: `problems` holds each queue's error, and the
    message lists them all (not only the first)."""

    def __init__(self, problems: list[WorkerError]) -> None:
        self.problems = problems
        super().__init__(f"{len(problems)} queue(s) cannot start: "
                         + "; ".join(str(p) for p in problems))


class ConnectFailed(WorkerError):
    """The database cannot be reached: refused for good (authentication, an unknown database, a
    missing SQLite file) or still unreachable when the connect timeout ran out. The message names
    host, port, database and user, never the password."""


class SpecInvalid(Exception):
    """A spec failed its own checks: the diagnostics say where."""

    def __init__(self, diagnostics: list[Diagnostic]) -> None:
        self.diagnostics = diagnostics
        super().__init__("; ".join(d.format() for d in diagnostics))


class BuildCrashed(Exception):
    """An unexpected failure while building one spec: a fault in inboxgen, not in the spec."""

    def __init__(self, spec: str, err: BaseException) -> None:
        self.spec = spec
        first = next(iter(str(err).splitlines()), "")
        super().__init__(f"while building {spec}: {type(err).__name__}"
                         + (f": {first}" if first else ""))


class WriteFailed(Exception):
    """A module could not be written: `path` and the system's reason."""

    def __init__(self, path: Path, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class RowDeleted(WorkerError):
    """A settlement or renewal found its row deleted while the job ran (deleting a row is how a
    job is cancelled): the job's outcome was not recorded."""
