"""LISTEN/NOTIFY on PostgreSQL: wake workers the moment a job is enqueued.

The channel is the table's name and the payload its group; inserts notify with the generated
`notify()` in the same transaction, so the wake-up arrives when the job commits. A listening
connection that is lost is opened again, and every worker is woken once (notifications sent
meanwhile are gone, and polling alone would find their jobs late). psycopg is imported when
listening begins, so that this module imports without it (a service without PostgreSQL queues
never needs it).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from inboxgen.runtime.connecting import first_line

if TYPE_CHECKING:
    from inboxgen.runtime.backends.base import Wakes

log = logging.getLogger("inboxgen.worker")


async def listen(conninfo: str | None, connect_kwargs: Mapping[str, Any],
                 routes: Sequence[tuple[str, Wakes]], name: str | None = None) -> None:
    """Listen on each route's channel (a table's name) with connections opened as `conninfo`
    and `connect_kwargs` say, and wake the route's worker for its group's rows, until
    cancelled. One session serves every route: a service's queues on one database share it."""
    import psycopg
    from psycopg import sql

    name = name or routes[0][1].name
    channels = sorted({channel for channel, _ in routes})
    everyone = [wakes for _, wakes in routes]
    first = True
    lost = ""  # why the last listening connection ended, said once it is known whether alone
    failures = 0  # connection attempts failed in a row: one line per outage, not per attempt
    while True:
        try:
            conn = await psycopg.AsyncConnection.connect(
                conninfo or "", **{**connect_kwargs, "autocommit": True})
        except (psycopg.Error, OSError) as err:
            failures += 1
            # The database is out of reach: the workers' outage (one line for all of it).
            reported = [w.lost_connection(err, "listening") for w in everyone] if \
                failures == 1 else [True]
            if not any(reported):
                log.error("%s: cannot open the listening connection, trying again shortly: %s",
                          name, first_line(err))
            else:
                log.debug("%s: cannot open the listening connection yet: %s", name,
                          first_line(err))
            # 50 ms, doubling up to 1 s, with jitter: back soon after a server restart.
            await asyncio.sleep(random.uniform(0.5, 1.0) * min(1.0, 0.05 * 2.0 ** min(
                failures - 1, 10)))
            continue
        alone = failures == 0  # the connection was lost alone, the database answers
        failures = 0
        try:
            async with conn:
                for channel in channels:
                    await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
                for wakes in everyone:
                    wakes.listening_on(conn.info.backend_pid)
                if not first:
                    (log.warning if alone else log.debug)(
                        "%s: the listening connection was lost (%s); listening again on %s, "
                        "waking every worker once", name, lost, ", ".join(channels))
                    for wakes in everyone:
                        wakes.wake_all()
                first = False
                async for note in conn.notifies():
                    for channel, wakes in routes:
                        if channel == note.channel and (
                                wakes.group is None or note.payload in ("", wakes.group)):
                            wakes.wake_one()  # one slot per job; a full claim wakes the next
        except (psycopg.Error, OSError) as err:
            lost = first_line(err)
            log.debug("%s: the listening connection was lost (%s); reconnecting", name,
                      lost)
            await asyncio.sleep(0.05)
