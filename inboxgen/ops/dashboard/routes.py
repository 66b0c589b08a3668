"""The dashboard as a Starlette app: its pages (the overview, a job looked up by id, the JSON
status) and, with actions on and the token, requeue, cancel, pause and resume."""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import urllib.parse
from collections.abc import AsyncIterator, Callable, Sequence
from types import ModuleType
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from inboxgen.errors import ConfigError, InboxgenError
from inboxgen.ops import maintenance, status
from inboxgen.ops.dashboard.board import DEAD_LISTED, Dashboard, totals
from inboxgen.ops.dashboard.chart import chart
from inboxgen.ops.dashboard.pages import HEADERS, html, render
from inboxgen.ops.dashboard.views import (
    dead_kept,
    notes,
    pause_state,
    rows,
    shown_error,
    shown_payload,
    shown_progress,
)

log = logging.getLogger("inboxgen.dashboard")

_MAX_BODY = 64 * 1024  # an action's form is a few fields
_READ_ONLY = "actions are off: this dashboard is read-only"


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
              Route("/actions/cancel", _cancel, methods=["POST"]),
              Route("/actions/pause", _pause, methods=["POST"])]
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


def _payload(module: ModuleType, job: Any) -> Any:
    """A job's payload as the pages show it."""
    return shown_payload(job.payload, codec=module.DESCRIPTOR.codec,
                         as_stored=job.payload_error is not None)


# -- pages ---------------------------------------------------------------------------------------


async def _overview(request: Request) -> Response:
    board = _board(request)
    try:
        tables, now = await board.read()
    except InboxgenError as err:
        return html(render("error", request, board, message=str(err)), 503)
    try:
        listed = await board.database.run(lambda: {t.table: _dead_letters(board, t.table)
                                                   for t in tables})
    except InboxgenError as err:
        return html(render("error", request, board, message=str(err)), 503)
    sections = []
    for t in tables:
        module = board.modules[t.table]
        sections.append({
            "status": t, "rows": rows(t), "notes": notes(t, now), "pause": pause_state(t),
            "chart": chart(board.history, t.table), "dead_kept": dead_kept(module),
            "dead": totals(t, True)["dead"],
            "dead_list": [{"id": j.id, "attempt": j.attempt, "due": j.due,
                           "payload": _payload(module, j),
                           "payload_error": shown_error(j.payload_error),
                           "error": j.error}
                          for j in listed[t.table]],
            "keeps_errors": "error" in module.DESCRIPTOR.roles,
            "undecodable": any(j.payload_error for j in listed[t.table])})
    labels = sorted({t.database for t in tables})
    return html(render("overview", request, board, sections=sections, labels=labels, now=now,
                       samples=len(board.history)))


async def _api_status(request: Request) -> Response:
    board = _board(request)
    try:
        tables, _ = await board.read()
    except InboxgenError as err:
        return JSONResponse({"error": str(err)}, status_code=503, headers=HEADERS)
    return JSONResponse(status.as_json(tables), headers=HEADERS)


async def _job(request: Request) -> Response:
    board = _board(request)
    table = request.query_params.get("table", "")
    raw_id = request.query_params.get("id", "").strip()
    module = board.module(table)
    if module is None:
        return html(render("error", request, board, message=f"no queue table {table!r} here"),
                    404)
    if not raw_id:
        return html(render("error", request, board, message="give a job's id"), 400)
    now = _dt.datetime.now(_dt.UTC)
    try:
        (job_id,) = maintenance.typed_ids(module, [raw_id]) or []
        found, groups, after = await board.database.run(
            lambda: _looked_up(board, module, job_id, now))
    except InboxgenError as err:
        code = 400 if isinstance(err, ConfigError) else 503
        return html(render("error", request, board, message=str(err)), code)
    d = module.DESCRIPTOR
    return html(render(
        "job", request, board, table=table, job_id=job_id, job=found, now=now,
        payload=None if found is None else _payload(module, found),
        result=None if found is None or found.result is None else shown_payload(
            found.result, codec="json", as_stored=False),
        progress=None if found is None else shown_progress(found.progress),
        payload_error=None if found is None else shown_error(found.payload_error),
        can_requeue=found is not None and found.state == "dead" and hasattr(module, "requeue"),
        can_cancel=(found is not None and found.state in ("ready", "scheduled")
                    and hasattr(module, "cancel")),
        dead_group=d.dead_letter_group, groups=groups, after=after))


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


def _looked_up(board: Dashboard, module: ModuleType, job_id: Any,
               now: _dt.datetime) -> tuple[Any, list[str], Any]:
    """The job's state (the module's `state()`); for a dead letter kept in a group (which
    does not remember its own), the groups it may go back into: those of the table's rows
    (`status()`), but the dead-letter group; and, on a table with `after`, what became of the
    jobs it waits for (`after_state()`: a batch's callback says how its batch stands), None
    where it waits for none."""
    conn, _ = board.database.conn(module)
    dead_group = module.DESCRIPTOR.dead_letter_group
    try:
        found = module.state(conn, id=job_id, now=now)
        groups: list[str] = []
        if found is not None and found.state == "dead" and dead_group is not None:
            groups = sorted({str(g.group) for g in module.status(conn, now=now)
                             if g.group is not None and g.group != dead_group})
        after = None
        if found is not None and hasattr(module, "after_state"):
            after = module.after_state(conn, id=job_id)
            if not (after.finished or after.dead or after.waiting):
                after = None
        return found, groups, after
    finally:
        conn.rollback()  # read only: nothing to keep


# -- actions -------------------------------------------------------------------------------------


async def _form(request: Request) -> dict[str, str]:
    """The fields of an urlencoded form (no multipart: the forms here send text only)."""
    body = await request.body()
    if len(body) > _MAX_BODY:
        return {}
    fields = urllib.parse.parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    return {k: v[0] for k, v in fields.items()}


def _refused(request: Request, board: Dashboard, message: str) -> Response:
    """403: a one-line page saying why nothing was done."""
    return html(render("error", request, board, message=message), 403)


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


async def _pause(request: Request) -> Response:
    """Pause or resume (the form's `do`) a queue, or one group of it (`group`)."""
    board, fields, refused = await _authorized(request)
    if refused is not None:
        return refused
    table, verb = fields.get("table", ""), fields.get("do", "pause")
    module = board.module(table)
    group = fields.get("group", "").strip() or None
    if module is None or verb not in ("pause", "resume"):
        return html(render("error", request, board,
                           message=f"give a queue table of this dashboard and pause or resume "
                                   f"(table {table!r}, {verb!r})"), 400)
    what = table + (f" group {group}" if group else "")

    def run() -> str:
        conn, _ = board.database.conn(module)
        if verb == "pause":
            maintenance.pause(module, conn, group=group)
            return f"{what}: paused: no worker claims its jobs until it is resumed"
        if maintenance.resume(module, conn, group=group):
            return f"{what}: resumed"
        return f"{what}: was not paused; nothing changed"

    return await _done(request, board, run, table, None)


async def _act(request: Request, board: Dashboard, fields: dict[str, str],
               action: str) -> Response:
    table = fields.get("table", "")
    module = board.module(table)
    raw_id = fields.get("id", "").strip()
    if module is None or not raw_id:
        return html(render("error", request, board,
                           message=f"give a queue table of this dashboard and a job's id "
                                   f"(table {table!r}, id {raw_id!r})"), 400)
    now = _dt.datetime.now(_dt.UTC)
    # The group typed in ("another group") wins over the one chosen from the table's groups.
    to_group = (fields.get("other_group", "").strip() or fields.get("to_group", "").strip()
                or None)
    reset = fields.get("reset_attempts") == "on"
    dead_group = module.DESCRIPTOR.dead_letter_group
    if action == "requeue" and dead_group is not None and to_group is None:
        return html(render("error", request, board,
                           message=f"choose the group to put job {raw_id} back into ({table} "
                                   f"keeps its dead letters in group {dead_group}, which does "
                                   f"not remember their own)"), 400)

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

    return await _done(request, board, run, table, raw_id)


async def _done(request: Request, board: Dashboard, run: Callable[[], str], table: str,
                job_id: str | None) -> Response:
    """Run an action (`run`, on the database's thread; it returns what it did) and answer with
    its line, logged with the client's address; a refusal or a database error is a one-line
    page (400 or 503)."""
    try:
        message = await board.database.run(run)
    except InboxgenError as err:
        code = 400 if isinstance(err, ConfigError) else 503
        return html(render("error", request, board, message=str(err)), code)
    log.info("dashboard: %s (%sfrom %s)", message,
             "" if job_id is None else f"job {job_id!r}, ",
             request.client.host if request.client else "?")
    return html(render("done", request, board, message=message, table=table, job_id=job_id))
