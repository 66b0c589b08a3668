"""Tasks the runtime starts and stops on its event loop."""

from __future__ import annotations

import asyncio
from typing import Any


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel `task` (if any) and wait until it has ended, whatever it raised."""
    if task is not None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
