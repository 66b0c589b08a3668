"""`TaskBackend`: Django's task framework on an inboxgen queue table in the service's own
database.

A task is enqueued by inserting its row through Django's connection. Inside `atomic()` the row
is part of the transaction: it becomes visible to workers when the transaction commits, and is
gone with its rollback. That is why no `transaction.on_commit()` is needed, and why there is no
window where the writes committed but the task was lost (a process dying between the commit and
an on_commit callback).
"""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any

import msgspec
from django.core.checks import Error
from django.db import connections
from django.tasks import Task, TaskResult, TaskResultStatus
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import TaskError
from django.tasks.exceptions import InvalidTaskBackend, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.utils import timezone
from django.utils.json import normalize_json
from django.utils.module_loading import import_string

from inboxgen.contrib.django.table import ARGS, KWARGS, TASK, TaskTable, round_trip

# What state() finds, as Django's task statuses. A row lock's job in work reads "ready".
STATUSES = {"ready": TaskResultStatus.READY, "scheduled": TaskResultStatus.READY,
            "in_work": TaskResultStatus.RUNNING, "finished": TaskResultStatus.SUCCESSFUL,
            "dead": TaskResultStatus.FAILED}


class TaskBackend(BaseTaskBackend):
    """A TASKS backend over the table of the generated module OPTIONS["MODULE"], written
    through the Django database OPTIONS["DATABASE"] (default "default").

    What it supports follows the table: `run_after` needs a retry_after column, priorities a
    priority column, `get_result()` a processed_at column (finished rows are kept), and more
    than one queue name a group column.
    """

    supports_async_task = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        # A settings mistake is reported by Django's system checks (check() below), as one
        # line, rather than as a traceback out of whatever first touched the backend.
        self.problem: str | None = None
        self.table: TaskTable | None = None
        self.database: str = self.options.get("DATABASE", "default")
        self.workers: int | None = self.options.get("WORKERS")
        try:
            self.table = self._table()
        except InvalidTaskBackend as err:
            self.problem = str(err)
            return
        self.supports_defer = self.table.has("retry_after")
        self.supports_priority = self.table.has("priority")
        self.supports_get_result = self.table.has("processed_at")

    def _table(self) -> TaskTable:
        where = f"TASKS[{self.alias!r}]"
        known = {"MODULE", "DATABASE", "WORKERS"}
        unknown = sorted(set(self.options) - known)
        if unknown:
            raise InvalidTaskBackend(f"{where}: unknown OPTIONS {', '.join(unknown)} (it takes "
                                     f"{', '.join(sorted(known))})")
        if not isinstance(self.database, str) or self.database not in connections.settings:
            raise InvalidTaskBackend(f"{where}: OPTIONS['DATABASE'] names {self.database!r}, "
                                     "which is not in DATABASES")
        if self.workers is not None and (not isinstance(self.workers, int)
                                         or isinstance(self.workers, bool)
                                         or self.workers < 1):
            raise InvalidTaskBackend(f"{where}: OPTIONS['WORKERS'] must be a whole number of 1 "
                                     "or more")
        table = TaskTable.load(self.alias, self.options.get("MODULE"))
        name = table.module.DESCRIPTOR.qualified_name
        if not table.grouped and len(self.queues) != 1:
            raise InvalidTaskBackend(f"{where}: table {name} has no group column, so it holds "
                                     "one queue: QUEUES must name exactly one")
        if table.grouped and not self.queues:
            raise InvalidTaskBackend(f"{where}: QUEUES must name the queues, so that manage.py "
                                     "inboxgen_serve knows which to serve")
        return table

    def check(self, **kwargs: Any) -> list[Error]:
        """The settings' mistake, found when the backend was made (OPTIONS["MODULE"] imported
        and checked, the other OPTIONS and QUEUES too), as one line: inboxgen.E001. Django
        runs it in `manage.py check` and before commands such as migrate and inboxgen_serve
        (the app "inboxgen.contrib.django" registers the check)."""
        return [] if self.problem is None else [Error(self.problem, id="inboxgen.E001")]

    @property
    def usable(self) -> TaskTable:
        """The table; InvalidTaskBackend where the settings are wrong."""
        if self.table is None:
            raise InvalidTaskBackend(self.problem)
        return self.table

    @property
    def descriptor(self) -> Any:
        return self.usable.module.DESCRIPTOR

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        self.validate_task(task)
        args, kwargs = normalize_json(args), normalize_json(kwargs)
        round_trip(task.module_path, args, kwargs)
        now = timezone.now()
        run_after = task.run_after or now
        if timezone.is_naive(run_after):  # USE_TZ = False: the project's own time zone
            run_after = timezone.make_aware(run_after)
        table = self.usable
        row = table.row(path=task.module_path, args=args, kwargs=kwargs,
                             queue=task.queue_name, priority=task.priority, run_after=run_after)
        conn = connections[self.database]
        if table.notifies:
            row_id = table.module.insert(conn, row, notify=True)
        else:
            row_id = table.module.insert(conn, row)
        result = TaskResult(task=task, id=str(row_id), status=TaskResultStatus.READY,
                            enqueued_at=now, started_at=None, last_attempted_at=None,
                            finished_at=None, args=args, kwargs=kwargs, backend=self.alias,
                            errors=[], worker_ids=[])
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        """The task as its row says now: its `return_value` where the table has a `result`
        column (else None). Where the table has an `error` column, `errors` holds its
        last failure (one TaskError: the exception's class and the text the worker wrote),
        else nothing. A row whose payload does not decode, or names no task, has no task to
        give a result of: TaskResultDoesNotExist, saying why."""
        table = self.usable  # InvalidTaskBackend where the settings are wrong
        if not self.supports_get_result:
            raise NotImplementedError(
                f"TASKS[{self.alias!r}]: table {self.descriptor.qualified_name} deletes "
                "finished rows (no processed_at column), so results cannot be read")
        try:
            row_id: Any = int(result_id)
        except ValueError:
            row_id = result_id
        conn = connections[self.database]
        conn.ensure_connection()
        found = table.module.state(conn.connection, id=row_id, now=timezone.now())
        if found is None:
            raise TaskResultDoesNotExist(result_id)
        if found.payload_error is not None:
            # Its task and arguments cannot be read, and a TaskResult names its task. (The
            # worker moves such a row to the dead letters; the operator finds it there.)
            raise TaskResultDoesNotExist(f"{result_id}: its payload does not decode "
                                         f"({found.payload_error})")
        body = found.payload
        if isinstance(body, str | bytes):
            # Django's PostgreSQL connection loads JSON columns as text (its JSONField parses
            # them), where a plain psycopg connection gives them parsed. (Elsewhere a string is
            # the payload's own JSON value: no task.)
            with contextlib.suppress(ValueError):
                body = json.loads(body)
        if not isinstance(body, dict) or not isinstance(body.get(TASK), str):
            raise TaskResultDoesNotExist(f"{result_id}: its payload names no task")
        finished = found.finished_at if found.state in ("finished", "dead") else None
        result = TaskResult(task=task_at(body[TASK]), id=str(result_id),
                            status=STATUSES[found.state], enqueued_at=None, started_at=None,
                            last_attempted_at=None, finished_at=finished,
                            args=body.get(ARGS, []), kwargs=body.get(KWARGS, {}),
                            backend=self.alias, errors=task_errors(found.error),
                            worker_ids=[])
        # The task's return value, where the table keeps results (TaskResult has no argument
        # for it: Django's own backends set it so too), as JSON values where the spec types
        # the result column (a task's return value is JSON to Django).
        object.__setattr__(result, "_return_value", msgspec.to_builtins(found.result))
        return result


# The head of a failure's first line that names its exception's class ("ValueError",
# "myapp.mail.BounceError"); the worker's own reasons (a payload that does not decode) have none.
_CLASS_NAME = re.compile(r"[A-Za-z_][\w.]*")


def task_errors(error: str | None) -> list[TaskError]:
    """The row's last failure as Django's TaskResult.errors: a class path Django can import
    (builtins named as such; a reason of the worker's own is an Exception) and the text."""
    if error is None:
        return []
    head = error.split("\n", 1)[0].split(":", 1)[0].strip()
    if not _CLASS_NAME.fullmatch(head):
        head = "Exception"
    return [TaskError(exception_class_path=head if "." in head else f"builtins.{head}",
                      traceback=error)]


def task_at(path: str) -> Task:
    """The Task object a row's payload names (a module-level function decorated with
    @task)."""
    try:
        found = import_string(path)
    except ImportError as err:
        raise ImportError(f"task {path} cannot be imported: {err}") from None
    if not isinstance(found, Task):
        raise TypeError(f"{path} is not a task (decorate it with django.tasks.task)")
    return found
