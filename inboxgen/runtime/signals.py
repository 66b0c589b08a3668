"""`run()` of a worker or a service: serve on a new event loop with SIGINT and SIGTERM handled
(Unix), the handlers removed again when serving ends; and the line each signal gets."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable

SIGNALS = (signal.SIGINT, signal.SIGTERM)


def run_with_signals(serve: Callable[[], Awaitable[None]],
                     signalled: Callable[[signal.Signals], None]) -> None:
    """Run `serve()` to its end on a new event loop, calling `signalled(sig)` on the loop for
    each SIGINT or SIGTERM meanwhile."""
    asyncio.run(_with_signals(serve, signalled))


async def _with_signals(serve: Callable[[], Awaitable[None]],
                        signalled: Callable[[signal.Signals], None]) -> None:
    loop = asyncio.get_running_loop()
    for sig in SIGNALS:
        loop.add_signal_handler(sig, signalled, sig)
    try:
        await serve()
    finally:
        for sig in SIGNALS:
            loop.remove_signal_handler(sig)


def say_signalled(log: logging.Logger, name: str, sig: signal.Signals, *, again: bool,
                  in_work: int, timeout: float, unfinished: str) -> None:
    """The line a signal gets: the first stops claiming and says how many jobs in work it waits
    for; the second (`again`) stops at once, and `unfinished` says what becomes of those jobs."""
    if again:
        log.warning("%s: %s again: stopping at once%s", name, sig.name,
                    f" ({unfinished})" if unfinished else "")
    elif in_work:
        log.warning("%s: %s: stopping; waiting up to %g s for %d job(s) in work (again to stop "
                    "at once)", name, sig.name, timeout, in_work)
    else:
        log.info("%s: %s: stopping", name, sig.name)


def exit_past_abandoned_threads(name: str, abandoned: int, code: int = 0) -> None:
    """After a second signal: Python waits for every thread at exit, and a handler's thread
    cannot be stopped, so a process whose `run()` left `abandoned` of them exits at once
    instead (a command's last step). Returns where none were left."""
    if not abandoned:
        return
    logging.getLogger("inboxgen.worker").warning(
        "%s: exiting with %d handler thread(s) still running", name, abandoned)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
