"""The queue table a task backend writes: its generated module, checked once for the roles a
Django task needs, and how a task becomes a row and a row a task."""

from __future__ import annotations

import datetime as dt
import inspect
import json
import math
from collections.abc import Mapping
from importlib import import_module
from types import ModuleType
from typing import Any

import attrs
from django.tasks.exceptions import InvalidTaskBackend

from inboxgen.runtime.connecting import first_line

# What a task row's payload holds: the task's import path and its arguments.
TASK, ARGS, KWARGS = "task", "args", "kwargs"
# The roles a backend fills from a task; a row's other columns need defaults.
FILLED = ("group", "priority", "retry_after", "payload")
JSON_PAYLOAD = ("_v.JSONValue", "_v.JSONValue | None")


@attrs.frozen
class TaskTable:
    """A generated module, as one TASKS backend uses it."""

    module: ModuleType
    attrs_of: Mapping[str, str]  # role -> NewRow attribute, for the roles the table binds
    notifies: bool  # PostgreSQL: the insert can wake listening workers at commit

    @classmethod
    def load(cls, backend: str, path: object) -> TaskTable:
        """The module at `path` (OPTIONS["MODULE"]); InvalidTaskBackend, naming the backend,
        when it is missing or its table cannot hold Django tasks."""
        where = f"TASKS[{backend!r}]"
        if not isinstance(path, str) or not path:
            raise InvalidTaskBackend(f"{where}: OPTIONS['MODULE'] must name the generated module "
                                     "of the task table, e.g. 'shop.queues.tasks'")
        try:
            module = import_module(path)
        except ImportError as err:
            raise InvalidTaskBackend(f"{where}: cannot import {path!r}: {first_line(err)}"
                                     ) from None
        except Exception as err:  # the module raised as it ran: one line, as the checks say it
            raise InvalidTaskBackend(f"{where}: cannot import {path!r}: {type(err).__name__}: "
                                     f"{first_line(err)}") from None
        d = getattr(module, "DESCRIPTOR", None)
        if d is None or not hasattr(module, "state"):
            raise InvalidTaskBackend(f"{where}: {path!r} is not a module inboxgen built (or was "
                                     "built before state()): run inboxgen build")
        table = f"{where}: table {d.qualified_name} ({d.source})"
        fields = {f.name: f for f in attrs.fields(d.new_row)}
        attrs_of = {role: d.role_attrs[role] for role in FILLED if role in d.roles}
        payload = attrs_of.get("payload")
        if payload is None or d.codec != "json" or fields[payload].type not in JSON_PAYLOAD:
            raise InvalidTaskBackend(f"{table}: a task table needs a payload column with codec "
                                     "json and no type")
        if d.role_attrs["id"] in fields:
            raise InvalidTaskBackend(f"{table}: a task's id is the row's, so the database must "
                                     "generate it (generated = true)")
        unfilled = [name for name, f in fields.items()
                    if name not in attrs_of.values() and f.default is attrs.NOTHING]
        if unfilled:
            raise InvalidTaskBackend(f"{table}: columns a task cannot fill and that have no "
                                     f"default: {', '.join(unfilled)}")
        notifies = "notify" in inspect.signature(module.insert).parameters
        return cls(module, attrs_of, notifies)

    @property
    def grouped(self) -> bool:
        return "group" in self.attrs_of

    def has(self, role: str) -> bool:
        return role in self.module.DESCRIPTOR.roles

    def row(self, *, path: str, args: list[Any], kwargs: dict[str, Any], queue: str,
            priority: int, run_after: dt.datetime) -> Any:
        """The NewRow of one task. Django's priorities run larger first; inboxgen claims
        smaller first, so the column holds the negated priority."""
        values: dict[str, Any] = {self.attrs_of["payload"]: {TASK: path, ARGS: args,
                                                              KWARGS: kwargs}}
        if self.grouped:
            values[self.attrs_of["group"]] = queue
        if self.has("priority"):
            values[self.attrs_of["priority"]] = -priority
        if self.has("retry_after"):
            values[self.attrs_of["retry_after"]] = run_after
        return self.module.NewRow(**values)


def round_trip(path: str, args: list[Any], kwargs: dict[str, Any]) -> None:
    """Raise ValueError, naming the task and argument, for an argument that does not come back
    from JSON as it went in (a dict with keys that are not strings, a float that is not
    finite): the handler would otherwise receive something else than was enqueued."""
    named = [(f"argument {i + 1}", v) for i, v in enumerate(args)]
    named += [(f"argument {k!r}", v) for k, v in kwargs.items()]
    for name, value in named:
        if not _survives(value) or json.loads(json.dumps(value)) != value:
            raise ValueError(f"task {path}: {name} does not survive a JSON round trip "
                             f"({_short(value)})")


def _survives(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _survives(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_survives(v) for v in value)
    return True


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
