"""A worker's outages, each told once: one line when the database becomes unreachable (or
claims start failing for another reason), one when claims work again.

Whatever notices first opens the outage: a claim that fails, a settlement flush, a renewal or
the listening connection lost with its connection, a transactional handler's statement on a
connection that died, the pool failing to connect. The others' failures during the same outage
are DEBUG lines, and a handler is never blamed for it. The pools the worker opens itself (and a
service's pools, folded into one of their queues) log through psycopg's "psycopg.pool" logger;
their warnings (a broken connection discarded, a failed reconnection, several lines each) are
folded in the same way (`PoolNoise`), while the records of any other pool pass untouched. Before
the worker serves, its start tells what is wrong (connecting.py): a pool's failed connection
attempts are DEBUG lines then. Once the worker is told to stop at once (`hurried`), a connection
that the cancellation closes is no outage either: DEBUG lines too.
"""

from __future__ import annotations

import datetime as _dt
import logging
from typing import TYPE_CHECKING, Any

import attrs

from inboxgen.runtime.connecting import first_line

if TYPE_CHECKING:
    from inboxgen.runtime.backends.base import Backend
    from inboxgen.runtime.clock import Clock
    from inboxgen.runtime.jobs import Stats

log = logging.getLogger("inboxgen.worker")

# What an open outage is: claims fail for a reason of their own (a statement), a connection
# broke (the database not known to be out: told in one line once claims work), or the database
# cannot be reached (a connection attempt failed: told at once, and when it is over).
FAILING, LOST, UNREACHABLE = "failing", "lost", "unreachable"


@attrs.define
class _Open:
    since: _dt.datetime
    failed_claims: int  # the worker's count when it began
    kind: str
    what: str  # what noticed first: claims, settlements, a renewal, ...
    reason: str
    lost: int = 0  # settlements lost with their connections meanwhile


class Outage:
    def __init__(self, name: str, clock: Clock, backend: Backend, stats: Stats) -> None:
        self.name = name
        self.clock = clock
        self.backend = backend
        self.stats = stats
        self.open: _Open | None = None
        self.serving = False  # the worker claims: its start has told of the database
        self.hurried = False  # told to stop at once: lost connections are the cancellation's

    def claim_failed(self, err: Exception) -> None:
        if self.hurried:
            log.debug("%s: a claim ended as the worker stopped at once: %s", self.name,
                      first_line(err))
            return
        if self.backend.race_lost(err):
            # A race lost, not an outage: the server rolled the claim back for another
            # transaction's sake (a deadlock it broke; on a Galera cluster, another node's claim
            # of the same row certified first). Nothing was claimed; the slot claims again.
            log.debug("%s: a claim lost a race and was rolled back: %s", self.name,
                      first_line(err))
            return
        self.stats.failed_claims += 1
        if self.lost_connection(err, "claims failing"):
            return
        if self.open is None:
            self.open = self._opened(FAILING, "claims failing", err)
            log.error("%s: claims failing, trying again with a short backoff: %s", self.name,
                      first_line(err))
        else:
            log.debug("%s: claim failed again: %s", self.name, first_line(err))

    def worked(self) -> None:
        """A claim, a renewal or a settlement worked: an open outage is over."""
        if self.open is None:  # the common case: one test per round
            return
        self._close("")

    def at_stop(self) -> None:
        """The worker stops: an outage still open is told as it stands."""
        if self.open is not None:
            self._close("the worker stopped")
        self.serving = self.hurried = False

    def _close(self, stopped: str) -> None:
        o = self.open
        assert o is not None
        self.open = None
        took = (self.clock.now() - o.since).total_seconds()
        failed = self.stats.failed_claims - o.failed_claims
        lost = (f"; {o.lost} settlement(s) lost with their connections: those jobs run again"
                if o.lost else "")
        if o.kind == UNREACHABLE:
            log.warning("%s: %s after %.1f s (%d claim(s) failed%s)", self.name,
                        f"{stopped} with the database unreachable" if stopped
                        else "database reachable again", took, failed, lost)
        elif o.kind == LOST:
            log.warning("%s: a connection to %s was lost (%s: %s); %s%s", self.name,
                        self.backend.label, o.what, o.reason, stopped or "new ones work", lost)
        else:
            log.warning("%s: %s after %.1f s (%d failed%s)", self.name,
                        f"{stopped} with claims failing" if stopped else "claims work again",
                        took, failed, lost)

    def lost_connection(self, err: BaseException, what: str) -> bool:
        """Whether `err` (of `what`: settlements, a renewal, ...) is the connection's, not the
        statement's: an outage opens here if none is open, and one that could not connect is
        told at once. True when so; the caller then logs at DEBUG."""
        backend = self.backend
        if not (isinstance(err, Exception) and backend.disconnected(err)):
            return False
        if self.hurried:
            log.debug("%s: %s: a connection closed as the worker stopped at once: %s",
                      self.name, what, first_line(err))
            return True
        if self.open is None:
            self.open = self._opened(LOST, what, err)
        if backend.unreachable(err) and self.open.kind != UNREACHABLE:
            self.open.kind = UNREACHABLE
            log.error("%s: database unreachable: %s (%s: %s); trying again with a short "
                      "backoff", self.name, backend.label, what, first_line(err))
        else:
            log.debug("%s: %s: %s", self.name, what, first_line(err))
        return True

    def settlements_lost(self, n: int) -> bool:
        """Settlements lost with their connections: counted in the outage's last line (True)
        when connections are what failed, else the caller says so itself (False). Once the
        worker is told to stop at once, their rows are left as the form's rule says: True."""
        if self.hurried:
            return True
        if self.open is None or self.open.kind == FAILING:
            return False
        self.open.lost += n
        return True

    def _opened(self, kind: str, what: str, err: Exception) -> _Open:
        return _Open(self.clock.now(), self.stats.failed_claims - (what == "claims failing"),
                     kind, what, first_line(err))

    def pool_said(self, record: logging.LogRecord) -> None:
        """A warning of the worker's own pool: a failed connection attempt is the database
        out of reach (told by the start until the worker serves); the rest (broken connections
        discarded) the worker reports through its own failures. Kept at DEBUG."""
        err = record.args[-1] if isinstance(record.args, tuple) and record.args else None
        if self.serving and isinstance(err, Exception) and str(record.msg).startswith(
                "error connecting"):
            self.lost_connection(err, "connecting")
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s: pool: %s", self.name, first_line(Exception(record.getMessage())))


class PoolNoise(logging.Filter):
    """On the "psycopg.pool" logger: a warning from a pool a worker opened itself (named by the
    record's arguments: the pool's name, a connection or a task of it) goes to that worker
    (`Outage.pool_said`) instead of out. Other pools' records pass untouched."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or not _owners:
            return True
        outage = _owner_of(record)
        if outage is None:
            return True
        try:
            outage.pool_said(record)
        except Exception:  # a log record must never break the pool
            pass
        return False


_FILTER = PoolNoise()
_owners: dict[str, Outage] = {}  # a pool's name -> the outage of the worker that opened it


def fold_pool_warnings(pool_name: str, outage: Outage) -> None:
    """The warnings of pool `pool_name` go to `outage` (the filter is put on psycopg's pool
    logger once per process)."""
    pool_log = logging.getLogger("psycopg.pool")
    if _FILTER not in pool_log.filters:
        pool_log.addFilter(_FILTER)
    _owners[pool_name] = outage


def unfold_pool_warnings(pool_name: str) -> None:
    _owners.pop(pool_name, None)


def _owner_of(record: logging.LogRecord) -> Outage | None:
    args = record.args if isinstance(record.args, tuple) else ()
    for arg in args:
        if isinstance(arg, str):
            name: Any = arg
        else:
            pool = getattr(arg, "_pool", None)  # a connection the pool handed out
            task_pool = getattr(arg, "pool", None)  # a task of the pool keeps a weak reference
            if pool is None and callable(task_pool):
                pool = task_pool()
            name = getattr(pool, "name", None)
        if isinstance(name, str) and name in _owners:
            return _owners[name]
    return None
