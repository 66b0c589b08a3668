"""`inboxgen dashboard`: a small web page of the queues, as `inboxgen status` counts them.

Per table and group it shows the jobs ready, scheduled, in work, finished and dead and how long
the oldest ready job has waited (`status.read()`, so the same statements and the same numbers),
a chart of those counts over the samples it took while serving, and a form that looks one job
up by its id (the module's `state()`). `/api/status` returns what `inboxgen status --json`
prints. It runs the generated modules' statements and nothing else.

A table with a pause table ([flow] pauses) shows whether it, or which of its groups, is paused.
It is read-only unless built with `allow_actions=True` and a token: then a dead job can be put
back into the queue (`requeue()`), a queued one cancelled (`cancel()`), and a queue or one
group paused and resumed (`pause()`, `resume()`), each POST carrying the token. Read-only,
every POST (to a page or an action) is answered 403. The database is named by the connect
helpers' label, which never holds a password.

    from inboxgen.ops import dashboard
    app = dashboard.app("postgresql://ops@db/app", [mailer, reports])   # a Starlette app

Needs starlette (and uvicorn to serve it on its own): `pip install 'inboxgen[dashboard]'`.

The package, by concept: `board` (the state behind the app: its modules, database thread and
samples), `routes` (the Starlette app, its pages and actions), `views` (what a page shows of a
reading: lines, notes, times, payloads), `chart` (the counts over time, as SVG), `pages` (the
jinja2 templates, files under `templates/`, shipped in the wheel).
"""

from __future__ import annotations

from inboxgen.ops.dashboard.board import DEAD_LISTED, Dashboard, ReadFailed, Sample, totals
from inboxgen.ops.dashboard.chart import SERIES
from inboxgen.ops.dashboard.routes import app, dashboard_of

__all__ = ["DEAD_LISTED", "SERIES", "Dashboard", "ReadFailed", "Sample", "app", "dashboard_of",
           "totals"]
