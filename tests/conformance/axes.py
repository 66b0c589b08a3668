"""The spec space the conformance matrix walks: its axes, which points of it the build must
refuse, and the covering arrays CI runs.

Every axis is one line of AXES. A shape is one value of each. `refusal()` says which shapes the
generator's own checks refuse (the matrix asserts the build refuses exactly those, with a
located error); every other shape is built and run.

Levels (INBOXGEN_CONFORMANCE):
- `pairs` (the default, CI): every pair of axis values that some valid shape holds, plus every
  triple of form x dead letters x handler;
- `triples`: every triple of axis values;
- `full`: the whole product.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, fields

# Axis name -> its values. The first value of each is its most common one.
AXES: dict[str, tuple[str, ...]] = {
    "dialect": ("postgres", "mysql", "sqlite"),
    "form": ("row_lock", "lease", "advisory"),
    "count_crashes": ("default", "true", "false"),
    "handler": ("plain", "async", "transactional"),
    "batch": ("1", "16"),
    "dead": ("none", "group", "table"),
    "finished": ("deleted", "kept"),
    "order": ("id", "priority", "retry_after", "both"),
    "group": ("none", "plain", "fifo"),
    "id": ("integer", "uuid", "text"),
    "attempt": ("integer", "smallint"),
    "payload": ("bytes", "json", "typed"),
    "pauses": ("none", "table"),
    "limits": ("none", "queue", "key", "rate", "rate_key", "fair", "weighted"),
    "error": ("none", "text"),
    "result": ("none", "json", "typed"),
    "progress": ("none", "json"),
    "replace": ("none", "debounce"),
    "after": ("none", "root"),
    "storage": ("plain", "partitioned"),
}
# The triples CI covers besides every pair: where a settlement's statements meet the handler's
# connection (a dead letter to a table under a pipelined row lock looped here), and where each
# dialect runs each form's dead letters (the row lock's to a table looped on PostgreSQL alone).
TRIPLES = (("form", "dead", "handler"), ("dialect", "form", "dead"))

# The shapes users run in production: each a name and the axis values in which it differs from
# the first (a priority and a due time, dead letters to a table, finished rows deleted: the
# table a new user writes). bench/shapes.py measures each, row lock counted and not and lease,
# on PostgreSQL and MySQL/MariaDB; the covering arrays start from them (row lock, as counted
# as the shape allows), so CI runs every one on both.
PRODUCTION_BASE = {"dialect": "postgres", "form": "row_lock", "count_crashes": "default",
                   "handler": "async", "batch": "16", "dead": "table", "finished": "deleted",
                   "order": "both", "group": "none", "id": "integer", "attempt": "integer",
                   "payload": "json", "pauses": "none", "limits": "none",
                   "error": "none", "result": "none",
                   "progress": "none", "replace": "none", "after": "none",
                   "storage": "plain"}
PRODUCTION: dict[str, dict[str, str]] = {
    "priority_due": {},
    "priority_due_kept": {"finished": "kept"},
    "due": {"order": "retry_after"},
    "group_kept": {"order": "id", "group": "plain", "finished": "kept", "dead": "group"},
    "priority_group": {"order": "priority", "group": "plain", "dead": "group"},
    "fifo": {"order": "retry_after", "group": "fifo", "dead": "group"},
    "uuid": {"id": "uuid"},
}


@dataclass(frozen=True)
class Shape:
    dialect: str
    form: str
    count_crashes: str
    handler: str
    batch: str
    dead: str
    finished: str
    order: str
    group: str
    id: str
    attempt: str
    payload: str
    pauses: str  # "table": [flow] pauses; the scenario pauses the queue (or group) first
    # [flow] "queue": concurrency = 3; "key": key_concurrency = 2 on a tenant column whose
    # default every job takes; "rate": 50 claims in any second; "rate_key": 50 a second for
    # each tenant (every job's the same); "fair": claims take turns across tenants; "weighted":
    # the same, weighted by a weights table (the tenant every job has: weight 2)
    limits: str
    error: str  # "text": a nullable text column bound to role error (the last failure)
    # "json": a nullable JSON column bound to role result (what a handler returned); "typed":
    # the same, typed with a class of the project (its handler returns a dict that fits)
    result: str
    progress: str  # "json": a nullable JSON column bound to role progress (lease only)
    # "debounce": a unique job_key column (and, with a due time, an enqueued_at column); the
    # scenario enqueues each job through insert_replace() (or insert_debounced()) twice, a
    # decoy first, where the form has them
    replace: str
    # "root": `after` (a parents column and an after table); the scenario enqueues every job of
    # the drain but the first (A) after it, on_failure="run" (but where it enqueues through
    # insert_replace()), and checks none was delivered before A's last delivery
    after: str
    # "partitioned": the queue table is partitioned by a hash of its id (of its replace key,
    # where it has one) in two partitions (PostgreSQL: PARTITION BY HASH and two PARTITION OF,
    # its claim index on the parent; MySQL/MariaDB: PARTITION BY KEY)
    storage: str

    @property
    def name(self) -> str:
        """The shape's table name: one short code per axis, but the later axes' first values,
        which are left out, and their others, run on (`pg_rl_cd_hp_b1_dt_fd_oi_gn_ii_a4_b_pn_ln`,
        `..._lnetrjsp`), so that with a suffix (`_pauses`, `_in_work`) the longest stays within
        PostgreSQL's 63 bytes (test_axes.py)."""
        codes = [_SHORT[f.name][getattr(self, f.name)] for f in fields(self)]
        return "_".join(codes[:_LATER]) + "".join(codes[_LATER:])

    def values(self) -> dict[str, str]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @property
    def has_retry_after(self) -> bool:
        return self.order in ("retry_after", "both")

    @property
    def has_priority(self) -> bool:
        return self.order in ("priority", "both")


# Each axis value's code in a shape's table name.
_SHORT: dict[str, dict[str, str]] = {
    "dialect": {"postgres": "pg", "mysql": "my", "sqlite": "lt"},
    "form": {"row_lock": "rl", "lease": "ls", "advisory": "ad"},
    "count_crashes": {"default": "cd", "true": "ct", "false": "cf"},
    "handler": {"plain": "hp", "async": "ha", "transactional": "ht"},
    "batch": {"1": "b1", "16": "b16"},
    "dead": {"none": "dn", "group": "dg", "table": "dt"},
    "finished": {"deleted": "fd", "kept": "fk"},
    "order": {"id": "oi", "priority": "op", "retry_after": "or", "both": "opr"},
    "group": {"none": "gn", "plain": "gp", "fifo": "gf"},
    "id": {"integer": "ii", "uuid": "iu", "text": "it"},
    "attempt": {"integer": "a4", "smallint": "a2"},
    "payload": {"bytes": "b", "json": "j", "typed": "ty"},
    "pauses": {"none": "pn", "table": "pt"},
    "limits": {"none": "ln", "queue": "lq", "key": "lk", "rate": "lr", "rate_key": "lrk",
               "fair": "lf", "weighted": "lw"},
    # The later axes name only their other values, run together (Shape.name).
    "error": {"none": "", "text": "et"},
    "result": {"none": "", "json": "rj", "typed": "rt"},
    "progress": {"none": "", "json": "pr"},
    "replace": {"none": "", "debounce": "xd"},
    "after": {"none": "", "root": "wa"},
    "storage": {"plain": "", "partitioned": "sp"},
}


# Where the later axes begin, in the order of AXES.
_LATER = list(AXES).index("error")


def production(name: str, **axes: str) -> Shape:
    """Production shape `name` (PRODUCTION), with `axes` set (dialect, form, ...)."""
    return Shape(**{**PRODUCTION_BASE, **PRODUCTION[name], **axes})


def pinned() -> list[Shape]:
    """Shapes a level runs after its covering array, one step off a production shape where
    generated statements differ that no pair need reach, partitioned on PostgreSQL: the table
    a new user writes, whose claims by priority keep to a list of priorities, under each
    form; and a group claimed in id order, whose counted row lock's and lease's claims repeat
    their start outside their subquery."""
    return [*(production("priority_due", form=form, storage="partitioned")
              for form in ("row_lock", "lease", "advisory")),
            *(production("group_kept", form=form, storage="partitioned")
              for form in ("row_lock", "lease"))]


def production_seeds() -> list[Shape]:
    """Every production shape on PostgreSQL and MySQL/MariaDB, under the row lock."""
    return [production(name, dialect=dialect) for dialect in ("postgres", "mysql")
            for name in PRODUCTION]


def refusal(s: Shape) -> str | None:
    """Why the build refuses shape `s` (a phrase its error contains), or None where it builds."""
    if s.dialect == "sqlite" and s.storage == "partitioned":
        return "SQLite has no partitioned tables"
    if s.dialect == "sqlite" and s.form == "row_lock":
        return "row_lock"  # SQLite has no row lock
    if s.group == "fifo" and s.form == "advisory":
        return "fifo = true"
    if s.dead == "group" and s.group == "none":
        return "dead_letter.group"
    if s.count_crashes != "default" and s.form != "row_lock":
        return f"count_crashes = {s.count_crashes}"
    if s.count_crashes == "true" and s.group == "fifo":
        return "count_crashes = true"
    # Elsewhere than a lease, limits are seats (session locks): the queue's on the row lock,
    # the queue's and a key's on the advisory form.
    if s.limits in ("rate", "rate_key") and s.form != "lease":
        return "rate needs the lease form"
    if s.limits == "key" and s.form == "row_lock":
        return "key_concurrency needs the lease or advisory form"
    if s.limits in ("fair", "weighted") and s.form != "lease":
        return "fair needs the lease form"
    if s.limits != "none" and s.group == "fifo":
        return "not built for FIFO"
    if s.result != "none" and s.finished == "deleted":
        return "needs a processed_at column"
    if s.progress != "none" and s.form != "lease":
        return "it needs the lease form"
    if s.after != "none" and s.dead == "none":
        return "`after` needs [dead_letter]"
    if s.after != "none" and s.form == "advisory":
        return "`after` is not built for the advisory form"
    if s.after != "none" and s.group == "fifo":
        return "`after` is not built for FIFO tables"
    return None


# The axes refusal() reads. Every other axis is free: each of its values builds wherever the
# rest of the shape does, so the valid space is (valid points of these axes) x (the free
# axes' product) and nothing below enumerates the whole product (test_axes.py checks that
# refusal() reads no free axis).
RULED = ("dialect", "form", "count_crashes", "dead", "finished", "group", "limits", "result",
         "progress", "after", "storage")
FREE = tuple(axis for axis in AXES if axis not in RULED)


def every_shape() -> Iterator[Shape]:
    """The whole product (level `full` only: over a hundred million shapes)."""
    for values in itertools.product(*AXES.values()):
        yield Shape(*values)


def ruled_points(*, refused: bool = False) -> list[dict[str, str]]:
    """The points of the RULED axes whose shapes build (`refused`: whose shapes the build
    refuses), in product order."""
    first = {axis: AXES[axis][0] for axis in FREE}
    out = []
    for values in itertools.product(*(AXES[axis] for axis in RULED)):
        point = dict(zip(RULED, values, strict=True))
        if (refusal(Shape(**point, **first)) is not None) == refused:
            out.append(point)
    return out


def _tuples(s: Shape, combos: Iterable[tuple[str, ...]]) -> Iterator[tuple[tuple[str, str], ...]]:
    v = s.values()
    for combo in combos:
        yield tuple((axis, v[axis]) for axis in combo)


def _combos(level: str) -> list[tuple[str, ...]]:
    names = list(AXES)
    if level == "triples":
        return list(itertools.combinations(names, 3))
    return list(itertools.combinations(names, 2)) + [tuple(t) for t in TRIPLES]


def _held(points: list[dict[str, str]], combos: list[tuple[str, ...]]
          ) -> set[tuple[tuple[str, str], ...]]:
    """Every tuple of axis values (one per combo) that some valid shape holds: the RULED
    values some valid point holds, with any values of the free axes."""
    held = set()
    for combo in combos:
        ruled = [axis for axis in combo if axis in RULED]
        for rv in {tuple(p[axis] for axis in ruled) for p in points}:
            for fv in itertools.product(*(AXES[axis] for axis in combo if axis not in RULED)):
                known = dict(zip(ruled, rv, strict=True))
                free = iter(fv)
                held.add(tuple((axis, known[axis] if axis in known else next(free))
                               for axis in combo))
    return held


def covering_array(level: str = "pairs", seed: int = 28) -> list[Shape]:
    """Valid shapes that together hold every pair (or triple) of axis values any valid shape
    holds: the production shapes first, then others picked greedily (each new shape the one of
    a few random valid shapes holding the first tuple still uncovered that covers most of what
    is left), in a fixed order for a fixed seed, then the pinned shapes. `full`: every valid
    shape."""
    if level == "full":
        return [s for s in every_shape() if refusal(s) is None]
    combos = _combos(level)
    rng = random.Random(seed)
    points = ruled_points()
    left = _held(points, combos)
    chosen: list[Shape] = production_seeds()
    for s in chosen:
        left.difference_update(_tuples(s, combos))
    while left:
        target = dict(min(left))  # deterministic: the first tuple still uncovered
        pool = [p for p in points
                if all(p[axis] == value for axis, value in target.items() if axis in RULED)]
        candidates = [Shape(**rng.choice(pool),
                            **{axis: target.get(axis) or rng.choice(AXES[axis])
                               for axis in FREE})
                      for _ in range(60)]
        best = max(candidates, key=lambda c: sum(t in left for t in _tuples(c, combos)))
        chosen.append(best)
        left.difference_update(_tuples(best, combos))
    return chosen + [s for s in pinned() if s not in chosen]


def refused_probes() -> list[Shape]:
    """One refused shape per reason and dialect it applies to: what the build must refuse (the
    first in product order, its free axes at their first values)."""
    first = {axis: AXES[axis][0] for axis in FREE}
    seen: dict[tuple[str, str], Shape] = {}
    for point in ruled_points(refused=True):
        s = Shape(**point, **first)
        why = refusal(s)
        assert why is not None
        seen.setdefault((s.dialect, why), s)
    return list(seen.values())
