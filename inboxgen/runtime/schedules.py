"""Periodic jobs: a schedule keeps the next occurrence of a job in its queue table.

Occurrences are instants every process computes alike: multiples of `every` since the Unix
epoch (UTC), or the times a cron expression names (UTC, with the `cron` extra). Each process of
a service with the schedule enqueues the next occurrence after now with the module's
`insert_unique()`, then sleeps until that instant and enqueues the one after. The row the
schedule's `row(at)` builds carries a unique key derived from `at`, so however many processes
(and restarts) enqueue an occurrence, the table holds it once; an occurrence enqueued before a
crash or a shutdown is in the table, due, when the service comes back.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from inboxgen.errors import WorkerConfigError
from inboxgen.runtime.connecting import first_line

if TYPE_CHECKING:
    from inboxgen.runtime.worker import Worker

log = logging.getLogger("inboxgen.service")

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@attrs.frozen
class Schedule:
    """A periodic job: `row(at)` is the queue row of the occurrence due at `at`."""

    name: str
    row: Callable[[dt.datetime], Any]
    every: dt.timedelta | None = None
    cron: str | None = None

    def __attrs_post_init__(self) -> None:
        if (self.every is None) == (self.cron is None):
            raise WorkerConfigError(f"schedule {self.name!r}: give every= or cron=, one of them")
        if self.every is not None and self.every <= dt.timedelta(0):
            raise WorkerConfigError(f"schedule {self.name!r}: every= must be positive")
        if self.cron is not None:
            croniter = _croniter(self.name)
            if not croniter.is_valid(self.cron):
                raise WorkerConfigError(f"schedule {self.name!r}: {self.cron!r} is not a cron "
                                        f"expression")

    def after(self, now: dt.datetime) -> dt.datetime:
        """The first occurrence strictly after `now` (an aware time)."""
        if self.every is not None:
            steps = (now - EPOCH) // self.every + 1
            return EPOCH + steps * self.every
        assert self.cron is not None
        it = _croniter(self.name)(self.cron, now.astimezone(dt.UTC))
        found: dt.datetime = it.get_next(dt.datetime)
        return found if found.tzinfo else found.replace(tzinfo=dt.UTC)


def _croniter(name: str) -> Any:
    try:
        from croniter import croniter
    except ImportError:
        raise WorkerConfigError(f"schedule {name!r}: cron expressions need the croniter "
                                f"package: pip install 'inboxgen[cron]'") from None
    return croniter


async def keep(schedule: Schedule, worker: Worker, stopping: asyncio.Event) -> None:
    """Enqueue each next occurrence of `schedule` through `worker`'s connections, until
    `stopping` is set. A failed enqueue is tried again shortly (the queue's outage lines say
    why the database is away)."""
    clock = worker.clock
    while not stopping.is_set():
        due = schedule.after(clock.now())
        try:
            added = await _enqueue(worker, schedule.row(due))
        except asyncio.CancelledError:
            raise
        except Exception as err:
            log.warning("%s: schedule %s: cannot enqueue the occurrence due %s, trying again "
                        "in 1 s: %s", worker.name, schedule.name, due.isoformat(),
                        first_line(err))
            await _sleep(stopping, 1.0)
            continue
        log.debug("%s: schedule %s: occurrence due %s %s", worker.name, schedule.name,
                  due.isoformat(), "enqueued" if added else "was there")
        # Sleep until the occurrence is due, then enqueue the one after it.
        await _sleep(stopping, max(0.0, (due - clock.now()).total_seconds()) + 0.001)


async def _enqueue(worker: Worker, row: Any) -> bool:
    backend = worker.backend
    async with backend.connection() as conn:
        await backend.begin(conn)
        try:
            added = bool(await backend.call(conn, "insert_unique", row))
        except BaseException:
            await backend.rollback(conn)
            raise
        await backend.commit(conn)
    return added


async def _sleep(stopping: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stopping.wait(), timeout=seconds)
    except TimeoutError:
        pass
