"""The handler a Django task's row is delivered to: it imports the task its payload names and
calls it with the enqueued arguments, as Django's own backends do, with the framework's
signals. A task that raises raises here, so the worker retries it and, after `max_attempts`,
dead-letters it."""

from __future__ import annotations

import traceback
from typing import Any

from django.db import close_old_connections
from django.tasks import TaskContext, TaskResult, TaskResultStatus
from django.tasks.base import TaskError
from django.tasks.signals import task_finished, task_started
from django.utils import timezone

from inboxgen.contrib.django.backend import TaskBackend, task_at
from inboxgen.contrib.django.table import ARGS, KWARGS, TASK
from inboxgen.runtime.jobs import Job


def run_task(job: Job[Any]) -> None:
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
        if task.takes_context:
            task.call(TaskContext(task_result=result), *result.args, **result.kwargs)
        else:
            task.call(*result.args, **result.kwargs)
    except BaseException as err:
        kind = type(err)
        result.errors.append(TaskError(
            exception_class_path=f"{kind.__module__}.{kind.__qualname__}",
            traceback="".join(traceback.format_exception(err))))
        _finished(result, TaskResultStatus.FAILED)
        raise
    else:
        _finished(result, TaskResultStatus.SUCCESSFUL)
    finally:
        close_old_connections()


def _finished(result: TaskResult, status: TaskResultStatus) -> None:
    object.__setattr__(result, "status", status)
    object.__setattr__(result, "finished_at", timezone.now())
    task_finished.send(TaskBackend, task_result=result)
