"""Every error inboxgen raises, under one base class.

    InboxgenError
    ├── ConfigError        project settings ([tool.inboxgen]) or command-line usage are wrong
    ├── CheckFailed        one or more specs failed their checks; carries the diagnostics
    └── GeneratorBug       a rendered statement did not survive its own check (a bug in inboxgen)

Errors caused by user input carry where the problem is (file and line, table, column) so that the
message is one line a person can act on.
"""

from __future__ import annotations

from collections.abc import Sequence

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
