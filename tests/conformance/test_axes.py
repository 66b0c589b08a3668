"""The matrix's space without its product: refusal() reads only the RULED axes, so the
covering array and the edge tests can be drawn from the ruled points and the free axes
(axes.py) instead of tens of millions of shapes. Checked on random shapes of the product."""

from __future__ import annotations

import itertools
import random

from conformance.axes import _SHORT, AXES, FREE, Shape, covering_array, refusal, refused_probes


def _random_shapes(n: int, seed: int) -> list[Shape]:
    rng = random.Random(seed)
    return [Shape(**{axis: rng.choice(values) for axis, values in AXES.items()})
            for _ in range(n)]


def test_refusal_reads_no_free_axis() -> None:
    rng = random.Random(1)
    for s in _random_shapes(20_000, seed=2):
        other = Shape(**{**s.values(), **{axis: rng.choice(AXES[axis]) for axis in FREE}})
        assert refusal(other) == refusal(s), (s, other)


def test_the_covering_array_holds_every_pair_of_random_valid_shapes() -> None:
    array = covering_array()
    assert all(refusal(s) is None for s in array)
    held = {pair for s in array for pair in itertools.combinations(s.values().items(), 2)}
    valid = [s for s in _random_shapes(40_000, seed=3) if refusal(s) is None]
    assert len(valid) > 1_000  # the sample reaches the valid space
    for s in valid:
        for pair in itertools.combinations(s.values().items(), 2):
            assert pair in held, (pair, s.name)


def test_one_probe_per_reason_and_dialect() -> None:
    probes = refused_probes()
    reasons = {(s.dialect, refusal(s)) for s in probes}
    assert len(reasons) == len(probes) and None not in {why for _, why in reasons}
    sampled = {(s.dialect, refusal(s)) for s in _random_shapes(20_000, seed=4)}
    assert sampled - {(d, None) for d in AXES["dialect"]} <= reasons


def test_the_longest_names_fit_the_servers() -> None:
    """Every shape's longest table or index name (its name and the longest suffix it takes:
    `_in_work` or `_weights` where it has limits, else `_pauses`, `_claims`, `_ledger`) within
    PostgreSQL's 63 bytes, for the longest code of every axis."""
    for limits in AXES["limits"]:
        longest = Shape(**{axis: max(values, key=lambda v: len(_SHORT[axis][v]))
                           for axis, values in AXES.items()} | {"limits": limits})
        suffix = "_in_work" if limits in ("queue", "key", "weighted") else "_ledger"
        assert len(longest.name + suffix) <= 63, longest.name


def test_the_docs_give_each_levels_shape_count() -> None:
    """docs/conformance.md's table of levels says how many shapes `pairs` and `triples` run."""
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "conformance.md").read_text()
    said = {m.group(1): int(m.group(2))
            for m in re.finditer(r"^\| `(pairs|triples)`[^\n]*\| (\d+) \|$", page, re.M)}
    assert said == {"pairs": len(covering_array("pairs")),
                    "triples": len(covering_array("triples"))}
