"""The settle rules (outcomes.py): what a handler's result, a failure, a payload that does not
decode and spent attempts become, and which generated function a settlement calls."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

import pytest

from inboxgen.runtime.outcomes import (
    DEAD_LETTER,
    FINISH,
    PARK,
    REQUEUE,
    REQUEUE_AT,
    Backoff,
    Settlement,
    ack,
    after_failure,
    decide,
    drop,
    lease_expiry,
    retry,
    retry_after,
    settlement_call,
    spent,
    undecodable,
    what_happens,
)

NOW = dt.datetime(2026, 12, 2, 12, 0, tzinfo=dt.UTC)


def clock() -> dt.datetime:
    return NOW


def test_an_ack_finishes_and_a_drop_finishes_as_dropped() -> None:
    assert decide(ack(), attempt=5, max_attempts=5, has_retry_after=True, now=clock).action \
        == FINISH
    dropped = decide(drop(), attempt=1, max_attempts=None, has_retry_after=False, now=clock)
    assert (dropped.action, dropped.note) == (FINISH, "drop")


@pytest.mark.parametrize(("attempt", "max_attempts", "action"), [
    (1, 3, REQUEUE), (2, 3, REQUEUE), (3, 3, DEAD_LETTER), (4, 3, DEAD_LETTER),
    (9, None, REQUEUE), (None, 3, REQUEUE)])
def test_a_retry_is_dead_lettered_on_the_last_attempt(attempt: int | None,
                                                       max_attempts: int | None,
                                                       action: str) -> None:
    s = decide(retry(), attempt=attempt, max_attempts=max_attempts, has_retry_after=True,
               now=clock)
    assert s.action == action


def test_a_delay_needs_a_retry_after_column() -> None:
    later = decide(retry_after(60), attempt=1, max_attempts=None, has_retry_after=True,
                   now=clock)
    assert (later.action, later.due) == (REQUEUE_AT, NOW + dt.timedelta(seconds=60))
    at_once = decide(retry_after(60), attempt=1, max_attempts=None, has_retry_after=False,
                     now=clock)
    assert at_once.action == REQUEUE and "no retry_after column" in at_once.note


def test_a_negative_delay_is_refused() -> None:
    with pytest.raises(ValueError, match="zero or more"):
        retry_after(-1)


def test_spent_attempts_dead_letter_before_the_handler_runs() -> None:
    assert spent(3, 3) is None
    assert spent(None, 3) is None and spent(7, None) is None
    past = spent(4, 3)
    assert past is not None and past.action == DEAD_LETTER
    assert "never finished" in past.note


def test_a_failure_backs_off_exponentially_where_the_table_can_hold_the_delay() -> None:
    backoff = Backoff(base=2, factor=3, cap=50)
    delays = [after_failure(a, has_retry_after=True, backoff=backoff).delay for a in (1, 2, 3, 4)]
    assert delays == [dt.timedelta(seconds=s) for s in (2, 6, 18, 50)]
    assert after_failure(1, has_retry_after=False, backoff=backoff) == retry()


def test_an_undecodable_payload_goes_to_the_dead_letters_or_waits() -> None:
    backoff = Backoff(base=10)
    dead = undecodable(1, has_dead_letters=True, has_retry_after=True, backoff=backoff,
                       now=clock)
    assert dead == Settlement(DEAD_LETTER, note="payload does not decode")
    later = undecodable(2, has_dead_letters=False, has_retry_after=True, backoff=backoff,
                        now=clock)
    assert later == Settlement(REQUEUE_AT, due=NOW + dt.timedelta(seconds=20))
    assert undecodable(1, has_dead_letters=False, has_retry_after=False, backoff=backoff,
                       now=clock) is None  # the form's own rule


OPS = SimpleNamespace(finish=print, retry=print, retry_after=print, dead_letter=print)


@pytest.mark.parametrize(("s", "op"), [
    (Settlement(FINISH), "finish"), (Settlement(REQUEUE), "retry"),
    (Settlement(REQUEUE_AT, due=NOW), "retry_after"), (Settlement(DEAD_LETTER), "dead_letter")])
def test_each_settlement_calls_its_function_with_the_guard(s: Settlement, op: str) -> None:
    token = NOW + dt.timedelta(seconds=30)
    call = settlement_call(s, row_id=7, token=token, attempt=2, now=NOW, ops=OPS)
    assert call is not None
    assert call[0] == op
    assert call[1]["id"] == 7 and call[1]["locked_until"] == token
    assert call[1]["attempt"] == 2 and call[1]["now"] == NOW
    assert call[1].get("retry_after") == (NOW if op == "retry_after" else None)


def test_a_parked_lease_and_a_retry_without_a_statement_call_nothing() -> None:
    assert settlement_call(Settlement(PARK), row_id=1, token=None, attempt=1, now=NOW,
                           ops=OPS) is None
    no_retry = SimpleNamespace(finish=print, retry=None, retry_after=None, dead_letter=None)
    assert settlement_call(Settlement(REQUEUE), row_id=1, token=None, attempt=None, now=NOW,
                           ops=no_retry) is None


def test_the_failure_line_says_what_becomes_of_the_row() -> None:
    def says(s: Settlement, has_retry_after: bool = True) -> str:
        return what_happens(s, has_retry_after=has_retry_after, now=NOW,
                            dead_letters="group emails.dead")

    assert says(Settlement(DEAD_LETTER)) == ("its last attempt failed: moved to the dead "
                                             "letters (group emails.dead)")
    assert says(Settlement(REQUEUE_AT, due=NOW + dt.timedelta(seconds=4))) == "retrying in 4 s"
    assert says(Settlement(REQUEUE), has_retry_after=False).startswith("retrying now (the table")


@pytest.mark.parametrize(("seconds", "said"), [
    (0.999988, "1"),  # the backoff of 1 s, read against a clock a few microseconds later
    (3.999_9, "4"), (2.5, "2.5"), (0.125, "0.125"), (0.123456, "0.123"), (9.9996, "10"),
    (29.99998, "30"), (12.4, "12"), (299.99999, "300"), (-0.000_01, "0"),
])
def test_the_failure_line_rounds_the_delay_for_a_person(seconds: float, said: str) -> None:
    due = NOW + dt.timedelta(seconds=seconds)
    assert what_happens(Settlement(REQUEUE_AT, due=due), has_retry_after=True, now=NOW,
                        dead_letters="group emails.dead") == f"retrying in {said} s"


def test_a_lease_ends_on_a_whole_second() -> None:
    start = NOW.replace(microsecond=250_000)
    assert lease_expiry(start, 30) == NOW + dt.timedelta(seconds=31)
    assert lease_expiry(NOW, 30) == NOW + dt.timedelta(seconds=30)
