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
