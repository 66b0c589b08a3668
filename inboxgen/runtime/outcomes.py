"""What a handler returns, and what the worker then does with the row: decisions without I/O."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from typing import Any

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


# -- the rules a delivery follows around the handler -------------------------------------------


def spent(attempt: int | None, max_attempts: int | None) -> Settlement | None:
    """A row claimed past its last attempt: earlier deliveries never settled (their process
    died), so it is dead-lettered before its handler runs again, and a job that kills its
    worker cannot loop. None when attempts are left."""
    if max_attempts is not None and attempt is not None and attempt > max_attempts:
        return Settlement(DEAD_LETTER, note=f"attempt {attempt} is past max_attempts "
                                            f"{max_attempts}: earlier deliveries never finished")
    return None


def after_failure(attempt: int | None, *, has_retry_after: bool, backoff: Backoff) -> Outcome:
    """What a handler that raised gets: a retry after the backoff, or at once where the table
    has no retry_after column to hold the delay."""
    return retry_after(backoff.delay(attempt)) if has_retry_after else retry()


def undecodable(attempt: int | None, *, has_dead_letters: bool, has_retry_after: bool,
                backoff: Backoff, now: Callable[[], _dt.datetime]) -> Settlement | None:
    """A payload that does not decode never will: dead-letter it, or delay it; None where the
    table has neither a destination nor retry_after (the form's own rule then: drop or park)."""
    if has_dead_letters:
        return Settlement(DEAD_LETTER, note="payload does not decode")
    if has_retry_after:
        return Settlement(REQUEUE_AT, due=now() + backoff.delay(attempt))
    return None


_OPS = {FINISH: "finish", REQUEUE: "retry", REQUEUE_AT: "retry_after",
        DEAD_LETTER: "dead_letter"}


def settlement_call(s: Settlement, *, row_id: Any, token: _dt.datetime | None,
                    attempt: int | None, now: _dt.datetime, ops: Any,
                    error: str | None = None, result: Any = None
                    ) -> tuple[str, dict[str, Any]] | None:
    """The generated function settlement `s` calls, and the runtime's values for it (each
    function takes those its statement names; `error`, what a failure's row keeps, and
    `result`, what an ack's keeps, where the table has such a column); None where it needs
    no statement: a parked lease, or a plain retry where the module has no statement for it
    (a row lock without an attempt column, advisory: the rollback or the unlock returns the
    row)."""
    if s.action == PARK:
        return None
    op = _OPS[s.action]
    if getattr(ops, op) is None:
        return None
    values: dict[str, Any] = {"id": row_id, "locked_until": token, "attempt": attempt,
                              "now": now, "error": error, "result": result}
    if s.action == REQUEUE_AT:
        values["retry_after"] = s.due
    return op, values


def what_happens(s: Settlement, *, has_retry_after: bool, now: _dt.datetime,
                 dead_letters: str) -> str:
    """What becomes of a failed delivery's row, as its log line says it."""
    if s.action == DEAD_LETTER:
        return f"its last attempt failed: moved to the dead letters ({dead_letters})"
    if s.action == REQUEUE_AT:
        assert s.due is not None
        return f"retrying in {for_a_person((s.due - now).total_seconds())} s"
    if not has_retry_after:
        return "retrying now (the table has no retry_after column for a backoff)"
    return "retrying now"


def for_a_person(seconds: float) -> str:
    """A delay as a person reads it: whole seconds from 10 s up, three significant digits below
    (`4`, `2.5`, `0.125`), never below zero. The delay is read against a clock a moment later
    than the one that set it, which would show as 0.999988 s."""
    seconds = max(seconds, 0.0)
    return str(round(seconds)) if seconds >= 10 else f"{seconds:.3g}"
