"""What a limited claim keeps of the rows it read (inboxgen.values.within_limits): in claim
order, within the queue's limit, the rate's window and each key's limit, counting the rows it
keeps on top of what was in work (or claimed) before."""

from __future__ import annotations

from inboxgen.values import KeyTurns, at_most, within_limits


def row(id_: int, key: str, in_work: int = 0, key_in_work: int = 0,
        claimed: int = 0) -> tuple[object, ...]:
    return (id_, in_work, claimed, key, key_in_work)


def test_a_key_keeps_no_more_than_its_limit_counting_its_jobs_in_work() -> None:
    rows = [row(1, "a", key_in_work=1), row(2, "a", key_in_work=1), row(3, "b"),
            row(4, "b"), row(5, "b")]
    assert within_limits(rows, None, 2) == [(1,), (3,), (4,)]


def test_the_queue_limit_counts_the_rows_kept_not_those_passed_over() -> None:
    rows = [row(1, "a", in_work=1), row(2, "a", in_work=1), row(3, "b", in_work=1),
            row(4, "c", in_work=1)]
    assert within_limits(rows, 3, 1) == [(1,), (3,)]


def test_a_rate_stops_at_the_claims_left_in_its_window() -> None:
    rows = [row(n, "a", claimed=8) for n in range(1, 6)]
    assert within_limits(rows, None, None, 10) == [(1,), (2,)]


def test_a_rate_per_key_passes_over_the_keys_whose_claims_are_spent() -> None:
    rows = [row(1, "a", claimed=1), row(2, "a", claimed=1), row(3, "b", claimed=0),
            row(4, "b", claimed=0), row(5, "b", claimed=0)]
    assert within_limits(rows, None, None, 2, rate_per_key=True) == [(1,), (3,), (4,)]


def test_a_claim_reads_no_more_rows_than_a_limit_could_keep() -> None:
    assert at_most(160, 6, None) == 6
    assert at_most(16, None, 100) == 16
    assert at_most(16, None, None) == 16


def walked(id_: int | None, key: str, rank: int) -> tuple[object, ...]:
    return (*row(id_, key), rank)  # type: ignore[arg-type]


def test_a_fair_walk_of_limit_keys_goes_on_after_its_last_key() -> None:
    turns = KeyTurns()
    rows = [walked(1, "a", 1), walked(None, "b", 0), walked(3, "c", 1), walked(2, "a", 2)]
    assert turns.walked(rows, 3) == [row(1, "a"), row(3, "c"), row(2, "a")]
    assert turns.after == "c"
    assert turns.passed_over  # b had nothing due: the keys after c may have


def test_a_fair_walk_short_of_limit_keys_starts_again_from_the_first() -> None:
    turns = KeyTurns()
    turns.after = "x"
    assert turns.walked([walked(7, "y", 1), walked(8, "y", 2)], 4) == [row(7, "y"), row(8, "y")]
    assert turns.after is None and not turns.passed_over
    assert turns.walked([], 4) == [] and turns.after is None


def weighed(id_: int | None, key: str, rank: int, weight: int) -> tuple[object, ...]:
    """A weighted fair CLAIM's row: a walked row and its key's weight."""
    return (*walked(id_, key, rank), weight)


def test_a_weighted_claim_that_stops_inside_a_turn_resumes_it() -> None:
    """a (weight 3) had two of its three rows when the batch filled: the next claim walks from
    a again (after what this one walked after), a's first row counted as its third."""
    turns = KeyTurns()
    turns.after = "z"
    rows = [weighed(1, "a", 1, 3), weighed(2, "a", 2, 3), weighed(3, "a", 3, 3),
            weighed(9, "b", 1, 1)]
    assert turns.weighted_walk(rows, 2) == [row(1, "a"), row(2, "a"), row(3, "a"), row(9, "b")]
    assert (turns.after, turns.resume, turns.spent) == ("z", "a", 2)
    # The next claim: a's third row ends its turn, then b's.
    rows = [weighed(3, "a", 1, 3), weighed(9, "b", 1, 1), weighed(4, "a", 2, 3)]
    turns.weighted_walk(rows, 2)
    assert (turns.after, turns.resume, turns.spent) == ("b", None, 0)


def test_a_weighted_turn_unfinished_further_on_resumes_after_the_key_before_it() -> None:
    turns = KeyTurns()
    rows = [weighed(1, "a", 1, 1), weighed(5, "b", 1, 4), weighed(6, "b", 2, 4)]
    turns.weighted_walk(rows, 2)
    assert (turns.after, turns.resume, turns.spent) == ("a", "b", 1)


def test_a_weighted_claim_past_every_walked_keys_turn_goes_on_as_an_unweighted_one() -> None:
    """Rows beyond the first turn of every key walked (a batch larger than the turns): the
    walk goes on after its last key, or from the first where it was short of `limit` keys."""
    turns = KeyTurns()
    rows = [weighed(1, "a", 1, 2), weighed(2, "a", 2, 2), weighed(5, "b", 1, 1),
            weighed(3, "a", 3, 2)]
    turns.weighted_walk(rows, 4)
    assert (turns.after, turns.resume) == (None, None)
    turns.weighted_walk(rows, 2)  # two keys walked, a claim of two: a's turn is over
    assert (turns.after, turns.resume) == ("a", None)


def test_a_weighted_walk_with_nothing_due_moves_on_as_an_unweighted_one() -> None:
    turns = KeyTurns()
    turns.resume, turns.spent = "a", 1
    assert turns.weighted_walk([weighed(None, "a", 0, 3), weighed(None, "b", 0, 1)], 2) == []
    assert (turns.after, turns.resume, turns.spent) == ("b", None, 0)
    assert turns.passed_over


def test_a_weighted_claim_short_of_its_limit_ends_the_turn_it_stopped_in() -> None:
    """a (weight 3) had one row due, and the claim of two took it alone: a's turn is over."""
    turns = KeyTurns()
    turns.weighted_walk([weighed(1, "a", 1, 3)], 2)
    assert (turns.after, turns.resume, turns.spent) == ("a", None, 0)
