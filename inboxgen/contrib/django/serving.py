"""The service `manage.py inboxgen_serve` runs: one queue per TASKS backend of inboxgen's and
queue name, on the database Django's settings name for it."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.db import connections
from django.tasks import task_backends
from django.tasks.exceptions import InvalidTaskBackend

from inboxgen.contrib.django.backend import TaskBackend
from inboxgen.contrib.django.runner import run_task
from inboxgen.runtime.backends.base import Database
from inboxgen.runtime.service import Service

# Keys of Django's PostgreSQL connection parameters that are objects, not connection settings.
_PG_OBJECTS = frozenset({"context", "cursor_factory", "prepare_threshold"})


def service_from_settings(aliases: Sequence[str] | None = None) -> Service:
    """A Service serving the queues of the TASKS backends named (all of inboxgen's when None)."""
    names = list(aliases) if aliases else list(getattr(settings, "TASKS", {}))
    backends: list[TaskBackend] = []
    for name in names:
        backend = task_backends[name]
        if isinstance(backend, TaskBackend):
            backends.append(backend)
        elif aliases:
            raise InvalidTaskBackend(f"TASKS[{name!r}] is not inboxgen's backend "
                                     "(inboxgen.contrib.django.backend.TaskBackend)")
    if not backends:
        raise InvalidTaskBackend("no TASKS backend is inboxgen's "
                                 "(inboxgen.contrib.django.backend.TaskBackend)")
    service = Service(name="django-tasks")
    for backend in backends:
        database = worker_database(backend.database)
        queues: list[str | None] = sorted(backend.queues) if backend.usable.grouped else [None]
        for queue in queues:
            name = backend.alias if queue is None else f"{backend.alias}:{queue}"
            # The task runner tells the last attempt as the worker does, by the spec's
            # max_attempts (the queue takes no other).
            runner = functools.partial(run_task,
                                       max_attempts=backend.descriptor.defaults.max_attempts,
                                       keeps_results="result" in backend.descriptor.roles)
            service.queue(backend.descriptor, runner, database=database, group=queue,
                          name=name, workers=backend.workers)
    return service


def worker_database(alias: str) -> Database:
    """The database a worker connects to, from Django's settings for `alias`: the workers
    open connections of their own, as the settings describe them."""
    conn = connections[alias]
    if conn.vendor == "sqlite":
        return str(conn.settings_dict["NAME"])
    if conn.vendor == "postgresql":
        from psycopg.conninfo import make_conninfo

        params = {k: v for k, v in conn.get_connection_params().items()
                  if k not in _PG_OBJECTS and v is not None}
        return make_conninfo(**{k: str(v) for k, v in params.items()})
    if conn.vendor == "mysql":
        s = conn.settings_dict
        args: dict[str, Any] = {"host": s["HOST"] or "localhost",
                                "port": int(s["PORT"] or 3306), "database": s["NAME"]}
        if s["USER"]:
            args["user"] = s["USER"]
        if s["PASSWORD"]:
            args["password"] = s["PASSWORD"]
        for key in ("unix_socket", "charset"):
            if key in s["OPTIONS"]:
                args[key] = s["OPTIONS"][key]
        return args
    raise InvalidTaskBackend(f"DATABASES[{alias!r}]: inboxgen serves PostgreSQL, MySQL/MariaDB "
                             f"and SQLite, not {conn.vendor}")
