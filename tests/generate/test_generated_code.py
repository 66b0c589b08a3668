"""Generated modules as a user's tooling sees them: `ruff check` with ruff's own defaults and with
the project's rules (line length, isort, stale `noqa`), `mypy --strict`, on the longest names a
server allows, for every dialect and claim form; and the calls the docs show, type-checked as a
user writes them."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from inboxgen.generate.build import generate, write
from inboxgen.generate.config import Project

REPO = Path(__file__).resolve().parents[2]
# The project's lint rules for generated code (line length 100, isort, pyupgrade, bugbear),
# with RUF100: a `noqa` that silences nothing is a stale one.
# The payload type's module is the user's own: first-party, as it is in their project.
PROJECT_RULES = ["--config", str(REPO / "generated_examples" / "ruff.toml"),
                 "--config", "lint.isort.known-first-party = ['payloads']",
                 "--extend-select", "RUF100"]


def name(role: str, size: int) -> str:
    """A name of exactly `size` characters that starts with the role."""
    return (role + "_" + "x" * size)[:size]


def long_names_case(dialect: str, form: str) -> tuple[str, str]:
    """A spec and DDL whose every identifier is as long as the server allows."""
    size = 64 if dialect == "mysql" else 63
    n = {r: name(r, size) for r in ("id", "group", "priority", "retry_after", "attempt",
                                    "processed_at", "locked_until", "headers", "payload",
                                    "table", "dead", "index", "unique", "schema")}
    pg, my = dialect == "postgres", dialect == "mysql"
    q = (lambda s: f"`{s}`") if my else (lambda s: f'"{s}"')
    time = "TIMESTAMPTZ" if pg else "DATETIME(6)" if my else "TEXT"
    text = "VARCHAR(191)" if my else "TEXT"
    table = f"{q(n['schema'])}.{q(n['table'])}" if pg else q(n["table"])
    dead = f"{q(n['schema'])}.{q(n['dead'])}" if pg else q(n["dead"])
    ident = ("BIGSERIAL PRIMARY KEY" if pg else "BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY"
             if my else "INTEGER PRIMARY KEY")
    cols = [(n["id"], ident), (n["group"], f"{text} NOT NULL"),
            (n["priority"], "INTEGER NOT NULL DEFAULT 0"),
            (n["retry_after"], f"{time} NOT NULL"),
            (n["attempt"], "INTEGER NOT NULL DEFAULT 0"), (n["processed_at"], time),
            (n["unique"], f"{text} NOT NULL")]
    if form == "lease":
        cols.append((n["locked_until"], "DATETIME" if my else time))
    cols += [(n["headers"], "JSON" if my else "JSONB" if pg else "TEXT"),
             (n["payload"], "JSON" if my else "JSONB" if pg else "TEXT")]
    body = ",\n".join(f"    {q(c)} {t}" for c, t in cols)
    dead_body = body.replace(ident, "BIGINT PRIMARY KEY")
    order = ", ".join(q(n[r]) for r in ("group", "priority", "retry_after", "id"))
    ddl = "\n".join([
        f"CREATE SCHEMA {q(n['schema'])};" if pg else "",
        f"CREATE TABLE {table} (\n{body}\n);",
        f"CREATE INDEX {q(n['index'])} ON {table} ({order});",
        f"CREATE UNIQUE INDEX {q(name('once', size))} ON {table} ({q(n['unique'])});",
        f"CREATE TABLE {dead} (\n{dead_body}\n);",
    ])
    qualified = f"{n['schema']}.{n['table']}" if pg else n["table"]
    roles = ["id", "group", "priority", "retry_after", "attempt", "processed_at", "headers",
             "payload"] + (["locked_until"] if form == "lease" else [])
    lines = [f'table = "{qualified}"', f'dialect = "{dialect}"', f'unique = ["{n["unique"]}"]']
    if form == "advisory":
        lines += ['claim = "advisory"', f'advisory_key = "jobs-{{{n["unique"]}}}"']
    if form != "advisory":
        lines.append("fifo = true")
    lines += ["", "[columns]"]
    for role in roles:
        extra = ", generated = true" if role in ("id", "attempt") else ""
        extra += ', codec = "json", type = "payloads:Order"' if role == "payload" else ""
        lines.append(f'{n[role]} = {{ role = "{role}"{extra} }}')
    dead_table = f"{n['schema']}.{n['dead']}" if pg else n["dead"]
    lines += ["", "[runtime]", "max_attempts = 3", "", "[dead_letter]",
              f'table = "{dead_table}"']
    return "\n".join(lines) + "\n", ddl


CASES = [("postgres", "row_lock"), ("postgres", "lease"), ("postgres", "advisory"),
         ("mysql", "row_lock"), ("mysql", "lease"), ("mysql", "advisory"),
         ("sqlite", "lease"), ("sqlite", "advisory")]
PAYLOADS = "import msgspec\n\n\nclass Order(msgspec.Struct):\n    id: int\n"


def built(root: Path, specs: dict[str, tuple[str, str]]) -> list[Path]:
    """Build each spec (name -> (spec, ddl)) in a project under root; returns the modules."""
    (root / "specs").mkdir(parents=True)
    for stem, (spec, ddl) in specs.items():
        (root / "specs" / f"{stem}.sql").write_text(ddl, encoding="utf-8")
        (root / "specs" / f"{stem}.toml").write_text(f'ddl = "{stem}.sql"\n' + spec,
                                                     encoding="utf-8")
    (root / "payloads.py").write_text(PAYLOADS, encoding="utf-8")
    project = Project(root, root / "specs", root / "generated")
    generated = generate(project, sorted((root / "specs").glob("*.toml")))
    errors = [d.format() for d in generated.diagnostics if d.severity == "error"]
    assert generated.ok, errors
    (root / "generated" / "__init__.py").parent.mkdir(parents=True, exist_ok=True)
    return [path for path, _ in write(generated)]


def run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False,
                          env={**os.environ, "MYPYPATH": str(cwd)})


@pytest.fixture(scope="module")
def long_modules(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    root = tmp_path_factory.mktemp("long_names")
    specs = {f"{d}_{f}": long_names_case(d, f) for d, f in CASES}
    # And the smallest table: nothing for NewRow to hold.
    specs["bare"] = ('table = "bare"\ndialect = "sqlite"\n\n[columns]\n'
                     'id = { role = "id", generated = true }\nlocked_until = "locked_until"\n',
                     "CREATE TABLE bare (id INTEGER PRIMARY KEY, locked_until TEXT);\n")
    # Names holding quotes, apostrophes and non-ASCII letters (first letter included).
    specs["odd_names"] = (
        'table = "Jobs \\"Q\\""\ndialect = "postgres"\n\n[columns]\n'
        '"Über Id" = { role = "id", generated = true }\n"Lane \\"Q\\"" = "group"\n'
        '"Lease\'s End" = "locked_until"\n"Übermeta" = "headers"\n'
        '"Body\'s" = { role = "payload", codec = "text" }\n',
        'CREATE TABLE "Jobs ""Q""" (\n    "Über Id" BIGSERIAL PRIMARY KEY,\n'
        '    "Lane ""Q""" TEXT NOT NULL,\n    "Lease\'s End" TIMESTAMPTZ,\n'
        '    "Übermeta" JSONB,\n    "Body\'s" TEXT NOT NULL\n);\n')
    return root, built(root, specs)


def test_long_names_pass_ruff_with_the_project_rules_and_no_stale_noqa(
        long_modules: tuple[Path, list[Path]]) -> None:
    root, modules = long_modules
    result = run([sys.executable, "-m", "ruff", "check", "--no-cache", *PROJECT_RULES,
                  *map(str, modules)], root)
    assert result.returncode == 0, result.stdout + result.stderr


def test_long_names_pass_ruff_with_its_defaults(long_modules: tuple[Path, list[Path]]) -> None:
    root, modules = long_modules
    result = run([sys.executable, "-m", "ruff", "check", "--no-cache", "--isolated",
                  *map(str, modules)], root)
    assert result.returncode == 0, result.stdout + result.stderr


def test_long_names_pass_mypy_strict(long_modules: tuple[Path, list[Path]]) -> None:
    root, modules = long_modules
    result = run([sys.executable, "-m", "mypy", "--strict", "--no-incremental",
                  *map(str, modules)], root)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_table_with_nothing_to_enqueue_has_no_needless_pass(
        long_modules: tuple[Path, list[Path]]) -> None:
    root, modules = long_modules
    bare = next(p for p in modules if p.stem == "bare")
    text = bare.read_text(encoding="utf-8")
    assert "    pass\n" not in text
    result = run([sys.executable, "-m", "ruff", "check", "--no-cache", "--isolated",
                  "--select", "PIE790", str(bare)], root)
    assert result.returncode == 0, result.stdout


# -- the calls the docs show, as a user writes them ------------------------------------------------

USER_CODE = {
    "reports": """
        import datetime
        import sqlite3

        from generated_examples import reports


        def render(conn: sqlite3.Connection, now: datetime.datetime) -> int:
            job_id: int = reports.insert(conn, reports.NewRow(payload=b"report 7"))
            for row in reports.claim(conn, now=now,
                                     locked_until=now + datetime.timedelta(seconds=60)):
                reports.renew(conn, id=row.id, locked_until=row.locked_until,
                              attempt=row.attempt,
                              new_locked_until=row.locked_until + datetime.timedelta(seconds=60))
                reports.finish(conn, id=row.id, locked_until=row.locked_until,
                               attempt=row.attempt)
            return job_id
    """,
    "chat": """
        import datetime

        import psycopg

        from generated_examples import chat


        def serve(conn: psycopg.Connection[object], now: datetime.datetime) -> None:
            row = chat.fifo_claim(conn, group="room-1", now=now,
                                  locked_until=now + datetime.timedelta(seconds=30))
            if row is not None:
                chat.finish(conn, id=row.MessageId, locked_until=row.locked_until,
                            attempt=row.attempt)
    """,
}


@pytest.mark.parametrize("example", sorted(USER_CODE))
def test_settle_calls_as_the_docs_show_them_pass_mypy_strict(example: str,
                                                             tmp_path: Path) -> None:
    user = tmp_path / "user_code.py"
    user.write_text(textwrap.dedent(USER_CODE[example]).lstrip(), encoding="utf-8")
    result = run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(user)], REPO)
    assert result.returncode == 0, result.stdout + result.stderr


# -- the wrapped statements run ------------------------------------------------------------------

RUN_CASES = [("postgres", "lease"), ("postgres", "row_lock"), ("mysql", "lease"),
             ("sqlite", "advisory")]


@pytest.mark.parametrize(("dialect", "form"), RUN_CASES)
def test_statements_of_long_names_run_as_wrapped(request: pytest.FixtureRequest,
                                                 long_modules: tuple[Path, list[Path]],
                                                 tmp_path: Path, dialect: str, form: str) -> None:
    """A qualified name broken before its dot, lists and conditions broken between words: the
    servers read them as written (insert, claim, finish)."""
    import datetime as dt
    import importlib.util

    from dbcases import Queue, apply_ddl, call

    root, modules = long_modules
    path = next(p for p in modules if p.stem == f"{dialect}_{form}")
    sys.path.insert(0, str(root))  # the payload type's module
    try:
        loader = importlib.util.spec_from_file_location(f"_long_{path.stem}", path)
        assert loader is not None and loader.loader is not None
        mod = importlib.util.module_from_spec(loader)
        loader.loader.exec_module(mod)
        payloads = importlib.import_module("payloads")
    finally:
        sys.path.remove(str(root))
    if dialect == "postgres":
        target: str = request.getfixturevalue("pg_dsn")
    elif dialect == "mysql":
        target = request.getfixturevalue("mariadb_server").create_database()
    else:
        target = str(tmp_path / "long.sqlite3")
    ddl = (root / "specs" / f"{path.stem}.sql").read_text(encoding="utf-8")
    apply_ddl(dialect, target, ddl)
    q = Queue(mod, dialect, target)
    try:
        conn = q.connect()
        attrs_of = mod.DESCRIPTOR.role_attrs
        now = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
        values = {attrs_of["group"]: "g", attrs_of["retry_after"]: now,
                  attrs_of["payload"]: payloads.Order(id=7), attrs_of["headers"]: {"h": "1"},
                  name("unique", 64 if dialect == "mysql" else 63): "u1"}
        new_id = mod.insert(conn, mod.NewRow(**values))
        conn.commit()
        (row,) = q.claim(conn, now=now, group="g")
        if form != "row_lock":
            conn.commit()
        assert getattr(row, attrs_of["id"]) == new_id
        assert mod.decode_payload(getattr(row, attrs_of["payload"])) == payloads.Order(id=7)
        assert call(mod.finish, conn, id=new_id, now=now, **{
            k: getattr(row, attrs_of[k]) for k in ("locked_until", "attempt")
            if k in attrs_of and form == "lease"})
        conn.commit()
        q.release(conn, row)
    finally:
        q.close()
