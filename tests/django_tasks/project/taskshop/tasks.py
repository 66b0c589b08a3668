"""The shop's tasks."""

from django.tasks import TaskContext, task

from taskshop.models import Note


@task
def write_note(text: str) -> str:
    Note.objects.create(text=text)
    return text


@task(queue_name="emails", priority=10)
def write_urgent_note(text: str) -> None:
    Note.objects.create(text=f"urgent: {text}")


@task(takes_context=True)
def write_attempt(context: TaskContext, text: str) -> None:
    Note.objects.create(text=f"{text} on attempt {context.attempt}")


@task
async def write_note_async(text: str) -> None:
    await Note.objects.acreate(text=f"async: {text}")


@task
def explode() -> None:
    raise RuntimeError("this task always fails")


@task
def wait_a_minute(started: str) -> None:
    """Touches `started`, then takes a minute (a plain handler's thread cannot be stopped)."""
    import time
    from pathlib import Path

    Path(started).touch()
    time.sleep(60)
