"""`inboxgen requeue` (dead letters back to the queue), `inboxgen prune` (processed rows
deleted in bounded batches, each its own short transaction, so retention never holds a long
lock), `inboxgen cancel` (queued jobs no worker holds, deleted) and `inboxgen pause` / `resume`
(a queue or one of its groups, [flow] pauses). They run the modules' own statements and say
what they changed; requeue and prune with dry_run change nothing."""

from __future__ import annotations

import datetime as _dt
import inspect
import re
import uuid
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from inboxgen.errors import ConfigError

# The id types a generated module's `requeue(ids=...)` takes, and how a command-line id becomes
# one (the module's annotation names the type: `Sequence[int] | None`, ...).
_ID_TYPES: dict[str, tuple[str, Callable[[str], Any]]] = {
    "int": ("integers", int),
    "str": ("text", str),
    "uuid.UUID": ("UUIDs", uuid.UUID),
}


def typed_ids(module: ModuleType, ids: Sequence[str] | None) -> list[Any] | None:
    """Ids given on the command line as the table's id type (an integer, text or a UUID)."""
    if ids is None:
        return None
    d = module.DESCRIPTOR
    takes = getattr(module, "requeue", None) or getattr(module, "cancel", None)
    annotation = "" if takes is None else str(next(
        p.annotation for name, p in inspect.signature(takes).parameters.items()
        if name in ("ids", "id")))
    match = re.fullmatch(r"(?:Sequence\[)?([\w.]+)(?:\] \| None)?", annotation)
    kind, convert = _ID_TYPES.get(match.group(1) if match else "", ("text", str))
    typed = []
    for raw in ids:
        try:
            typed.append(convert(raw))
        except ValueError:
            raise ConfigError(f"--id {raw!r} is not an id of table {d.qualified_name} (its ids "
                              f"are {kind})") from None
    return typed


def requeue(module: ModuleType, conn: Any, *, now: _dt.datetime, ids: Sequence[str] | None,
            to_group: str | None, reset_attempt: bool, dry_run: bool) -> int:
    d = module.DESCRIPTOR
    if d.dead_letter_group is None and d.dead_letter_table is None:
        raise ConfigError(f"table {d.qualified_name} has no dead letters: its spec "
                          f"({d.source}) has no [dead_letter]")
    kwargs: dict[str, Any] = {"now": now, "reset_attempt": reset_attempt,
                              "ids": typed_ids(module, ids)}
    if d.dead_letter_group is not None:
        if not to_group:
            raise ConfigError(f"table {d.qualified_name} keeps dead letters in group "
                              f"{d.dead_letter_group!r}, which does not remember their own: "
                              f"name the group to put them back into with --to-group")
        kwargs["to_group"] = to_group
    elif to_group:
        raise ConfigError(f"table {d.qualified_name} keeps dead letters in a table of their own, "
                          f"with their groups: --to-group does not apply")
    _begin(conn, d.dialect)
    try:
        moved = int(module.requeue(conn, **kwargs))
    except BaseException:
        conn.rollback()
        raise
    conn.rollback() if dry_run else conn.commit()
    return moved


def cancel(module: ModuleType, conn: Any, *, now: _dt.datetime,
           ids: Sequence[str]) -> tuple[list[Any], list[tuple[Any, str]]]:
    """Cancel each queued job of `ids` that no worker holds, each in a transaction of its own;
    returns the ids cancelled, and those left with why each was (held by a worker, finished,
    a dead letter, not there), as the module's state() finds it after the cancel."""
    d = module.DESCRIPTOR
    if not hasattr(module, "cancel"):
        raise ConfigError(f"table {d.qualified_name} has no cancel(): its holders (the advisory "
                          f"form) hold a key, which a cancel cannot see; rebuild modules "
                          f"older than cancel() with inboxgen build")
    # A lease table's cancel() takes `now` (a lease that ran out is not held).
    kwargs = {"now": now} if "now" in inspect.signature(module.cancel).parameters else {}
    done: list[Any] = []
    left: list[tuple[Any, str]] = []
    for row_id in typed_ids(module, ids) or []:
        _begin(conn, d.dialect)
        try:
            cancelled = bool(module.cancel(conn, id=row_id, **kwargs))
            why = "" if cancelled else _not_cancelled(module, conn, row_id, now)
        except BaseException:
            conn.rollback()
            raise
        conn.commit()
        if cancelled:
            done.append(row_id)
        else:
            left.append((row_id, why))
    return done, left


# What a job's state after a cancel that deleted nothing says of why it did not. A job that
# reads as queued was held: a row lock's holder is invisible to state() (its row reads ready),
# and a lease's reads in work until it runs out.
_LEFT = {"in_work": "held by a worker", "ready": "held by a worker",
         "scheduled": "held by a worker", "finished": "finished", "dead": "a dead letter"}


def _not_cancelled(module: ModuleType, conn: Any, row_id: Any, now: _dt.datetime) -> str:
    state = getattr(module, "state", None)
    if state is None:  # a module built before state(): it cannot say which
        return "held by a worker, finished, or not there"
    found = state(conn, id=row_id, now=now)
    return "not there" if found is None else _LEFT.get(found.state, found.state)


def prune(module: ModuleType, conn: Any, *, now: _dt.datetime, older_than: _dt.timedelta,
          batch: int, dry_run: bool) -> int:
    d = module.DESCRIPTOR
    if not hasattr(module, "prune"):
        raise ConfigError(f"table {d.qualified_name} keeps no processed rows (no processed_at "
                          f"column: finishing a job deletes it)")
    before = now - older_than
    if dry_run:
        try:
            return int(module.prunable(conn, before=before))
        finally:
            conn.rollback()
    total = 0
    while True:
        _begin(conn, d.dialect)
        try:
            n = int(module.prune(conn, before=before, limit=batch))
        except BaseException:
            conn.rollback()
            raise
        conn.commit()
        total += n
        if n < batch:
            return total


def parse_age(text: str) -> _dt.timedelta:
    """`30d`, `12h`, `45m` or `90s` (a number and its unit). A bare number is refused: prune
    deletes rows, and a unit guessed wrong deletes the wrong ones."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([dhms])\s*", text)
    if m is None:
        raise ConfigError(f"--older-than {text!r}: give the age with its unit: 30d (days), 12h "
                          f"(hours), 45m (minutes) or 90s (seconds)")
    unit = {"d": 86400, "h": 3600, "m": 60, "s": 1}[m.group(2)]
    return _dt.timedelta(seconds=float(m.group(1)) * unit)


def pause(module: ModuleType, conn: Any, *, group: str | None) -> None:
    """Pause the queue (`group` None) or one group: every worker's claims take none of its
    jobs from the commit on; jobs in work finish."""
    _pauses(module, conn, "pause", group)


def resume(module: ModuleType, conn: Any, *, group: str | None) -> bool:
    """Lift the pause of the queue (`group` None) or of one group; whether there was one."""
    return bool(_pauses(module, conn, "resume", group))


def _pauses(module: ModuleType, conn: Any, op: str, group: str | None) -> Any:
    d = module.DESCRIPTOR
    if not hasattr(module, op):
        raise ConfigError(f"table {d.qualified_name} has no pause table: name one in its "
                          f"spec's [flow] pauses (docs/flow.md) and build again")
    if group is not None and "group" not in d.roles:
        raise ConfigError(f"table {d.qualified_name} has no groups: {op} it whole, without "
                          f"--group")
    _begin(conn, d.dialect)
    try:
        result = getattr(module, op)(conn, **({} if group is None else {"group": group}))
    except BaseException:
        conn.rollback()
        raise
    conn.commit()
    return result


def _begin(conn: Any, dialect: str) -> None:
    # sqlite3 in autocommit mode: the transaction is explicit (and takes the write lock at
    # once); psycopg and PyMySQL open one with the first statement.
    if dialect == "sqlite":
        conn.execute("BEGIN IMMEDIATE")
