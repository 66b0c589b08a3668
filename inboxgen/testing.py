"""Helpers for users' tests: a fake clock, and running a worker until its queue is idle
(implemented in inboxgen.runtime.testing)."""

from inboxgen.runtime.testing import FakeClock, drain, run_until_idle

__all__ = ["FakeClock", "drain", "run_until_idle"]
