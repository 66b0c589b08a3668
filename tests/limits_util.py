"""Claims of a [flow] limited queue as the runtime runs them, and rows to claim, for the tests
of limits and fair shares."""

from __future__ import annotations

import datetime as dt
from typing import Any

from dbcases import Queue

UTC = dt.UTC


def claim(q: Queue, conn: Any, limit: int, lease: float = 30.0, **how: Any) -> list[Any]:
    """One claim of up to `limit` rows, committed, as the runtime runs it (MySQL: between the
    claim turn and its end); `how`: claim()'s other arguments (by_key=True)."""
    now = dt.datetime.now(UTC)
    until = now + dt.timedelta(seconds=lease)
    turned = hasattr(q.mod, "claim_turn")
    if turned:
        assert q.mod.claim_turn(conn) is True
        conn.commit()
    rows = q.mod.claim(conn, now=now, locked_until=until, limit=limit, **how)
    conn.commit()
    if turned:
        q.mod.claim_turn_end(conn)
        conn.commit()
    return list(rows)


def add(q: Queue, accounts: list[str]) -> list[int]:
    due = dt.datetime.now(UTC) - dt.timedelta(seconds=60)
    conn = q.connect()
    try:
        ids = [q.add(conn, retry_after=due, account=a) for a in accounts]
        conn.commit()
        return ids
    finally:
        conn.close()
