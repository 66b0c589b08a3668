"""Running the user's handler: an `async def` on the event loop, a plain function on a thread of
the worker's own (one per slot: asyncio's shared executor would cap them at min(32, CPUs + 4)
whatever `workers` says). What it returns or raises is the delivery's to judge."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import inspect
import os
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any, cast

from inboxgen.runtime.jobs import Handler, Job

# The folders of the frames that run a handler rather than belong to it: inboxgen's runtime,
# and the thread pool and event loop it runs handlers on.
_RUNNERS = tuple(os.path.dirname(os.path.abspath(path)) + os.sep
                 for path in (__file__, asyncio.__file__, concurrent.futures.__file__))


def own_frames(tb: TracebackType | None) -> TracebackType | None:
    """A handler's traceback from the handler's own frame on: without the leading frames of
    inboxgen's runtime and of the thread or event loop that ran it (a plain handler's failure
    would otherwise log a dozen lines of them). Where no other frame follows them (an error
    raised before the handler ran), the whole traceback."""
    own = tb
    while own is not None and own.tb_frame.f_code.co_filename.startswith(_RUNNERS):
        own = own.tb_next
    return tb if own is None else own


class HandlerRunner:
    def __init__(self, handler: Handler, *, workers: int, name: str, watch_tasks: bool,
                 abandon: Callable[[Any, asyncio.Future[Any]], None]) -> None:
        self.handler = handler
        self.workers = workers
        self.name = name
        self.is_async = inspect.iscoroutinefunction(handler)
        # A test clock that waits for quiet must see which tasks are handlers (see testing.py):
        # only then does each async handler run in a task of its own, which costs a turn of
        # the event loop per job.
        self.watch_tasks = watch_tasks
        # An async handler awaited where it is called: no task, no thread (see `run`).
        self.on_loop = self.is_async and not watch_tasks
        self._abandon = abandon  # the job's connection, left to a thread that goes on
        self.threads = 0  # plain handlers running in threads
        self.tasks: set[asyncio.Future[Any]] = set()  # async handlers running (when watched)
        # Their threads, also those a shutdown stopped waiting for: a thread cannot be stopped.
        self._runs: set[asyncio.Future[Any]] = set()
        self._pool: ThreadPoolExecutor | None = None

    def start(self) -> None:
        # Threads start only once plain handlers run.
        self._pool = ThreadPoolExecutor(max_workers=self.workers,
                                        thread_name_prefix=f"{self.name}:handler")

    def stop(self) -> None:
        if self._pool is not None:
            # Threads still running a cancelled job's handler finish on their own.
            self._pool.shutdown(wait=False)
            self._pool = None

    @property
    def abandoned(self) -> int:
        """Plain handlers a shutdown stopped waiting for, still running in their threads."""
        return sum(1 for f in self._runs if not f.done())

    async def run(self, job: Job[Any], conn: Any | None) -> Any:
        """Run the handler on `job`; returns what it returned, raises what it raised."""
        if self.is_async:
            run = cast("Awaitable[Any]", self.handler(job))
            if not self.watch_tasks:
                return await run
            # Its own task, so a fake clock can tell a handler waiting on it from one waiting
            # on real I/O.
            task = asyncio.ensure_future(run)
            self.tasks.add(task)
            try:
                return await task
            finally:
                self.tasks.discard(task)
        self.threads += 1
        assert self._pool is not None  # made by start()
        context = contextvars.copy_context()  # as asyncio.to_thread does
        thread = asyncio.get_running_loop().run_in_executor(
            self._pool, functools.partial(context.run, self.handler, job))
        self._runs.add(thread)
        thread.add_done_callback(self._runs.discard)
        try:
            result = await asyncio.shield(thread)
        except asyncio.CancelledError:
            if conn is not None and not thread.done():
                # The handler's thread goes on with the job's connection: nothing else may
                # use or close it until that thread is done.
                self._abandon(conn, thread)
            raise
        finally:
            self.threads -= 1
        if inspect.isawaitable(result):
            result = await result
        return result
