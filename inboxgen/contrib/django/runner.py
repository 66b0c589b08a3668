"""The handler a Django task's row is delivered to: it imports the task its payload names and
calls it with the enqueued arguments, as Django's own backends do, with the framework's
signals. A task that raises raises here, so the worker retries it and, after `max_attempts`,
dead-letters it.

`task_started` is sent for each attempt; `task_finished` once the task is done: when it
succeeded, or when its last attempt failed (FAILED). A failed attempt that will be retried is
no end: the task is READY again, as `get_result()` reads its row, and the worker's log line
says so (`retrying in 2 s`). Django's `task_finished` log line for the last failure carries no
traceback: the worker's line beside it does."""

from __future__ import annotations

import traceback
from typing import Any

from django.db import close_old_connections
from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus
from django.tasks.base import TaskError
from django.tasks.signals import task_finished, task_started
from django.utils import timezone
from django.utils.json import normalize_json

from inboxgen.contrib.django.backend import TaskBackend, task_at
from inboxgen.contrib.django.table import ARGS, KWARGS, TASK
from inboxgen.runtime.jobs import Job


def run_task(job: Job[Any], max_attempts: int | None = None,
             keeps_results: bool = False) -> Any:
    """Run the task of `job`. `max_attempts`: the worker's (the spec's), which tells the last
    attempt; None: attempts are not limited, so no failure is the last. `keeps_results`: the
    table has a result column, so the task's return value (as JSON, Django's normalize_json)
    is returned for the ack to write; else nothing is returned."""
    body = job.payload
    task = task_at(body[TASK])
    now = timezone.now()
    # One worker id per delivery so far: TaskContext.attempt is inboxgen's attempt number.
    result = TaskResult(task=task, id=str(job.id), status=TaskResultStatus.RUNNING,
                        enqueued_at=None, started_at=now, last_attempted_at=now,
                        finished_at=None, args=body.get(ARGS, []), kwargs=body.get(KWARGS, {}),
                        backend=task.backend, errors=[],
                        worker_ids=[job.worker] * (job.attempt or 1))
    task_started.send(TaskBackend, task_result=result)
    # Django's connections are per thread: drop those past their age, as a request does.
    close_old_connections()
    try:
        failure, value = _call(task, result)
        if failure is None and keeps_results:
            try:  # a value JSON cannot hold fails the task, as in Django's own backends
                value = normalize_json(value)
            except (TypeError, ValueError) as err:
                failure = _failed(result, err)
        if failure is None:
            object.__setattr__(result, "_return_value", value)
            _finished(result, TaskResultStatus.SUCCESSFUL)
            return value if keeps_results else None
        last = (max_attempts is not None and job.attempt is not None
                and job.attempt >= max_attempts)
        if last:
            # Sent outside the except block: Django's receiver logs the FAILED line without
            # the traceback, which the worker's line about the same failure carries.
            _finished(result, TaskResultStatus.FAILED)
        else:
            object.__setattr__(result, "status", TaskResultStatus.READY)  # to be run again
        raise failure
    finally:
        close_old_connections()


def _call(task: Task, result: TaskResult) -> tuple[BaseException | None, Any]:
    """Call the task: what it raised (kept in `result.errors`) or None, and what it
    returned."""
    try:
        if task.takes_context:
            value = task.call(TaskContext(task_result=result), *result.args, **result.kwargs)
        else:
            value = task.call(*result.args, **result.kwargs)
    except BaseException as err:
        return _failed(result, err), None
    return None, value


def _failed(result: TaskResult, err: BaseException) -> BaseException:
    """`err`, kept in `result.errors` as Django keeps a task's failure."""
    kind = type(err)
    result.errors.append(TaskError(
        exception_class_path=f"{kind.__module__}.{kind.__qualname__}",
        traceback="".join(traceback.format_exception(err))))
    return err


def _finished(result: TaskResult, status: TaskResultStatus) -> None:
    object.__setattr__(result, "status", status)
    object.__setattr__(result, "finished_at", timezone.now())
    task_finished.send(TaskBackend, task_result=result)
