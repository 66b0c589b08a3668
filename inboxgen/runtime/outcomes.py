"""What a handler returns, and what the worker then does with the row: decisions without I/O."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable

import attrs

ACK, DROP, RETRY, RETRY_AFTER = "ack", "drop", "retry", "retry_after"


@attrs.frozen
class Outcome:
    kind: str
    delay: _dt.timedelta | None = None


def ack() -> Outcome:
    """The job is done: delete the row, or mark it processed."""
    return ACKED_OUTCOME


def drop() -> Outcome:
    """The job is not worth doing: finish the row like an ack, logged as dropped."""
    return Outcome(DROP)


def retry() -> Outcome:
    """Deliver the job again now."""
    return Outcome(RETRY)


def retry_after(delay: _dt.timedelta | float) -> Outcome:
    """Deliver the job again once `delay` (a timedelta or seconds) has passed."""
    if not isinstance(delay, _dt.timedelta):
        delay = _dt.timedelta(seconds=delay)
    if delay < _dt.timedelta(0):
        raise ValueError(f"retry_after needs a delay of zero or more, not {delay}")
    return Outcome(RETRY_AFTER, delay)


ACKED_OUTCOME = Outcome(ACK)  # frozen: one value serves every ack


@attrs.frozen
class Backoff:
    """Delay before the next delivery after a handler raised: base * factor**(attempt-1), capped."""

    base: float = 1.0
    factor: float = 2.0
    cap: float = 300.0

    def delay(self, attempt: int | None) -> _dt.timedelta:
        n = max((attempt or 1) - 1, 0)
        return _dt.timedelta(seconds=min(self.cap, self.base * self.factor ** min(n, 64)))


FINISH, REQUEUE, REQUEUE_AT, DEAD_LETTER = "finish", "requeue", "requeue_at", "dead_letter"
# Lease form only: leave the lease to run out, so the row comes back one lease later.
PARK = "park"


@attrs.frozen
class Settlement:
    """What happens to a row: finish it, requeue it (now or at `due`), or dead-letter it."""

    action: str
    due: _dt.datetime | None = None
    note: str = ""


ACKED = Settlement(FINISH, note=ACK)


def decide(
    outcome: Outcome,
    *,
    attempt: int | None,
    max_attempts: int | None,
    has_retry_after: bool,
    now: Callable[[], _dt.datetime],
) -> Settlement:
    """The settlement of a delivery; `attempt` is the delivery's number (the first reads 1).
    `now` is read only for a delay (an ack, the common case, needs no clock)."""
    if outcome.kind == ACK:
        return ACKED
    if outcome.kind == DROP:
        return Settlement(FINISH, note=DROP)
    if max_attempts is not None and attempt is not None and attempt >= max_attempts:
        return Settlement(DEAD_LETTER, note=f"attempt {attempt} of {max_attempts} failed")
    if outcome.kind == RETRY_AFTER and outcome.delay:
        if has_retry_after:
            return Settlement(REQUEUE_AT, due=now() + outcome.delay)
        return Settlement(REQUEUE, note="the table has no retry_after column: retried at once")
    return Settlement(REQUEUE)


def lease_expiry(now: _dt.datetime, lease_seconds: int) -> _dt.datetime:
    """The lease's end, in whole seconds (rounded up) so DATETIME columns hold it exactly."""
    end = now + _dt.timedelta(seconds=lease_seconds)
    if end.microsecond:
        end = end.replace(microsecond=0) + _dt.timedelta(seconds=1)
    return end
