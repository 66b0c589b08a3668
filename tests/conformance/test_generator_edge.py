"""Property tests at the generator's edge: Hypothesis draws a spec and its DDL from the
matrix's axes (axes.py) plus what a user's schema adds: a PostgreSQL schema, quoted names with
capitals and spaces (a table partitioned by hash is an axis of the matrix's). Either the
build refuses the spec with located errors, or `inboxgen verify --database-url` against the
migrated database is clean: every generated statement prepares on the real server, the live
table matches the migrations and a claim index serves the claim order.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
from dbcases import apply_ddl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance import shapes
from conformance.axes import AXES, FREE, Shape, refusal, ruled_points
from inboxgen.cli import main

# The points of the axes the build's refusals read; a shape is one of them plus any values of
# the free axes (axes.py).
VALID = ruled_points()
REFUSED = ruled_points(refused=True)
_databases = itertools.count(1)


@st.composite
def drawn(draw: Any, dialect: str) -> tuple[Shape, shapes.Names]:
    # Mostly shapes that build (most points of the ruled axes are refused).
    pool = draw(st.sampled_from([VALID, VALID, VALID, REFUSED]))
    point = draw(st.sampled_from([p for p in pool if p["dialect"] == dialect]))
    s = Shape(**point, **{axis: draw(st.sampled_from(AXES[axis])) for axis in FREE})
    quoted = draw(st.booleans())
    table = draw(st.sampled_from(["Job Queue", "Jobs", "jobs_q"])) if quoted else "jobs_q"
    schema = draw(st.sampled_from([None, "app", "App Schema"])) if dialect == "postgres" \
        else None
    return s, shapes.Names(table, schema, quoted or schema is not None)


# The SQL a build warning ends with: the claim index, a table's storage settings.
_ADVICE = re.compile(r"(?:CREATE INDEX|ALTER TABLE) [^;\n]*")


def _run(root: Path, *args: str) -> tuple[int, str]:
    out = io.StringIO()
    cwd = os.getcwd()
    os.chdir(root)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = main(list(args))
    finally:
        os.chdir(cwd)
    return code, out.getvalue()


def _check(s: Shape, names: shapes.Names, database: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "specs" / "migrations").mkdir(parents=True)
        (root / "pyproject.toml").write_text('[tool.inboxgen]\nspecs = "specs"\n'
                                             'out = "generated"\n')
        (root / f"{shapes.PAYLOAD_MODULE}.py").write_text(shapes.PAYLOAD_SOURCE)
        ddl = shapes.ddl(s, names)
        (root / "specs" / "migrations" / f"{s.name}.sql").write_text(ddl)
        (root / "specs" / f"{s.name}.toml").write_text(shapes.spec(s, names))
        code, out = _run(root, "build")
        errors = [line for line in out.splitlines()
                  if line.startswith("specs/") and ": warning:" not in line]
        if refusal(s) is not None:
            assert code != 0 and errors, out
            assert all(re.match(r"specs/\w+\.toml:\d+: ", e) for e in errors), out
            return
        assert code == 0, f"{s.name} {names}:\n{ddl}\n{out}"
        # As a user would: the migrations, then what the build's warnings ask for.
        advice = [m.group(0) for m in _ADVICE.finditer(out)]
        apply_ddl(s.dialect, database, ddl + "".join(f"{a};\n" for a in advice))
        with _on_path(root):
            code, out = _run(root, "verify", "--database-url", database)
        assert code == 0, f"{s.name} {names}:\n{ddl}\n{out}"


@contextlib.contextmanager
def _on_path(root: Path) -> Any:
    import sys
    sys.path.insert(0, str(root))  # the typed payload's class
    try:
        yield
    finally:
        sys.path.remove(str(root))
        sys.modules.pop(shapes.PAYLOAD_MODULE, None)


_SETTINGS = settings(max_examples=int(os.environ.get("INBOXGEN_EDGE_EXAMPLES", "50")),
                     deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.function_scoped_fixture,
                                            HealthCheck.too_slow])


@_SETTINGS
@given(case=drawn("postgres"))
def test_postgres(case: tuple[Shape, shapes.Names], pg_server: Any) -> None:
    s, names = case
    _check(s, names, pg_server.create_database(f"edge_{next(_databases)}"))


@_SETTINGS
@given(case=drawn("mysql"))
def test_mysql(case: tuple[Shape, shapes.Names], mariadb_server: Any) -> None:
    s, names = case
    _check(s, names, mariadb_server.create_database(f"edge_{next(_databases)}"))


@_SETTINGS
@given(case=drawn("sqlite"))
def test_sqlite(case: tuple[Shape, shapes.Names]) -> None:
    s, names = case
    with tempfile.TemporaryDirectory() as tmp:
        _check(s, names, str(Path(tmp) / "queue.sqlite3"))


pytestmark = pytest.mark.filterwarnings("ignore")
