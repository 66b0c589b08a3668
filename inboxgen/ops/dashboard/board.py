"""The state behind the dashboard: the generated modules it shows, the database they are read
from (on a thread of its own), and the samples the chart draws."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime as _dt
import hmac
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Any, TypeVar

import attrs

from inboxgen.errors import ConfigError, InboxgenError
from inboxgen.ops import status
from inboxgen.ops.connect import connect
from inboxgen.ops.dashboard.views import dead_kept
from inboxgen.ops.status import TableStatus
from inboxgen.runtime.connecting import first_line

T = TypeVar("T")

# Dead letters listed per table on the overview, the newest first.
DEAD_LISTED = 20


class ReadFailed(InboxgenError):
    """The database could not be read (the message names it by its label, never a password)."""


@attrs.frozen
class Sample:
    """What one reading counted: table -> series -> count (None where the table cannot tell)."""

    at: _dt.datetime
    counts: dict[str, dict[str, int | None]]


def totals(t: TableStatus, keeps_dead: bool) -> dict[str, int | None]:
    """A table's counts over its groups, as the chart draws them: the dead-letter group's rows
    and the dead-letter table's are dead, every other group's by its state. `keeps_dead`: the
    table has dead letters (0 when its dead-letter group has no row, so no line in status)."""
    out: dict[str, int | None] = {"ready": 0, "scheduled": 0, "in_work": None,
                                  "finished": None, "dead": None}
    dead = 0 if t.dead_table is None else t.dead_table
    has_dead = keeps_dead or t.dead_table is not None
    for g in t.groups:
        if g["dead"]:
            dead += g["ready"] + g["scheduled"]
            has_dead = True
            continue
        out["ready"] = (out["ready"] or 0) + g["ready"]
        out["scheduled"] = (out["scheduled"] or 0) + g["scheduled"]
        for key in ("in_work", "finished"):
            if g[key] is not None:
                out[key] = (out[key] or 0) + g[key]
    if has_dead:
        out["dead"] = dead
    return out


class Database:
    """One connection per dialect, used on one thread of its own: sqlite3 connections stay on
    the thread that opened them, and readings never overlap on a connection. A connection that
    failed is closed and opened anew by the next reading."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._opened: dict[str, tuple[Any, str]] = {}
        self._closed = False
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="inboxgen-dashboard")

    def conn(self, module: ModuleType) -> tuple[Any, str]:
        d = module.DESCRIPTOR
        if d.dialect not in self._opened:
            try:
                self._opened[d.dialect] = connect(d.dialect, self.url)
            except ConfigError as err:  # a URL of another database: name the table
                raise ConfigError(f"{err} (table {d.qualified_name})") from None
        return self._opened[d.dialect]

    async def run(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, self._guarded, fn)

    def run_now(self, fn: Callable[[], T]) -> T:
        """`fn` on the database's thread, from code outside an event loop."""
        return self._thread.submit(self._guarded, fn).result()

    def _guarded(self, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except InboxgenError:
            raise
        except Exception as err:  # the driver's: the connection may be gone, start anew
            self._close_all()
            raise ReadFailed(f"{type(err).__name__}: {first_line(err)}") from None

    def _close_all(self) -> None:
        for conn, _ in self._opened.values():
            with contextlib.suppress(Exception):
                conn.close()
        self._opened.clear()

    def close(self) -> None:
        """Close the connections and end the thread (again: nothing more)."""
        if self._closed:
            return
        self._closed = True
        self._thread.submit(self._close_all).result()
        self._thread.shutdown(wait=True)


class Dashboard:
    """The state behind the web app: the modules, their database, the samples taken."""

    def __init__(self, database_url: str, modules: Sequence[ModuleType], *,
                 allow_actions: bool = False, token: str | None = None,
                 show_payloads: bool = False, sample_every: float = 5.0, keep: int = 720,
                 refresh: float = 10.0) -> None:
        if not database_url:
            raise ConfigError("give --database-url (or set INBOXGEN_DATABASE_URL)")
        if not modules:
            raise ConfigError("the dashboard has no queue table to show: give specs that "
                              "generate modules")
        if allow_actions and not token:
            raise ConfigError("--allow-actions needs a token (--token or "
                              "$INBOXGEN_DASHBOARD_TOKEN): every action must carry it")
        if sample_every <= 0 or keep < 1 or refresh < 0:
            raise ConfigError("--sample-every must be above 0 and --refresh 0 (off) or more")
        self.modules = {m.DESCRIPTOR.qualified_name: m for m in modules}
        self.database = Database(database_url)
        self.allow_actions = allow_actions
        self._token = token
        self.show_payloads = show_payloads
        self.sample_every = sample_every
        self.refresh = refresh
        self.history: collections.deque[Sample] = collections.deque(maxlen=keep)
        self.last_error: str | None = None
        self._sampler: asyncio.Task[None] | None = None

    # -- readings ------------------------------------------------------------------------------

    def _read(self) -> tuple[list[TableStatus], _dt.datetime]:
        now = _dt.datetime.now(_dt.UTC)
        tables = [status.read(m, *self.database.conn(m), now) for m in self.modules.values()]
        return tables, now

    async def read(self) -> tuple[list[TableStatus], _dt.datetime]:
        """Every table's status now, kept as a sample for the chart."""
        try:
            tables, now = await self.database.run(self._read)
        except InboxgenError as err:
            self.last_error = str(err)
            raise
        self.last_error = None
        self.history.append(self._sample_of(tables, now))
        return tables, now

    def _sample_of(self, tables: list[TableStatus], now: _dt.datetime) -> Sample:
        return Sample(now, {t.table: totals(t, dead_kept(self.modules[t.table]) is not None)
                            for t in tables})

    def check(self) -> list[TableStatus]:
        """Read once from outside an event loop (before serving): a URL of another database, or
        one that cannot be reached, fails here as it would for `inboxgen status`."""
        tables, now = self.database.run_now(self._read)
        self.history.append(self._sample_of(tables, now))
        return tables

    async def _sample(self) -> None:
        while True:
            await asyncio.sleep(self.sample_every)  # a page load has just read
            with contextlib.suppress(InboxgenError):  # kept in last_error, shown on the page
                await self.read()

    def start_sampling(self) -> None:
        """Sample every `sample_every` seconds on the running loop (once; a mounted app starts
        it with its first request, since a mounted app's lifespan does not run)."""
        if self._sampler is None or self._sampler.done():
            self._sampler = asyncio.get_running_loop().create_task(self._sample())

    async def stop(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sampler
        await asyncio.get_running_loop().run_in_executor(None, self.database.close)

    # -- actions -------------------------------------------------------------------------------

    def token_ok(self, given: str) -> bool:
        if not self.allow_actions or not self._token:
            return False
        return hmac.compare_digest(given.encode(), self._token.encode())

    def module(self, table: str) -> ModuleType | None:
        return self.modules.get(table)
