"""The service's own code, imported by the commands as a user runs them: the installed `inboxgen`
script (whose sys.path starts with its own bin folder, not the working folder) in the project's
folder. A typed payload's class is found in the project for `status`, `asyncapi` and `verify
--database-url`; a payload's or result's class that cannot be imported, and a `worker` target
that is not a Worker, are one line naming what is wrong."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sysconfig
import textwrap
from pathlib import Path

import psycopg
import pytest

SCRIPT = Path(sysconfig.get_path("scripts")) / "inboxgen"

SPECS = {
    "sqlite": ("""
        table = "mail"
        dialect = "sqlite"

        [columns]
        id = { role = "id", generated = true }
        retry_after = "retry_after"
        locked_until = "locked_until"
        payload = { role = "payload", codec = "json", type = "TYPE" }
        """, """
        CREATE TABLE mail (id INTEGER PRIMARY KEY, retry_after TEXT NOT NULL,
                           locked_until TEXT, payload TEXT NOT NULL);
        CREATE INDEX mail_claim ON mail (retry_after, id);
        """),
    "postgres": ("""
        table = "mail"
        dialect = "postgres"

        [columns]
        id = { role = "id", generated = true }
        retry_after = "retry_after"
        payload = { role = "payload", codec = "json", type = "TYPE" }
        """, """
        CREATE TABLE mail (id BIGSERIAL PRIMARY KEY, retry_after TIMESTAMPTZ NOT NULL,
                           payload JSONB NOT NULL);
        CREATE INDEX mail_claim ON mail (retry_after, id);
        """),
}


def inboxgen(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The installed console script, run in `cwd` with nothing of the project on sys.path."""
    assert SCRIPT.is_file(), f"{SCRIPT}: the inboxgen script is not installed"
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return subprocess.run([str(SCRIPT), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          check=False, timeout=120)


def typed_project(root: Path, dialect: str, url: str, type_: str = "myapp.jobs:Email") -> int:
    """A project whose spec's payload is typed with a class of its own package `myapp`, built,
    with its table created at `url`; the spec's line that names the type."""
    (root / "myapp").mkdir(parents=True)
    (root / "myapp" / "__init__.py").write_text("")
    (root / "myapp" / "jobs.py").write_text(
        "import msgspec\n\n\nclass Email(msgspec.Struct):\n    to: str\n    subject: str\n")
    (root / "specs").mkdir()
    spec, ddl = (textwrap.dedent(text).lstrip() for text in SPECS[dialect])
    text = 'ddl = "mail.sql"\n' + spec.replace("TYPE", type_)
    (root / "specs" / "mail.toml").write_text(text)
    (root / "specs" / "mail.sql").write_text(ddl)
    (root / "pyproject.toml").write_text('[project]\nname = "mailer"\nversion = "1.0.0"\n'
                                         '[tool.inboxgen]\nspecs = "specs"\nout = "generated"\n')
    built = inboxgen(root, "build")
    assert built.returncode == 0, built.stderr
    if dialect == "postgres":
        with psycopg.connect(url) as conn:
            conn.execute(ddl)
    else:
        with sqlite3.connect(url) as db:
            db.executescript(ddl)
    return next(n for n, line in enumerate(text.splitlines(), 1) if line.startswith("payload"))


@pytest.fixture(params=["postgres", "sqlite"])
def dialect_url(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    if request.param == "postgres":
        return "postgres", request.getfixturevalue("pg_dsn")
    return "sqlite", str(tmp_path / "queue.sqlite3")


def test_a_typed_payload_of_the_project_is_found_by_the_operations_commands(
        tmp_path: Path, dialect_url: tuple[str, str]) -> None:
    dialect, url = dialect_url
    root = tmp_path / "app"
    typed_project(root, dialect, url)
    status = inboxgen(root, "status", "--database-url", url)
    assert status.returncode == 0, status.stderr
    assert "mail" in status.stdout
    asyncapi = inboxgen(root, "asyncapi")
    assert asyncapi.returncode == 0, asyncapi.stderr
    assert '"Email"' in asyncapi.stdout
    verify = inboxgen(root, "verify", "--database-url", url)
    assert verify.returncode == 0, verify.stderr
    assert "against" in verify.stdout
    # From a folder below the project too: the project's folder is where its packages are.
    (root / "deploy").mkdir()
    assert inboxgen(root / "deploy", "status", "--database-url", url).returncode == 0


@pytest.mark.parametrize(("type_", "error"), [
    ("myapp.jobs:Letter", "module myapp.jobs has no attribute 'Letter'"),
    ("nosuchpkg.jobs:Email", "No module named 'nosuchpkg'"),
    ("myapp.broken:Email", "RuntimeError: EMAIL_FROM is not set (myapp/broken.py:1)"),
])
def test_a_payload_type_that_cannot_be_imported_is_one_line_naming_spec_and_type(
        tmp_path: Path, type_: str, error: str) -> None:
    url = str(tmp_path / "queue.sqlite3")
    root = tmp_path / "app"
    line = typed_project(root, "sqlite", url, type_)
    (root / "myapp" / "broken.py").write_text("raise RuntimeError('EMAIL_FROM is not set')\n")
    expected = (f"inboxgen: specs/mail.toml:{line}: payload type {type_} cannot be "
                f"imported: {error}")
    for args in (("status", "--database-url", url), ("asyncapi",),
                 ("verify", "--database-url", url)):
        result = inboxgen(root, *args)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert result.stderr.splitlines()[-1:] == [expected], args
        assert "run inboxgen build" not in result.stderr and "Traceback" not in result.stderr


def test_a_result_type_that_cannot_be_imported_is_one_line_naming_spec_and_type(
        tmp_path: Path) -> None:
    url = str(tmp_path / "queue.sqlite3")
    root = tmp_path / "app"
    typed_project(root, "sqlite", url)
    spec = root / "specs" / "mail.toml"
    text = spec.read_text().replace('locked_until = "locked_until"\n', (
        'locked_until = "locked_until"\nprocessed_at = "processed_at"\n'
        'result = { role = "result", type = "myapp.jobs:Receipt" }\n'))
    spec.write_text(text)
    (root / "specs" / "mail.sql").write_text(textwrap.dedent("""\
        CREATE TABLE mail (id INTEGER PRIMARY KEY, retry_after TEXT NOT NULL,
                           locked_until TEXT, processed_at TEXT, result TEXT,
                           payload TEXT NOT NULL);
        CREATE INDEX mail_claim ON mail (retry_after, id) WHERE processed_at IS NULL;
        """))
    assert inboxgen(root, "build").returncode == 0
    line = next(n for n, line in enumerate(text.splitlines(), 1) if line.startswith("result"))
    result = inboxgen(root, "status", "--database-url", url)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.splitlines()[-1:] == [
        f"inboxgen: specs/mail.toml:{line}: result type myapp.jobs:Receipt cannot be imported: "
        "module myapp.jobs has no attribute 'Receipt'"]


WORKER_APP = """
from inboxgen import Worker
import os as a_module

NAME = "mailer"
NOTHING = None


def handle(job):
    raise SystemExit("the handler was called")


def make_text():
    return "not a worker"


async def make_later():
    return None


class Mailer:
    pass
"""

REFUSED = "the target must be a Worker or a function returning one"


@pytest.mark.parametrize(("target", "line"), [
    ("app:handle", "app:handle is not an inboxgen Worker but a function that takes arguments "
                   f"(job): {REFUSED}"),
    ("app:make_text", f"app:make_text is not an inboxgen Worker but a function that returned a "
                      f"str: {REFUSED}"),
    ("app:make_later", f"app:make_later is not an inboxgen Worker but a function that returned a "
                       f"coroutine: {REFUSED}"),
    ("app:NAME", f"app:NAME is not an inboxgen Worker but a str: {REFUSED}"),
    ("app:NOTHING", f"app:NOTHING is not an inboxgen Worker but None: {REFUSED}"),
    ("app:a_module", f"app:a_module is not an inboxgen Worker but a module: {REFUSED}"),
    ("app:Mailer", f"app:Mailer is not an inboxgen Worker but the class Mailer: {REFUSED}"),
    ("app:mailer", "app:mailer: module app has no attribute 'mailer'"),
    ("nosuch:worker", "nosuch:worker: cannot import nosuch: No module named 'nosuch'"),
    ("needs:worker", "needs:worker: cannot import needs: No module named 'nosuchdep' "
                     "(needs.py:1)"),
    ("broken:worker", "broken:worker: cannot import broken: RuntimeError: DATABASE_URL is not "
                      "set (broken.py:2)"),
    ("typo:worker", "typo:worker: cannot import typo: SyntaxError: invalid syntax (typo.py:1)"),
    ("app", "worker target must look like package.module:name, not 'app'"),
])
def test_a_worker_target_that_is_not_a_worker_is_one_line(tmp_path: Path, target: str,
                                                         line: str) -> None:
    (tmp_path / "app.py").write_text(textwrap.dedent(WORKER_APP))
    (tmp_path / "needs.py").write_text("import nosuchdep\n")
    (tmp_path / "broken.py").write_text("import os\n"
                                        "raise RuntimeError('DATABASE_URL is not set')\n")
    (tmp_path / "typo.py").write_text("worker = = 1\n")
    result = inboxgen(tmp_path, "worker", target)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.splitlines() == [f"inboxgen: {line}"]


def test_an_import_failure_names_no_file_of_inboxgen_or_of_the_projects_venv(
        tmp_path: Path) -> None:
    """A project whose virtual environment (with inboxgen in it) lives in the project's folder,
    as `python3 -m venv .venv` makes it: the line names the project's own file where one raised,
    never a file of inboxgen's or of another installed package."""
    from venvs import make_venv

    REPO = Path(__file__).resolve().parents[2]
    python = make_venv(tmp_path / ".venv")
    # The suite's pip and hatchling install a wheel of this checkout into the venv (its
    # dependencies, seen there, are not fetched).
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         str(REPO)], capture_output=True, text=True, check=False, timeout=300)
    assert installed.returncode == 0, installed.stderr
    where = subprocess.run([str(python), "-c", "import inboxgen; print(inboxgen.__file__)"],
                           cwd=tmp_path, capture_output=True, text=True, check=True)
    assert where.stdout.startswith(str(tmp_path / ".venv")), where.stdout
    (tmp_path / "needs.py").write_text("import os\nimport nosuchdep\n")
    for target, line in [
        ("nosuch.mod:worker", "nosuch.mod:worker: cannot import nosuch.mod: No module named "
                              "'nosuch'"),
        ("needs:worker", "needs:worker: cannot import needs: No module named 'nosuchdep' "
                         "(needs.py:2)"),
    ]:
        result = subprocess.run([str(tmp_path / ".venv" / "bin" / "inboxgen"), "worker", target],
                                cwd=tmp_path, capture_output=True, text=True, check=False,
                                timeout=120)
        assert result.returncode == 2, (result.stdout, result.stderr)
        assert result.stderr.splitlines() == [f"inboxgen: {line}"]
