"""The worker's first connection: a database that refuses for good (a wrong password, an unknown
database or user, a malformed address, a missing SQLite file) fails the start at once with one
line; one that is not there yet (a server starting, a network blip) is tried again with a
jittered backoff until the connect timeout. Each backend says which is which (`permanent`) and
how it names the database in messages (`label`, never with the password). Then every statement
is prepared against the live tables (`explain_all`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Coroutine, Mapping
from typing import TYPE_CHECKING, Any

from inboxgen.descriptor import names_a_partition
from inboxgen.errors import ConnectFailed, SchemaError

if TYPE_CHECKING:
    from inboxgen.runtime.backends.base import Backend

log = logging.getLogger("inboxgen.worker")


async def connect(backend: Backend, *, keep: int, timeout: float, stopping: asyncio.Event,
                  where: Mapping[str, str], warned: set[str] | None = None) -> bool:
    """`reach` the database, then `open_connections`: True when the worker's connections are
    open. False when `stopping` was set meanwhile, with nothing left open; raises ConnectFailed
    (nothing left open either)."""
    if not await reach(backend, timeout=timeout, stopping=stopping, where=where, warned=warned):
        return False
    if await open_connections(backend, keep=keep, stopping=stopping, where=where):
        return True
    await backend.close()
    return False


async def reach(backend: Backend, *, timeout: float, stopping: asyncio.Event,
                where: Mapping[str, str], warned: set[str] | None = None) -> bool:
    """Connect once, as the worker's connections will, trying for up to `timeout` seconds.
    False when `stopping` was set meanwhile; raises ConnectFailed (naming `where`: the worker
    and its table) when the database refuses or stays away. The wait is told in one warning,
    unless `warned` (the databases told of already, by their labels) holds the database."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    failures = 0
    told = False  # this worker warned of the wait
    name = where.get("worker", "")
    while True:
        try:
            if not await unless_stopped(stopping, backend.probe()):
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
                                    f"{timeout:g} s: {reason}", **where) from None
            if failures == 1 and (warned is None or backend.label not in warned):
                told = True
                if warned is not None:
                    warned.add(backend.label)
                log.warning("%s: cannot connect to %s yet (%s); trying again for up to %g s",
                            name, backend.label, reason, timeout)
            # 100 ms, doubling up to 2 s, jittered: processes restarted together spread out.
            delay = min(left, random.uniform(0.5, 1.0) * min(2.0, 0.1 * 2.0 ** (failures - 1)))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), delay)
            if stopping.is_set():
                return False
            continue
        if told:
            log.warning("%s: connected to %s after %d failed attempt(s)", name,
                        backend.label, failures)
        return not stopping.is_set()


async def open_connections(backend: Backend, *, keep: int, stopping: asyncio.Event,
                           where: Mapping[str, str]) -> bool:
    """Open the worker's connections, `keep` of them busy at once (the database answered a
    moment ago). False when `stopping` was set meanwhile; raises ConnectFailed when they
    cannot be opened."""
    try:
        return await unless_stopped(stopping, backend.open(keep=keep))
    except Exception as err:
        with contextlib.suppress(Exception):
            await backend.close()  # what was opened of them
        raise ConnectFailed(f"cannot open the connections to {backend.label}: "
                            f"{first_line(err)}", **where) from None


async def explain_all(backend: Backend, conn: Any, statements: Mapping[str, str],
                      where: Mapping[str, str]) -> None:
    """Prepare each statement (name -> SQL, the module's) on `conn`: SchemaError naming the
    database, the statement and `where` for the first that does not prepare. Those that name
    one partition (`{partition}`, filled in by prune --partitions) are no worker's: they
    prepare only once filled."""
    for name, sql in statements.items():
        if names_a_partition(sql):
            continue
        try:
            await backend.explain(conn, name)
        except Exception as err:  # the driver's error names what is missing
            raise SchemaError(f"statement does not prepare against {backend.label}: "
                              f"{first_line(err)}", statement=name, **where) from err


async def unless_stopped(stopping: asyncio.Event, step: Coroutine[Any, Any, Any]) -> bool:
    """Run `step` until it ends or `stopping` is set (a signal must not wait for a connection
    attempt, which may hang until its timeout): True when it ended."""
    task = asyncio.ensure_future(step)
    stopped = asyncio.ensure_future(stopping.wait())
    try:
        await asyncio.wait([task, stopped], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if task.cancelled():
        return False
    task.result()  # raises what the step raised
    return True


def behind_a_pooler(label: str) -> str:
    """Why a form that holds session locks (advisory, the counted row lock) cannot start on a
    connection whose transactions each ran on another server session."""
    return (f"the connection to {label} is behind a transaction pooler (each transaction ran "
            f"on another server session), where advisory locks do not hold: connect directly "
            f"or use session pooling")


def first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def retry_delay(failures: int) -> float:
    """After a failed round: 50 ms, doubling up to 1 s, with jitter so that slots and processes
    do not reconnect in step."""
    ceiling: float = min(1.0, 0.05 * 2.0 ** min(failures - 1, 10))
    return random.uniform(0.5, 1.0) * ceiling
