"""`inboxgen status`: per table and group, how many jobs are ready, scheduled, in work,
finished and dead, how long the oldest ready job has waited, why the newest dead letter died
(where the table keeps errors), and (PostgreSQL) the oldest open
transaction, and each table's dead rows, HOT updates and last autovacuum. Runs the modules' STATUS
statements and nothing else."""

from __future__ import annotations

import datetime as _dt
from types import ModuleType
from typing import Any

import attrs


@attrs.frozen
class TableStatus:
    table: str
    database: str
    groups: list[dict[str, Any]]
    dead_table: int | None  # rows in the dead-letter table, where there is one
    advisory_locks: int | None  # PostgreSQL advisory form: locks held in the database
    oldest_transaction_s: float | None  # PostgreSQL: the oldest open transaction's age
    # PostgreSQL, from the server's statistics: row versions dead and not yet vacuumed, the
    # share of updates that were HOT (None before any), the last autovacuum (ISO 8601).
    dead_tuples: int | None = None
    live_tuples: int | None = None
    hot_update_share: float | None = None
    last_autovacuum: str | None = None
    # Whether the table has a group column. Groups are declared nowhere: they are found in the
    # rows, so a group with no row left has no entry in `groups`.
    grouped: bool = False
    # [flow] pauses: what is paused (None in the list: the whole queue; else a group's name),
    # or None where the table has no pause table.
    paused: list[str | None] | None = None
    # [flow] limits, where the spec sets any: concurrency, key, key_concurrency, rate,
    # rate_seconds, rate_per_key, fair and weights_table as the module holds them (None: not
    # set), and in_work, the jobs in work now.
    limits: dict[str, Any] | None = None
    # Where the table keeps errors (role error) and has dead letters: the newest one's id and
    # the first line of its last failure ({"id": "17", "error": "ConnectionError: ..."}).
    newest_dead: dict[str, str | None] | None = None


def read(module: ModuleType, conn: Any, label: str, now: _dt.datetime) -> TableStatus:
    d = module.DESCRIPTOR
    try:
        groups = []
        for g in module.status(conn, now=now):
            waited = None if g.oldest_ready is None else round(
                max((now - g.oldest_ready).total_seconds(), 0.0), 3)
            groups.append({
                "group": g.group, "dead": g.group is not None and g.group == d.dead_letter_group,
                "ready": g.ready, "scheduled": g.scheduled, "in_work": g.in_work,
                "finished": g.finished, "oldest_ready_waited_s": waited})
        dead = module.dead_count(conn) if hasattr(module, "dead_count") else None
        locks = module.advisory_locks(conn) if hasattr(module, "advisory_locks") else None
        oldest = (module.oldest_transaction(conn) if hasattr(module, "oldest_transaction")
                  else None)
        health = module.table_health(conn) if hasattr(module, "table_health") else None
        paused = module.paused(conn) if hasattr(module, "paused") else None
        newest = (module.dead_letters(conn, limit=1)
                  if "error" in d.roles and hasattr(module, "dead_letters") else [])
    finally:
        conn.rollback()  # read only: nothing to keep
    if paused is not None:
        paused.sort(key=lambda g: (g is not None, g or ""))  # the whole queue first
        for g in groups:
            g["paused"] = None in paused or (g["group"] is not None and g["group"] in paused)
    vacuumed = None if health is None or health.last_autovacuum is None else \
        health.last_autovacuum.isoformat()
    limits = None
    if hasattr(module, "CONCURRENCY"):
        limits = {"concurrency": module.CONCURRENCY, "key": module.KEY_COLUMN,
                  "key_concurrency": module.KEY_CONCURRENCY, "rate": module.RATE,
                  "rate_seconds": module.RATE_SECONDS, "rate_per_key": module.RATE_PER_KEY,
                  "fair": getattr(module, "FAIR", False),
                  "weights_table": getattr(module, "WEIGHTS_TABLE", None),
                  # None where the database cannot tell (a row lock's, an advisory lock's)
                  "in_work": (None if all(g["in_work"] is None for g in groups) else
                              sum(g["in_work"] or 0 for g in groups))}
    return TableStatus(
        d.qualified_name, label, groups, dead, locks, None if oldest is None else round(oldest, 3),
        dead_tuples=None if health is None else health.dead_tuples,
        live_tuples=None if health is None else health.live_tuples,
        hot_update_share=(None if health is None or health.hot_share is None
                          else round(health.hot_share, 3)),
        last_autovacuum=vacuumed, grouped="group" in d.roles, paused=paused, limits=limits,
        newest_dead=None if not newest else {
            "id": str(newest[0].id),
            "error": None if newest[0].error is None else newest[0].error.split("\n", 1)[0]})


def as_json(tables: list[TableStatus]) -> list[dict[str, Any]]:
    return [attrs.asdict(t) for t in tables]


def as_text(tables: list[TableStatus], now: _dt.datetime | None = None) -> str:
    heads = ["table", "group", "ready", "scheduled", "in work", "finished", "dead",
             "oldest ready"]
    rows: list[list[str]] = []
    notes: list[str] = []
    for t in tables:
        for g in t.groups:
            dead = g["dead"]
            group = "" if g["group"] is None else str(g["group"])
            if g.get("paused"):
                group = f"{group} (paused)".lstrip()
            rows.append([t.table, group,
                         "-" if dead else str(g["ready"]), "-" if dead else str(g["scheduled"]),
                         _n(g["in_work"]), _n(g["finished"]),
                         str(g["ready"] + g["scheduled"]) if dead else "",
                         _age(g["oldest_ready_waited_s"]) if not dead else ""])
        if not t.groups:
            rows.append([t.table, "(no rows)", "", "", "", "", "", ""])
        if t.dead_table is not None:
            rows.append([t.table, "(dead-letter table)", "", "", "", "", str(t.dead_table), ""])
        if t.newest_dead is not None:
            notes.append(f"{t.table}: newest dead letter {t.newest_dead['id']}: "
                         f"{t.newest_dead['error'] or '(no error recorded)'}")
        if t.paused:
            notes.append(_paused(t.table, t.paused))
        if t.limits:
            notes.append(f"{t.table}: {limits_words(t.limits)}")
        if t.advisory_locks is not None:
            notes.append(f"{t.table}: {t.advisory_locks} advisory lock(s) held in the database "
                         f"(every table's)")
        if t.oldest_transaction_s is not None:
            notes.append(f"{t.table}: oldest open transaction in the database: "
                         f"{_age(t.oldest_transaction_s)}")
        if t.dead_tuples is not None:
            notes.append(_health(t, now))
        if t.grouped:
            notes.append(f"{t.table}: groups are found in the rows: a group with no row left (all "
                         f"finished and deleted, or pruned) is not listed")
    widths = [max(len(r[i]) for r in [heads, *rows]) for i in range(len(heads))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
             for r in [heads, *rows]]
    return "\n".join(lines + notes) + "\n"


def paused_words(paused: list[str | None]) -> str:
    """What `paused` (TableStatus.paused, not empty) pauses, in words: `paused`, `group(s) g, h
    paused`, or `paused, and group(s) g on their own`."""
    groups = ", ".join(g for g in paused if g is not None)
    if None not in paused:
        return f"group(s) {groups} paused"
    return "paused" + (f", and group(s) {groups} on their own" if groups else "")


def limits_words(limits: dict[str, Any]) -> str:
    """A table's [flow] limits (TableStatus.limits) in words: `at most 20 in work at once (6
    now), 2 per tenant, 100 claims in any 1 s`."""
    parts = []
    if limits["concurrency"] is not None:
        now = f" ({limits['in_work']} now)" if limits["in_work"] is not None else ""
        parts.append(f"at most {limits['concurrency']} in work at once{now}")
    if limits["key_concurrency"] is not None:
        parts.append(f"at most {limits['key_concurrency']} per {limits['key']}")
    if limits["rate"] is not None:
        each = f" per {limits['key']}" if limits["rate_per_key"] else ""
        parts.append(f"at most {limits['rate']} claims{each} in any "
                     f"{limits['rate_seconds']:g} s")
    if limits.get("fair"):
        weighted = limits.get("weights_table")
        parts.append(f"claims take turns across {limits['key']}"
                     + (f", weighted by {weighted}" if weighted else ""))
    return "limits: " + ", ".join(parts)


def _paused(table: str, paused: list[str | None]) -> str:
    how = "inboxgen resume" if None in paused else "inboxgen resume --group"
    return f"{table}: {paused_words(paused)}: no worker claims those jobs until resumed ({how})"


def _health(t: TableStatus, now: _dt.datetime | None) -> str:
    hot = ("no updates yet" if t.hot_update_share is None else
           f"{t.hot_update_share:.0%} of updates HOT")
    if t.last_autovacuum is None:
        vacuum = "never autovacuumed"
    else:
        at = _dt.datetime.fromisoformat(t.last_autovacuum)
        vacuum = (f"last autovacuum {_age(max((now - at).total_seconds(), 0.0))} ago"
                  if now is not None else f"last autovacuum {t.last_autovacuum}")
    return (f"{t.table}: {t.dead_tuples} dead row version(s) beside {t.live_tuples} live, "
            f"{hot}, {vacuum}")


def _n(value: int | None) -> str:
    return "?" if value is None else str(value)  # the database cannot tell


def _age(seconds: float | None) -> str:
    if seconds is None:
        return ""
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
