"""The docs tell the truth: every command, option, public name and fixture they show exists, no
page calls a shipped feature missing, and the test suite docs/runtime.md shows runs as written."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from genutil import import_path

from inboxgen import cli, pytest_plugin

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])

FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"`([^`\n]+)`")
# A command as typed: at the start of a piece of code or after a shell's `$` or `&&`.
COMMAND = re.compile(r"(?:^|\$|&&)\s*inboxgen ([a-z][a-z-]*(?: +[^`\n&;|]*)?)")
OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z-]*)")
IMPORT = re.compile(r"^\s*from (inboxgen(?:\.[\w.]+)?) import (?:\(([^)]*)\)|([\w, ]+)$)", re.M)


def _subcommands() -> dict[str, set[str]]:
    """Each subcommand's option strings, from the parser `inboxgen` itself runs."""
    parser = cli._parser()
    found: dict[str, set[str]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[name] = {s for a in sub._actions for s in a.option_strings}
    return found


def _code(page: Path) -> list[tuple[int, str]]:
    """(line, text) of every piece of code on a page: fenced blocks line by line, inline spans."""
    text = page.read_text(encoding="utf-8")
    pieces: list[tuple[int, str]] = []
    fenced: list[tuple[int, int]] = []
    for m in FENCE.finditer(text):
        fenced.append(m.span())
        first = text.count("\n", 0, m.start(2)) + 1
        pieces += [(first + i, line) for i, line in enumerate(m.group(2).splitlines())]
    for m in INLINE.finditer(text):
        if not any(a <= m.start() < b for a, b in fenced):
            pieces.append((text.count("\n", 0, m.start()) + 1, m.group(1)))
    return pieces


def _command_uses() -> list[tuple[str, str, list[str]]]:
    """(where, subcommand, options) for every `inboxgen <subcommand> ...` the docs show."""
    uses = []
    for page in PAGES:
        for line, code in _code(page):
            for m in COMMAND.finditer(code.strip()):
                words = m.group(1).split()
                uses.append((f"{page.relative_to(REPO)}:{line}", words[0],
                             OPTION.findall(m.group(1))))
    return uses


def test_every_command_and_option_the_docs_show_exists() -> None:
    commands = _subcommands()
    uses = _command_uses()
    assert len(uses) > 30  # the pages were read
    wrong = []
    for where, name, options in uses:
        if name not in commands:
            wrong.append(f"{where}: no command inboxgen {name}")
            continue
        wrong += [f"{where}: inboxgen {name} has no option {o}" for o in options
                  if o not in commands[name] | {"--version"}]
    assert wrong == []


def test_every_command_is_documented_in_the_readme() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    missing = [name for name in _subcommands() if f"`inboxgen {name}" not in readme]
    assert missing == []


def test_every_public_name_the_docs_import_exists() -> None:
    wrong = []
    count = 0
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in IMPORT.finditer(text):
            module = importlib.import_module(m.group(1))
            for name in re.split(r"[\s,]+", (m.group(2) or m.group(3)).strip()):
                count += 1
                if name and not hasattr(module, name):
                    wrong.append(f"{page.name}: {m.group(1)} has no {name}")
    assert count > 10
    assert wrong == []


def _defines(module: str, attr: str) -> bool:
    """Whether `module` defines `attr`: imported where it can be, else read (the Django task
    backend's modules import Django 6, which the suite's Python may not have)."""
    try:
        return hasattr(importlib.import_module(module), attr)
    except ImportError:
        spec = importlib.util.find_spec(module)
        assert spec is not None and spec.origin is not None
        text = Path(spec.origin).read_text(encoding="utf-8")
        return re.search(rf"^(class|def) {attr}\b|^{attr}\s*[:=]", text, re.M) is not None


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # its parent is a module, not a package
        return False


def test_every_dotted_public_name_the_docs_show_exists() -> None:
    dotted = re.compile(r"^inboxgen(\.[A-Za-z_]\w*)+$")
    check_id = re.compile(r"^inboxgen\.[EW]\d{3}$")  # a Django system check's id
    source = "".join(f.read_text(encoding="utf-8") for f in (REPO / "inboxgen").rglob("*.py"))
    loggers = set(re.findall(r'getLogger\("([\w.]+)"\)', source))
    # Span attributes and metrics are named inboxgen.<something> too (contrib/otel.py).
    telemetry = set(re.findall(r'"(inboxgen\.[a-z_.]+)"', source))
    wrong = []
    for page in PAGES:
        for line, code in _code(page):
            name = code.strip()
            if (not dotted.match(name) or name in loggers | telemetry
                    or check_id.match(name)):
                continue
            parts = name.split(".")
            # The longest prefix that is a module; what follows must be one attribute of it.
            n = 2
            while n < len(parts) and _is_module(".".join(parts[:n + 1])):
                n += 1
            if not _is_module(".".join(parts[:n])):
                n -= 1
            module, rest = ".".join(parts[:n]), parts[n:]
            if len(rest) > 1 or (rest and not _defines(module, rest[0])):
                wrong.append(f"{page.relative_to(REPO)}:{line}: {code}")
    assert wrong == []


def test_the_pytest_fixtures_are_documented_and_exist() -> None:
    fixtures = {n for n, v in vars(pytest_plugin).items()
                if hasattr(v, "_fixture_function_marker") or hasattr(v, "_pytestfixturefunction")
                or type(v).__name__ == "FixtureFunctionDefinition"}
    assert fixtures == {"inboxgen_clock", "inboxgen_drain"}
    runtime = (REPO / "docs" / "runtime.md").read_text(encoding="utf-8")
    assert all(f"`{name}`" in runtime for name in fixtures)
    shown = set(re.findall(r"`(inboxgen_[a-z_]+)`", runtime))
    assert shown <= fixtures


def test_no_page_calls_a_shipped_feature_missing() -> None:
    """A line that says something is not implemented (or a "Not implemented" section) must not
    name a command or option that exists."""
    commands = _subcommands()
    wrong = []
    for page in PAGES:
        in_missing_section = False
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            if line.startswith("#"):
                in_missing_section = "not implemented" in line.lower()
            if not (in_missing_section or re.search(r"not (yet )?implemented", line, re.I)):
                continue
            for m in re.finditer(r"inboxgen ([a-z][a-z-]*(?: +--[a-z-]+)*)", line):
                words = m.group(1).split()
                options = OPTION.findall(m.group(1))
                if words[0] in commands and all(o in commands[words[0]] for o in options):
                    wrong.append(f"{page.relative_to(REPO)}:{number}: {line.strip()}")
    assert wrong == []


def test_the_readme_says_which_commands_read_the_url_from_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INBOXGEN_DATABASE_URL", "postgresql://from-env/db")
    reading = set()
    for action in cli._parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if any("--database-url" in a.option_strings
                       and a.default == "postgresql://from-env/db" for a in sub._actions):
                    reading.add(name)
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    sentence = re.search(r"`inboxgen status`[^.]*\$INBOXGEN_DATABASE_URL", readme)
    assert sentence is not None
    claimed = set(re.findall(r"`(?:inboxgen )?([a-z]+)`", sentence.group(0)))
    assert claimed == reading == {"status", "requeue", "cancel", "prune", "pause", "resume",
                                  "dashboard"}


def test_the_testing_examples_run_as_written(tmp_path: Path) -> None:
    """The test files docs/runtime.md shows, in a project built from this repository's specs,
    pass under pytest (with pytest-asyncio, as the page says)."""
    runtime = (REPO / "docs" / "runtime.md").read_text(encoding="utf-8")
    section = runtime[runtime.index("## Testing\n"):runtime.index("## Hazards\n")]
    files = {}
    for m in FENCE.finditer(section):
        first, _, body = m.group(2).partition("\n")
        if m.group(1) == "python" and first.startswith("# tests/"):
            files[first.removeprefix("# ")] = body
    assert sorted(files) == ["tests/conftest.py", "tests/test_emails.py",
                             "tests/test_reports.py"]
    shutil.copytree(REPO / "specs", tmp_path / "specs")
    (tmp_path / "pyproject.toml").write_text(
        '[tool.inboxgen]\nspecs = "specs"\nout = "generated"\n', encoding="utf-8")
    for name, body in files.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(body, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "INBOXGEN"))}
    build = subprocess.run([sys.executable, "-m", "inboxgen", "build"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=120, check=False)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "tests"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "3 passed" in run.stdout


MODULE = r"(?:generated_examples|tests/generate/golden/\w+/expected)/\w+\.py"
SOURCE = re.compile(rf"From ((?:`{MODULE}`(?: and )?)+)[^\n]*\n(?:(?!```)[^\n]+\n)*"
                    r"\n```sql\n(.*?)^```", re.S | re.M)
# A statement's comment: "-- NAME: what it does", continued on further "-- " lines.
STATEMENT = re.compile(r"^-- ([A-Z_]+): [^\n]*\n(?:-- [^\n]*\n)*(.*?)(?=^-- [A-Z_]+: |\Z)",
                       re.S | re.M)


def _excerpts() -> list[tuple[str, list[str], str, str]]:
    """(where, modules, constant, SQL) for every statement a page quotes from a generated
    example: a ```sql block under a "From `generated_examples/....py`" line."""
    found = []
    for page in (REPO / "docs" / "generated.md", REPO / "docs" / "mysql.md",
                 REPO / "docs" / "flow.md"):
        text = page.read_text(encoding="utf-8")
        for m in SOURCE.finditer(text):
            modules = re.findall(MODULE, m.group(1))
            line = text.count("\n", 0, m.start()) + 1
            for s in STATEMENT.finditer(m.group(2)):
                found.append((f"{page.name}:{line}", modules, s.group(1), s.group(2).strip()))
    return found


def test_the_statements_the_docs_quote_are_the_generated_ones() -> None:
    excerpts = _excerpts()
    assert len(excerpts) >= 10
    wrong = [f"{where}: {name} is not what {', '.join(modules)} generate"
             for where, modules, name, sql in excerpts
             if not any(getattr(import_path(REPO / m, m.replace("/", "_")[:-3]), name,
                                "").strip() == sql for m in modules)]
    assert not wrong, "\n".join(wrong)


SETTINGS = """\
from psycopg.conninfo import conninfo_to_dict

_db = conninfo_to_dict({dsn!r})
INSTALLED_APPS = ["shop"]
DATABASES = {{"default": {{"ENGINE": "django.db.backends.postgresql", "NAME": _db["dbname"],
                           "USER": _db["user"], "HOST": _db["host"], "PORT": _db["port"]}}}}
USE_TZ = True
"""


def test_the_django_pages_migration_creates_the_table_its_spec_describes(
        pg_dsn: str, tmp_path: Path) -> None:
    """docs/django.md's task table: its SQL, the migration that creates it from that SQL and the
    spec, in a Django project: `manage.py migrate` makes the table, `inboxgen verify` finds it
    as the spec says, and the migration reverses."""
    page = (REPO / "docs" / "django.md").read_text(encoding="utf-8")
    files = {}
    for m in FENCE.finditer(page):
        first, _, body = m.group(2).partition("\n")
        named = re.fullmatch(r"(?:#|--) ([\w./-]+\.\w+)", first)
        if named:
            files[named.group(1)] = body
    assert sorted(files) == ["shop/migrations/0002_task_jobs.py", "shop/sql/tasks.sql",
                             "specs/tasks.toml"]
    for name, body in {**files, "shop/__init__.py": "", "shop/migrations/__init__.py": "",
                       "shop/migrations/0001_initial.py":
                           "from django.db import migrations\n\n\nclass Migration("
                           "migrations.Migration):\n    initial = True\n",
                       "settings.py": SETTINGS.format(dsn=pg_dsn),
                       "pyproject.toml": '[tool.inboxgen]\nout = "generated"\n'}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(body, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "INBOXGEN"))}
    env["DJANGO_SETTINGS_MODULE"] = "settings"

    def run(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, f"{args}: {done.stdout}{done.stderr}"
        return done.stdout

    run("django", "migrate", "shop")
    run("inboxgen", "build")
    assert "against PostgreSQL" in run("inboxgen", "verify", "--database-url", pg_dsn)
    run("django", "migrate", "shop", "0001")
    import psycopg

    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT to_regclass('task_jobs'), to_regclass('task_jobs_dead')"
                            ).fetchone() == (None, None)
