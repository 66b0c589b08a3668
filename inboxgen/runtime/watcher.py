"""SQLite: wake workers the moment another connection commits to the database file.

SQLite has no notifications, but `PRAGMA data_version` changes whenever another connection
(of this process or any other) has committed a change to the file. A connection of the
watcher's own reads it every few milliseconds, on a thread of its own; a change wakes one
waiting slot, which claims at once instead of waiting out the poll interval (a full claim
wakes the next); with every slot busy, the change waits for the next tick. Reading it costs
microseconds. Workers watch unless told not to (listen=False): see docs/runtime.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from inboxgen.runtime.backends.base import Wakes

log = logging.getLogger("inboxgen.worker")

# How often the file is looked at: the pickup delay of a job enqueued on an idle worker.
WATCH_INTERVAL = 0.01


async def watch(path: str, wakes: Wakes) -> None:
    thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{wakes.name}:watch")
    loop = asyncio.get_running_loop()
    conn: sqlite3.Connection | None = None
    try:
        conn = await loop.run_in_executor(thread, _open, path)
        seen: int | None = None  # the first read that succeeds sets it
        while True:
            try:
                now = await loop.run_in_executor(thread, _version, conn)
            except sqlite3.Error as err:
                # Locked for now (the first read too: the next tick tries again), or a file
                # replaced or gone (the claims will say).
                log.debug("%s: cannot read the database's data_version: %s", wakes.name, err)
            else:
                # Only a slot that waits is woken: busy slots claim again anyway, and owing
                # them a wake-up would have every commit of another process start a claim at
                # once, crowding the file's one write lock. With no slot waiting, the change
                # is looked at again on the next tick.
                if seen is None:
                    seen = now
                elif now != seen and wakes.wake_waiting():
                    seen = now
            await asyncio.sleep(WATCH_INTERVAL)
    finally:
        if conn is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(loop.run_in_executor(thread, conn.close))
        thread.shutdown(wait=False)


def _open(path: str) -> sqlite3.Connection:
    # Read-only, and never creating the file: the workers' own connections do that.
    uri = Path(path).resolve().as_uri() + "?mode=ro"
    # No busy wait: a read the file's lock holder delays is simply tried on the next tick (a
    # thread stuck in SQLite's busy handler would also keep the process from exiting).
    return sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None,
                           timeout=0)


def _version(conn: sqlite3.Connection) -> int:
    (value,) = conn.execute("PRAGMA data_version").fetchone()
    return int(value)
