"""`inboxgen dashboard`: a small web page of the queues, as `inboxgen status` counts them.

Per table and group it shows the jobs ready, scheduled, in work, finished and dead and how long
the oldest ready job has waited (`status.read()`, so the same statements and the same numbers),
a chart of those counts over the samples it took while serving, and a form that looks one job
up by its id (the module's `state()`). `/api/status` returns what `inboxgen status --json`
prints. It runs the generated modules' statements and nothing else.

It is read-only unless built with `allow_actions=True` and a token: then a dead job can be put
back into the queue (`requeue()`) and a queued one cancelled (`cancel()`), each POST carrying
the token. Read-only, every POST (to a page or an action) is answered 403. The database is
named by the connect helpers' label, which never holds a password.

    from inboxgen.ops import dashboard
    app = dashboard.app("postgresql://ops@db/app", [mailer, reports])   # a Starlette app

Needs starlette (and uvicorn to serve it on its own): `pip install 'inboxgen[dashboard]'`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime as _dt
import hmac
import logging
import urllib.parse
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Any, TypeVar

import attrs
import jinja2
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from inboxgen.errors import ConfigError, InboxgenError
from inboxgen.ops import maintenance, status
from inboxgen.ops.connect import connect
from inboxgen.ops.status import TableStatus
from inboxgen.runtime.connecting import first_line

log = logging.getLogger("inboxgen.dashboard")

T = TypeVar("T")

# The counts charted, in the order of the table's columns, with their colours.
SERIES = (("ready", "#2b6cb0"), ("scheduled", "#805ad5"), ("in_work", "#dd6b20"),
          ("finished", "#38a169"), ("dead", "#e53e3e"))
_MAX_BODY = 64 * 1024  # an action's form is a few fields
_PAYLOAD_SHOWN = 4000  # characters of a payload on the page
# No script, no outside resource; forms post only here; never framed (the action buttons).
_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
                               "form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


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


class _Database:
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
        self.database = _Database(database_url)
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
        return Sample(now, {t.table: totals(t, _dead_kept(self.modules[t.table]) is not None)
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


# -- the web app -------------------------------------------------------------------------------


def app(database_url: str, modules: Sequence[ModuleType], *, allow_actions: bool = False,
        token: str | None = None, show_payloads: bool = False, sample_every: float = 5.0,
        keep: int = 720, refresh: float = 10.0) -> Starlette:
    """The dashboard of `modules` (generated modules) on `database_url`, as a Starlette app to
    serve or mount (`Mount("/queues", app=dashboard.app(...))`).

    `sample_every`: seconds between the samples of the chart (one more per page load); `keep`:
    how many samples it keeps; `refresh`: seconds between the page's reloads (0: never).
    Requeue and cancel buttons only with `allow_actions` and a `token`, which each POST must
    carry. Payloads are hidden unless `show_payloads`. Raises ConfigError for settings that
    contradict each other; nothing is connected until the first request."""
    board = Dashboard(database_url, modules, allow_actions=allow_actions, token=token,
                      show_payloads=show_payloads, sample_every=sample_every, keep=keep,
                      refresh=refresh)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        board.start_sampling()
        try:
            yield
        finally:
            await board.stop()

    pages = [Route("/", _overview, methods=["GET"]),
             Route("/job", _job, methods=["GET"]),
             Route("/api/status", _api_status, methods=["GET"])]
    routes = [*pages,
              Route("/actions/requeue", _requeue, methods=["POST"]),
              Route("/actions/cancel", _cancel, methods=["POST"])]
    if not allow_actions:
        # Read-only, every POST is refused as an action is (403), a page's too (not 405): an
        # operator is told why, whatever the path. With actions on, a page is no action: 405.
        routes += [Route(page.path, _read_only, methods=["POST"]) for page in pages]
    web = Starlette(routes=routes, lifespan=lifespan)
    web.state.dashboard = board
    return web


def dashboard_of(web: Starlette) -> Dashboard:
    """The Dashboard behind an app made by `app()`."""
    board: Dashboard = web.state.dashboard
    return board


def _board(request: Request) -> Dashboard:
    board: Dashboard = request.app.state.dashboard
    board.start_sampling()
    return board


def _base(request: Request) -> str:
    # Links stay below the prefix the app is mounted at.
    return str(request.scope.get("root_path", "")).rstrip("/")


def _html(text: str, status_code: int = 200) -> HTMLResponse:
    return HTMLResponse(text, status_code=status_code, headers=_HEADERS)


async def _overview(request: Request) -> Response:
    board = _board(request)
    try:
        tables, now = await board.read()
    except InboxgenError as err:
        return _html(_render("error", request, board, message=str(err)), 503)
    try:
        listed = await board.database.run(lambda: {t.table: _dead_letters(board, t.table)
                                                   for t in tables})
    except InboxgenError as err:
        return _html(_render("error", request, board, message=str(err)), 503)
    sections = [{"status": t, "rows": _rows(t), "notes": _notes(t, now),
                 "chart": _chart(board.history, t.table),
                 "dead_kept": _dead_kept(board.modules[t.table]),
                 "dead": totals(t, True)["dead"],
                 "dead_list": [{"id": j.id, "attempt": j.attempt, "due": j.due,
                                "payload": _shown_payload(j.payload),
                                "payload_error": _shown_error(j.payload_error)}
                               for j in listed[t.table]],
                 "undecodable": any(j.payload_error for j in listed[t.table])} for t in tables]
    labels = sorted({t.database for t in tables})
    return _html(_render("overview", request, board, sections=sections, labels=labels,
                         now=now, samples=len(board.history)))


async def _api_status(request: Request) -> Response:
    board = _board(request)
    try:
        tables, _ = await board.read()
    except InboxgenError as err:
        return JSONResponse({"error": str(err)}, status_code=503, headers=_HEADERS)
    return JSONResponse(status.as_json(tables), headers=_HEADERS)


async def _job(request: Request) -> Response:
    board = _board(request)
    table = request.query_params.get("table", "")
    raw_id = request.query_params.get("id", "").strip()
    module = board.module(table)
    if module is None:
        return _html(_render("error", request, board, message=f"no queue table {table!r} here"),
                     404)
    if not raw_id:
        return _html(_render("error", request, board, message="give a job's id"), 400)
    now = _dt.datetime.now(_dt.UTC)
    try:
        (job_id,) = maintenance.typed_ids(module, [raw_id]) or []
        found = await board.database.run(lambda: _state(board, module, job_id, now))
    except InboxgenError as err:
        code = 400 if isinstance(err, ConfigError) else 503
        return _html(_render("error", request, board, message=str(err)), code)
    d = module.DESCRIPTOR
    return _html(_render(
        "job", request, board, table=table, job_id=job_id, job=found, now=now,
        payload=None if found is None else _shown_payload(found.payload),
        payload_error=None if found is None else _shown_error(found.payload_error),
        can_requeue=found is not None and found.state == "dead" and hasattr(module, "requeue"),
        can_cancel=(found is not None and found.state in ("ready", "scheduled")
                    and hasattr(module, "cancel")),
        dead_group=d.dead_letter_group))


def _dead_letters(board: Dashboard, table: str) -> list[Any]:
    """The newest dead letters of `table` (the module's dead_letters()), where it has some."""
    module = board.modules[table]
    if not hasattr(module, "dead_letters"):
        return []
    conn, _ = board.database.conn(module)
    try:
        return list(module.dead_letters(conn, limit=DEAD_LISTED))
    finally:
        conn.rollback()  # read only: nothing to keep


def _state(board: Dashboard, module: ModuleType, job_id: Any, now: _dt.datetime) -> Any:
    conn, _ = board.database.conn(module)
    try:
        return module.state(conn, id=job_id, now=now)
    finally:
        conn.rollback()  # read only: nothing to keep


async def _form(request: Request) -> dict[str, str]:
    """The fields of an urlencoded form (no multipart: the forms here send text only)."""
    body = await request.body()
    if len(body) > _MAX_BODY:
        return {}
    fields = urllib.parse.parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    return {k: v[0] for k, v in fields.items()}


_READ_ONLY = "actions are off: this dashboard is read-only"


def _refused(request: Request, board: Dashboard, message: str) -> Response:
    """403: a one-line page saying why nothing was done."""
    return _html(_render("error", request, board, message=message), 403)


async def _authorized(request: Request) -> tuple[Dashboard, dict[str, str], Response | None]:
    """The form of an action, or the 403 answer when actions are off or the token is wrong."""
    board = _board(request)
    fields = await _form(request)
    header = request.headers.get("authorization", "")
    given = fields.get("token") or header.removeprefix("Bearer ").strip()
    if not board.allow_actions:
        message = _READ_ONLY
    elif not board.token_ok(given):
        message = "wrong or missing token: the action was refused"
    else:
        return board, fields, None
    return board, fields, _refused(request, board, message)


async def _read_only(request: Request) -> Response:
    """A POST to a page of a read-only dashboard: refused as an action would be."""
    return _refused(request, _board(request), _READ_ONLY)


async def _requeue(request: Request) -> Response:
    board, fields, refused = await _authorized(request)
    if refused is not None:
        return refused
    return await _act(request, board, fields, "requeue")


async def _cancel(request: Request) -> Response:
    board, fields, refused = await _authorized(request)
    if refused is not None:
        return refused
    return await _act(request, board, fields, "cancel")


async def _act(request: Request, board: Dashboard, fields: dict[str, str],
               action: str) -> Response:
    table = fields.get("table", "")
    module = board.module(table)
    raw_id = fields.get("id", "").strip()
    if module is None or not raw_id:
        return _html(_render("error", request, board,
                             message=f"give a queue table of this dashboard and a job's id "
                                     f"(table {table!r}, id {raw_id!r})"), 400)
    now = _dt.datetime.now(_dt.UTC)
    to_group = fields.get("to_group", "").strip() or None
    reset = fields.get("reset_attempts") == "on"

    def run() -> str:
        conn, _ = board.database.conn(module)
        if action == "requeue":
            moved = maintenance.requeue(module, conn, now=now, ids=[raw_id], to_group=to_group,
                                        reset_attempt=reset, dry_run=False)
            return (f"{table}: put {moved} dead letter(s) back into the queue"
                    + (f" (group {to_group})" if to_group else "")
                    + (", attempts reset" if reset else ""))
        done, _left = maintenance.cancel(module, conn, now=now, ids=[raw_id])
        return (f"{table}: cancelled job {raw_id}" if done else
                f"{table}: job {raw_id} was not cancelled (held by a worker, finished, or not "
                f"there)")

    try:
        message = await board.database.run(run)
    except InboxgenError as err:
        code = 400 if isinstance(err, ConfigError) else 503
        return _html(_render("error", request, board, message=str(err)), code)
    log.info("dashboard: %s (job %r, from %s)", message, raw_id,
             request.client.host if request.client else "?")
    return _html(_render("done", request, board, message=message, table=table, job_id=raw_id))


# -- what the pages show -----------------------------------------------------------------------


def _rows(t: TableStatus) -> list[dict[str, Any]]:
    """The table's lines as `inboxgen status` prints them, each cell as (column, text): a
    dead-letter group's rows are all dead; the dead-letter table has a line of its own. `waited`
    is the oldest ready job's wait in seconds, unrounded for scripts (data-seconds)."""
    rows = []
    for g in t.groups:
        dead = bool(g["dead"])
        texts = (["-", "-", _n(g["in_work"]), _n(g["finished"]), str(g["ready"] + g["scheduled"]),
                  ""] if dead else
                 [str(g["ready"]), str(g["scheduled"]), _n(g["in_work"]), _n(g["finished"]), "",
                  status._age(g["oldest_ready_waited_s"])])
        rows.append({"group": "" if g["group"] is None else str(g["group"]), "is_dead": dead,
                     "cells": list(zip(_COLUMNS, texts, strict=True)),
                     "waited": None if dead else g["oldest_ready_waited_s"]})
    if not t.groups:
        rows.append({"group": "", "is_dead": False, "waited": None,
                     "cells": list(zip(_COLUMNS, ["0", "0", "0", "", "", ""], strict=True))})
    if t.dead_table is not None:
        rows.append({"group": "(dead-letter table)", "is_dead": True, "waited": None,
                     "cells": list(zip(_COLUMNS, ["", "", "", "", str(t.dead_table), ""],
                                       strict=True))})
    return rows


_COLUMNS = ("ready", "scheduled", "in_work", "finished", "dead", "oldest_ready")


def _n(value: int | None) -> str:
    return "?" if value is None else str(value)  # the database cannot tell


def _notes(t: TableStatus, now: _dt.datetime) -> list[str]:
    notes = []
    if t.advisory_locks is not None:
        notes.append(f"{t.advisory_locks} advisory lock(s) held in the database (every table's)")
    if t.oldest_transaction_s is not None:
        notes.append(f"oldest open transaction in the database: "
                     f"{status._age(t.oldest_transaction_s)}")
    if t.dead_tuples is not None:
        notes.append(status._health(t, now).removeprefix(f"{t.table}: "))
    return notes


def _dead_kept(module: ModuleType) -> str | None:
    d = module.DESCRIPTOR
    if d.dead_letter_group is not None:
        return f"in group {d.dead_letter_group}"
    if d.dead_letter_table is not None:
        return f"in table {d.dead_letter_table}"
    return None


def _shown_error(error: str | None) -> str | None:
    """Why a payload does not decode (JobState.payload_error), cut as a payload is."""
    return None if error is None else _shown_payload(error)


def _shown_payload(payload: Any) -> str:
    text = repr(payload) if isinstance(payload, bytes | bytearray) else str(payload)
    if len(text) > _PAYLOAD_SHOWN:
        return text[:_PAYLOAD_SHOWN] + f"… ({len(text) - _PAYLOAD_SHOWN} more characters)"
    return text


# The chart's drawing area inside its SVG (user units).
_W, _H, _LEFT, _RIGHT, _TOP, _BOTTOM = 640, 170, 44, 630, 10, 146


def _chart(history: Sequence[Sample], table: str) -> dict[str, Any]:
    """Polylines of the table's counts over the samples kept, scaled into the SVG."""
    samples = [s for s in history if table in s.counts]
    if not samples:
        return {"lines": [], "samples": 0}
    start, end = samples[0].at, samples[-1].at
    span = max((end - start).total_seconds(), 0.0)
    top = max([1] + [v for s in samples for v in s.counts[table].values() if v is not None])

    def x(at: _dt.datetime) -> float:
        if span == 0:
            return float(_RIGHT)
        return _LEFT + (at - start).total_seconds() / span * (_RIGHT - _LEFT)

    def y(value: int) -> float:
        return _BOTTOM - value / top * (_BOTTOM - _TOP)

    lines = []
    for name, colour in SERIES:
        points = [(x(s.at), y(v)) for s in samples if (v := s.counts[table].get(name)) is not None]
        if points:
            last = samples[-1].counts[table].get(name)
            lines.append({"name": name.replace("_", " "), "colour": colour, "last": last,
                          "points": " ".join(f"{px:.1f},{py:.1f}" for px, py in points),
                          "dot": points[-1]})
    return {"lines": lines, "samples": len(samples), "top": top, "width": _W, "height": _H,
            "left": _LEFT, "right": _RIGHT, "plot_top": _TOP, "bottom": _BOTTOM,
            "start": start.strftime("%H:%M:%S"), "end": end.strftime("%H:%M:%S"),
            "span": status._age(span) if span else ""}


_LAYOUT = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
{% if refresh_s %}<meta http-equiv="refresh" content="{{ refresh_s }}">{% endif %}
<title>{% block title %}inboxgen{% endblock %}</title>
<style>
body { font: 14px/1.45 system-ui, sans-serif; margin: 1.5em auto; max-width: 72em;
       padding: 0 1em; color: #1a202c; }
h1 { font-size: 1.4em; margin: 0 0 .2em; } h2 { font-size: 1.15em; margin: 1.6em 0 .4em; }
h3 { font-size: 1em; margin: 1em 0 .3em; }
a { color: #2b6cb0; }
.meta { color: #4a5568; margin: 0 0 1em; }
.mode { display: inline-block; padding: 0 .5em; border-radius: 3px; background: #edf2f7; }
.mode.actions { background: #fefcbf; }
table.counts { border-collapse: collapse; min-width: 40em; }
table.counts th, table.counts td { padding: .25em .8em; border-bottom: 1px solid #e2e8f0; }
table.counts th { text-align: left; color: #4a5568; font-weight: 600; }
table.counts td.n { text-align: right; font-variant-numeric: tabular-nums; }
tr.dead td { color: #c53030; }
.notes { color: #4a5568; margin: .4em 0; padding-left: 1.2em; }
.legend span { margin-right: 1em; } .legend i { display: inline-block; width: .8em;
  height: .8em; margin-right: .3em; vertical-align: -1px; }
svg.chart { max-width: 100%; height: auto; background: #fafafa; border: 1px solid #e2e8f0; }
.error { color: #c53030; font-weight: 600; }
form.inline { display: inline-block; margin: .3em 1em .3em 0; }
form.action label { margin-right: .8em; }
form.lookup { margin: .6em 0 1.2em; }
input[type=text], input[type=password] { padding: .15em .3em; }
dl.job dt { float: left; clear: left; width: 8em; color: #4a5568; }
dl.job dd { margin: 0 0 .2em 9em; }
pre.payload { background: #f7fafc; border: 1px solid #e2e8f0; padding: .5em; white-space: pre-wrap;
  word-break: break-all; max-width: 60em; }
.payload-error { color: #c53030; word-break: break-all; }
</style>
</head>
<body>
<h1><a href="{{ base }}/">inboxgen</a>{% block heading %}{% endblock %}</h1>
{% block body %}{% endblock %}
</body>
</html>
"""

_TEMPLATES = {
    "overview": """{% extends "layout" %}
{% block heading %} queues{% endblock %}
{% block body %}
<p class="meta"><span class="database">{{ labels | join(", ") }}</span> &middot;
read at <time>{{ now.strftime("%Y-%m-%d %H:%M:%S") }} UTC</time> &middot;
{% if board.allow_actions %}<span class="mode actions">actions on (token required)</span>
{% else %}<span class="mode">read-only</span>{% endif %}
&middot; <a href="{{ base }}/api/status">JSON</a></p>
{% for s in sections %}
{% set t = s.status %}
<section class="queue" data-table="{{ t.table }}">
<h2>{{ t.table }}</h2>
<table class="counts">
<thead><tr><th>group</th><th>ready</th><th>scheduled</th><th>in work</th><th>finished</th>
<th>dead</th><th>oldest ready</th></tr></thead>
<tbody>
{% for r in s.rows %}
<tr data-group="{{ r.group }}"{% if r.is_dead %} class="dead"{% endif %}>
<td class="group">{{ r.group }}</td>
{% for key, text in r.cells %}
<td class="n" data-col="{{ key }}"{% if key == "oldest_ready" and r.waited is not none
%} data-seconds="{{ r.waited }}"{% endif %}>{{ text }}</td>
{% endfor %}
</tr>
{% endfor %}
</tbody>
</table>
{% if s.notes %}<ul class="notes">{% for n in s.notes %}<li>{{ n }}</li>{% endfor %}</ul>
{% endif %}
{% set c = s.chart %}
{% if c.samples %}
<figure class="chart">
<svg class="chart" viewBox="0 0 {{ c.width }} {{ c.height }}" width="{{ c.width }}"
 height="{{ c.height }}" role="img" xmlns="http://www.w3.org/2000/svg">
<title>{{ t.table }}: counts over the last {{ c.samples }} sample(s)</title>
<line x1="{{ c.left }}" y1="{{ c.bottom }}" x2="{{ c.right }}" y2="{{ c.bottom }}"
 stroke="#a0aec0"/>
<line x1="{{ c.left }}" y1="{{ c.plot_top }}" x2="{{ c.left }}" y2="{{ c.bottom }}"
 stroke="#a0aec0"/>
<text x="{{ c.left - 6 }}" y="{{ c.plot_top + 9 }}" text-anchor="end" font-size="11"
 fill="#4a5568">{{ c.top }}</text>
<text x="{{ c.left - 6 }}" y="{{ c.bottom }}" text-anchor="end" font-size="11"
 fill="#4a5568">0</text>
<text x="{{ c.left }}" y="{{ c.bottom + 16 }}" font-size="11" fill="#4a5568">{{ c.start }}
</text>
<text x="{{ c.right }}" y="{{ c.bottom + 16 }}" text-anchor="end" font-size="11"
 fill="#4a5568">{{ c.end }} UTC</text>
{% for l in c.lines %}
<polyline class="series" data-series="{{ l.name }}" fill="none" stroke="{{ l.colour }}"
 stroke-width="2" points="{{ l.points }}"/>
<circle cx="{{ '%.1f' % l.dot[0] }}" cy="{{ '%.1f' % l.dot[1] }}" r="2.5" fill="{{ l.colour }}"/>
{% endfor %}
</svg>
<figcaption class="legend">
{% for l in c.lines %}<span><i style="background: {{ l.colour }}"></i>{{ l.name }}
{{ l.last }}</span>{% endfor %}
<span class="samples">{{ c.samples }} sample(s){% if c.span %} over {{ c.span }}{% endif
%}</span>
</figcaption>
</figure>
{% endif %}
<h3>Dead letters</h3>
{% if s.dead_kept %}
<p class="dead-letters">{{ s.dead }} dead letter(s), kept
{{ s.dead_kept }}{% if s.dead_list %}; the newest (by id):{% else %}.{% endif %}</p>
{% if s.dead_list %}
<table class="dead-list">
<thead><tr><th>id</th><th>attempt</th><th>due</th>{% if board.show_payloads or s.undecodable
%}<th>payload</th>{% endif %}</tr></thead>
<tbody>
{% for j in s.dead_list %}
<tr><td><a href="{{ base }}/job?table={{ t.table | urlencode }}&amp;id={{ j.id | urlencode
}}">{{ j.id }}</a></td><td class="num">{{ j.attempt if j.attempt is not none else "" }}</td>
<td>{{ j.due.strftime("%Y-%m-%d %H:%M:%S") if j.due else "" }}</td>{% if board.show_payloads
or s.undecodable %}<td>{% if j.payload_error %}<span class="payload-error">does not decode:
{{ j.payload_error }}</span>{% endif %}{% if board.show_payloads %}<pre class="payload">{{ j.payload
}}</pre>{% endif %}</td>{% endif %}</tr>
{% endfor %}
</tbody>
</table>
{% endif %}
{% else %}
<p class="dead-letters">None kept: the spec has no [dead_letter].</p>
{% endif %}
<form class="lookup" method="get" action="{{ base }}/job">
<input type="hidden" name="table" value="{{ t.table }}">
<label>Job id <input type="text" name="id" size="12" required></label>
<button type="submit">Look up</button>
</form>
</section>
{% endfor %}
<p class="meta">Counts as <code>inboxgen status</code> counts them;
{{ samples }} sample(s) kept, one every {{ "%g" | format(board.sample_every) }} s and one per
page load.{% if board.last_error %} <span class="error">Last sample failed:
{{ board.last_error }}</span>{% endif %}</p>
{% endblock %}
""",
    "job": """{% extends "layout" %}
{% block title %}{{ table }} job {{ job_id }}{% endblock %}
{% block heading %} &rsaquo; {{ table }} job {{ job_id }}{% endblock %}
{% block body %}
{% if job is none %}
<p class="state" data-state="">No job {{ job_id }} in {{ table }}: neither queued, finished
nor dead (cancelled, deleted when finished, or never there).</p>
{% else %}
<dl class="job">
<dt>state</dt><dd class="state" data-state="{{ job.state }}">{{ job.state.replace("_", " ") }}
</dd>
<dt>attempt</dt><dd class="attempt">{{ "" if job.attempt is none else job.attempt }}</dd>
{% if job.due is not none %}<dt>due</dt><dd class="due">{{ job.due.isoformat() }}</dd>
{% endif %}
{% if job.finished_at is not none %}<dt>finished</dt>
<dd class="finished">{{ job.finished_at.isoformat() }}</dd>{% endif %}
<dt>payload</dt><dd>{% if payload_error %}<p class="payload-error">does not decode:
{{ payload_error }}{% if board.show_payloads %} (below as stored){% endif %}</p>
{% endif %}{% if board.show_payloads %}<pre class="payload">{{ payload }}</pre>
{% else %}<span class="payload-hidden">hidden (start the dashboard with --show-payloads to
show payloads)</span>{% endif %}</dd>
</dl>
{% if board.allow_actions %}
{% if can_requeue %}
<form class="inline action" method="post" action="{{ base }}/actions/requeue">
<input type="hidden" name="table" value="{{ table }}">
<input type="hidden" name="id" value="{{ job_id }}">
{% if dead_group %}<label>into group <input type="text" name="to_group" required
 size="12"></label>{% endif %}
<label><input type="checkbox" name="reset_attempts"> reset attempts</label>
<label>token <input type="password" name="token" required autocomplete="off"></label>
<button type="submit" name="do" value="requeue">Requeue</button>
</form>
{% endif %}
{% if can_cancel %}
<form class="inline action" method="post" action="{{ base }}/actions/cancel">
<input type="hidden" name="table" value="{{ table }}">
<input type="hidden" name="id" value="{{ job_id }}">
<label>token <input type="password" name="token" required autocomplete="off"></label>
<button type="submit" name="do" value="cancel">Cancel job</button>
</form>
{% endif %}
{% else %}
<p class="meta">Read-only: requeue and cancel need the dashboard started with
--allow-actions and a token.</p>
{% endif %}
{% endif %}
<p><a href="{{ base }}/">back to the queues</a></p>
{% endblock %}
""",
    "done": """{% extends "layout" %}
{% block heading %} &rsaquo; done{% endblock %}
{% block body %}
<p class="result">{{ message }}</p>
<p><a href="{{ base }}/job?table={{ table | urlencode }}&amp;id={{ job_id | urlencode }}">the
job now</a> &middot; <a href="{{ base }}/">back to the queues</a></p>
{% endblock %}
""",
    "error": """{% extends "layout" %}
{% block body %}
<p class="error">{{ message }}</p>
<p><a href="{{ base }}/">back to the queues</a></p>
{% endblock %}
""",
}

_ENV = jinja2.Environment(loader=jinja2.DictLoader({"layout": _LAYOUT, **_TEMPLATES}),
                          autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True,
                          lstrip_blocks=True)


def _render(name: str, request: Request, board: Dashboard, **values: Any) -> str:
    # Only the overview reloads itself: a job page or a form must stay as it is.
    refresh = board.refresh if name == "overview" else 0
    return _ENV.get_template(name).render(
        base=_base(request), board=board, refresh_s=f"{refresh:g}" if refresh else "", **values)
