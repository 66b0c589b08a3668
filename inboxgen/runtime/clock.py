"""Where "now" comes from: the runtime binds it as a parameter, so tests can drive time."""

from __future__ import annotations

import asyncio
import datetime as _dt
from typing import Protocol


class Clock(Protocol):
    def now(self) -> _dt.datetime:
        """The current time, timezone-aware."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait `seconds` of this clock's time."""
        ...


class SystemClock:
    """Wall-clock time in UTC."""

    def now(self) -> _dt.datetime:
        return _dt.datetime.now(_dt.UTC)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(seconds, 0))


class DatabaseClock(SystemClock):
    """This host's UTC time corrected by the offset last measured to the database server's
    clock (clocksync.py): due times, lease expiries and renewals are then judged by the
    database's clock, whatever this host's says. Waits are this host's, which only a rate of
    drift (parts per million) could make wrong."""

    def __init__(self) -> None:
        self.offset = _dt.timedelta(0)

    def now(self) -> _dt.datetime:
        return _dt.datetime.now(_dt.UTC) + self.offset
