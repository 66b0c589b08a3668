"""pytest fixtures for testing code that uses inboxgen, registered through the `pytest11` entry
point (installing inboxgen is enough): `inboxgen_clock`, a new FakeClock (a minute ahead of
the real time), and `inboxgen_drain`, which runs a worker until nothing due is left."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from inboxgen.runtime.testing import FakeClock, drain
from inboxgen.runtime.worker import Worker


@pytest.fixture
def inboxgen_clock() -> FakeClock:
    """A fake clock for `Worker(..., clock=inboxgen_clock)`: leases, retries and polls follow
    it, and `inboxgen_drain` jumps it from timer to timer."""
    return FakeClock()


@pytest.fixture
def inboxgen_drain() -> Callable[..., None]:
    """`inboxgen_drain(worker, timeout=60.0)`: start the worker, run it until no job is in
    work and nothing due is left, then shut it down (from a synchronous test)."""

    def run(worker: Worker, *, timeout: float = 60.0) -> None:
        drain(worker, timeout=timeout)

    return run
