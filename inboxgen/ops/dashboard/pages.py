"""The dashboard's pages: jinja2 templates, files under `templates/` of this package (shipped in
the wheel as package data), rendered into HTML answers that carry the same security headers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse

from inboxgen.ops.dashboard.views import when

if TYPE_CHECKING:
    from inboxgen.ops.dashboard.board import Dashboard

# No script, no outside resource; forms post only here; never framed (the action buttons).
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
                               "form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

ENV = jinja2.Environment(loader=jinja2.PackageLoader("inboxgen.ops.dashboard", "templates"),
                         autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True,
                         lstrip_blocks=True)
ENV.filters["when"] = when


def base(request: Request) -> str:
    """The prefix the app is mounted at: links stay below it."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def render(name: str, request: Request, board: Dashboard, **values: Any) -> str:
    """Page `name` (`templates/<name>.html`)."""
    # Only the overview reloads itself: a job page or a form must stay as it is.
    refresh = board.refresh if name == "overview" else 0
    return ENV.get_template(f"{name}.html").render(
        base=base(request), board=board, refresh_s=f"{refresh:g}" if refresh else "", **values)


def html(text: str, status_code: int = 200) -> HTMLResponse:
    return HTMLResponse(text, status_code=status_code, headers=HEADERS)
