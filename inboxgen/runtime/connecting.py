"""The worker's first connection: a database that refuses for good (a wrong password, an unknown
database or user, a malformed address, a missing SQLite file) fails the start at once with one
line; one that is not there yet (a server starting, a network blip) is tried again with a
jittered backoff until the connect timeout. Each backend says which is which (`permanent`) and
how it names the database in messages (`label`, never with the password)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from inboxgen.errors import ConnectFailed

if TYPE_CHECKING:
    from inboxgen.runtime.worker import Worker

log = logging.getLogger("inboxgen.worker")


async def reach(worker: Worker) -> bool:
    """Connect once, as the worker's connections will. False when the worker was stopped
    meanwhile; raises ConnectFailed when the database refuses or stays away."""
    backend = worker.backend
    loop = asyncio.get_running_loop()
    deadline = loop.time() + worker.connect_timeout
    failures = 0
    where = {"worker": worker.name, "table": worker.descriptor.qualified_name}
    while True:
        try:
            if not await unless_stopped(worker, backend.probe()):
                return False
        except Exception as err:
            reason = first_line(err)
            if backend.permanent(err):
                raise ConnectFailed(f"cannot connect to {backend.label}: {reason}",
                                    **where) from None
            failures += 1
            left = deadline - loop.time()
            if left <= 0:
                raise ConnectFailed(f"cannot connect to {backend.label} within "
                                    f"{worker.connect_timeout:g} s: {reason}", **where) from None
            if failures == 1:
                log.warning("%s: cannot connect to %s yet (%s); trying again for up to %g s",
                            worker.name, backend.label, reason, worker.connect_timeout)
            # 100 ms, doubling up to 2 s, jittered: processes restarted together spread out.
            delay = min(left, random.uniform(0.5, 1.0) * min(2.0, 0.1 * 2.0 ** (failures - 1)))
            if await worker._stopped_within(delay):
                return False
            continue
        if failures:
            log.warning("%s: connected to %s after %d failed attempt(s)", worker.name,
                        backend.label, failures)
        return not worker._stopping.is_set()


async def open_connections(worker: Worker) -> bool:
    """Open the worker's connections (the database answered a moment ago). False when the
    worker was stopped meanwhile; raises ConnectFailed when they cannot be opened."""
    backend = worker.backend
    try:
        return await unless_stopped(worker, backend.open(keep=worker.form.connections))
    except Exception as err:
        with contextlib.suppress(Exception):
            await backend.close()  # what was opened of them
        raise ConnectFailed(f"cannot open the connections to {backend.label}: "
                            f"{first_line(err)}", worker=worker.name,
                            table=worker.descriptor.qualified_name) from None


async def unless_stopped(worker: Worker, step: Coroutine[Any, Any, Any]) -> bool:
    """Run `step` until it ends or the worker is told to stop (a signal must not wait for a
    connection attempt, which may hang until its timeout): True when it ended."""
    task = asyncio.ensure_future(step)
    stopping = asyncio.ensure_future(worker._stopping.wait())
    try:
        await asyncio.wait([task, stopping], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if task.cancelled():
        return False
    task.result()  # raises what the step raised
    return True


def first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def retry_delay(failures: int) -> float:
    """After a failed round: 50 ms, doubling up to 1 s, with jitter so that slots and processes
    do not reconnect in step."""
    ceiling: float = min(1.0, 0.05 * 2.0 ** min(failures - 1, 10))
    return random.uniform(0.5, 1.0) * ceiling
