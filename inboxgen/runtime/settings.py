"""A worker's settings: the spec's defaults, what the caller gave, and the checks they must
pass before anything connects (each a WorkerConfigError naming the worker and table)."""

from __future__ import annotations

import logging
from typing import Any

import attrs

from inboxgen.descriptor import TableDescriptor
from inboxgen.errors import WorkerConfigError
from inboxgen.runtime.outcomes import Backoff

log = logging.getLogger("inboxgen.worker")

UNSET: Any = object()  # max_attempts not given: the spec's


@attrs.frozen
class Settings:
    """How a worker serves its table, as checked when it was built."""

    name: str
    group: str | None
    workers: int
    batch: int
    lease: int
    poll_interval: float
    max_attempts: int | None
    backoff: Backoff
    transactional: bool


def settings_for(d: TableDescriptor, *, group: str | None, name: str | None,
                 workers: int | None, batch: int | None, lease: int | None,
                 poll_interval: float | None, max_attempts: int | None,
                 backoff: Backoff | None, transactional: bool) -> Settings:
    """What the caller gave, else the spec's defaults; raises WorkerConfigError when they do
    not fit the table."""
    defaults = d.defaults
    s = Settings(
        name=name or (f"{d.table}:{group}" if group else d.table),
        group=group,
        workers=defaults.workers if workers is None else workers,
        batch=defaults.batch if batch is None else batch,
        lease=defaults.lease_seconds if lease is None else lease,
        poll_interval=defaults.poll_interval if poll_interval is None else poll_interval,
        max_attempts=defaults.max_attempts if max_attempts is UNSET else max_attempts,
        backoff=backoff or Backoff(),
        transactional=transactional)
    where = {"worker": s.name, "table": d.qualified_name}
    has_dest = d.dead_letter_group is not None or d.dead_letter_table is not None
    if s.max_attempts is not None and not has_dest:
        raise WorkerConfigError(
            f"max_attempts={s.max_attempts} needs a dead-letter destination: add "
            f"[dead_letter] to {d.source}", **where)
    if has_dest and s.max_attempts is None:
        raise WorkerConfigError(
            "the table has a dead-letter destination but max_attempts is missing: set "
            "runtime.max_attempts in the spec or max_attempts= here", **where)
    if s.max_attempts is not None and "attempt" not in d.roles:
        raise WorkerConfigError("max_attempts needs a column with role attempt", **where)
    if "group" in d.roles and group is None:
        raise WorkerConfigError("the table has groups: give the worker group=<name>", **where)
    if "group" not in d.roles and group is not None:
        raise WorkerConfigError("group= given, but the table has no group column", **where)
    for label, value in (("workers", s.workers), ("batch", s.batch), ("lease", s.lease)):
        if value < 1:
            raise WorkerConfigError(f"{label} must be at least 1, not {value}", **where)
    return s


def fit_to_pool(s: Settings, pool: Any, table: str) -> Settings:
    """A caller's pool (PostgreSQL) bounds the slots: the worker never takes the pool's last
    connection."""
    max_size = int(getattr(pool, "max_size", s.workers + 1))
    if max_size < 2:
        raise WorkerConfigError(
            f"a pool of {max_size} connection cannot serve a worker: it never takes the pool's "
            f"last connection, so give the pool at least 2", worker=s.name, table=table)
    if s.workers > max_size - 1:
        log.warning("%s: pool of %d connections: running %d workers, not %d, so the worker "
                    "never takes the pool's last connection", s.name, max_size,
                    max(max_size - 1, 1), s.workers)
        return attrs.evolve(s, workers=max(max_size - 1, 1))
    return s
