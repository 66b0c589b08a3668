"""Render a resolved queue and its statements into the Python module the user commits.

The module's layout lives in the project's `templates/module.py.j2` (inside the package once
installed); base.py decides the pieces, each dialect's module what its driver does otherwise,
text.py the text every dialect shares. Each function is written right under the SQL it runs, its
body by the template's macro for its kind of result (base.Step): once plain and, where the
driver has an async API (psycopg, asyncmy), once more with `await`.
"""

from __future__ import annotations

import re

from inboxgen.generate.model import Queue
from inboxgen.generate.render.base import Renderer
from inboxgen.generate.render.mysql import MySQLRenderer
from inboxgen.generate.render.postgres import PostgresRenderer
from inboxgen.generate.render.sqlite import SqliteRenderer
from inboxgen.generate.render.text import template, with_imports, wrap_long_lines
from inboxgen.generate.statements import Statement

_BY_DIALECT: dict[str, type[Renderer]] = {
    "postgres": PostgresRenderer, "mysql": MySQLRenderer, "sqlite": SqliteRenderer}


def render_module(queue: Queue, statements: list[Statement]) -> str:
    r = _BY_DIALECT[queue.dialect.name](queue, statements)
    body = template().render(**r.context())
    body = re.sub(r"\n{4,}", "\n\n\n", body)
    return wrap_long_lines(with_imports(body, queue))


__all__ = ["render_module"]
