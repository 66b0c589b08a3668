"""Golden modules, one folder per case in the style of sqlc's endtoend testdata.

Each folder under tests/generate/golden/ holds:

    specs/<name>.toml        the specs (names unique across all cases: mypy checks them together)
    specs/...                their DDL
    expected/<name>.py       the module each spec must generate, byte for byte
    expected_stderr.txt      optional; the build's warnings, one line each

The case is copied to a temporary project and built there. The expected modules must pass
`mypy --strict` and ruff, and a row inserted and claimed through them on a real database must
hand back values of the types its ClaimedRow declares.

To rewrite the expected files from what inboxgen generates now, run with
INBOXGEN_UPDATE_GOLDEN=1, then review every change by eye (`git diff tests/generate/golden`).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import decimal
import inspect
import os
import shutil
import sqlite3
import subprocess
import sys
import types
import typing
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import asyncmy
import attrs
import psycopg
import pytest
from genutil import import_path

from inboxgen.generate.build import generate, write
from inboxgen.generate.config import Project
from inboxgen.runtime.backends.mysql import mysql_connect_args, open_session
from inboxgen.runtime.backends.mysql_async import asyncmy_args

GOLDEN = Path(__file__).parent / "golden"
CASE_NAMES = sorted(p.name for p in GOLDEN.iterdir() if (p / "specs").is_dir())
UPDATE = os.environ.get("INBOXGEN_UPDATE_GOLDEN") == "1"
REPO = Path(__file__).resolve().parents[2]
PROJECT_RULES = ["--config", str(REPO / "generated_examples" / "ruff.toml"),
                 "--extend-select", "RUF100"]
NOW = datetime.datetime.now(datetime.UTC).replace(microsecond=0)


def build_case(case: Path, root: Path) -> tuple[str, dict[str, str]]:
    """Build the case's specs in a project under root: (warnings and errors, module texts)."""
    shutil.copytree(case / "specs", root / "specs")
    project = Project(root, root / "specs", root / "generated")
    generated = generate(project, sorted((root / "specs").glob("*.toml")))
    stderr = "".join(d.format() + "\n" for d in generated.diagnostics)
    assert generated.ok, stderr
    write(generated)
    return stderr, {p.name: text for p, text in generated.outputs.items()}


@pytest.mark.parametrize("name", CASE_NAMES)
def test_golden_case(name: str, tmp_path: Path) -> None:
    case = GOLDEN / name
    stderr, modules = build_case(case, tmp_path)
    expected = case / "expected"
    if UPDATE:
        shutil.rmtree(expected, ignore_errors=True)
        expected.mkdir()
        for file, text in modules.items():
            (expected / file).write_text(text, encoding="utf-8", newline="\n")
        (case / "expected_stderr.txt").unlink(missing_ok=True)
        if stderr:
            (case / "expected_stderr.txt").write_text(stderr, encoding="utf-8")
    want_stderr = case / "expected_stderr.txt"
    assert stderr == (want_stderr.read_text(encoding="utf-8") if want_stderr.is_file() else "")
    assert sorted(modules) == sorted(p.name for p in expected.glob("*.py"))
    for file, text in modules.items():
        assert text == (expected / file).read_text(encoding="utf-8"), (
            f"{name}/expected/{file} differs from what its spec generates: rerun with "
            f"INBOXGEN_UPDATE_GOLDEN=1 and review the diff")


def _modules_in(root: Path) -> list[str]:
    """The expected modules, copied under root: inboxgen is a third-party import there, as in
    a user's project."""
    for name in CASE_NAMES:
        for path in (GOLDEN / name / "expected").glob("*.py"):
            shutil.copy2(path, root / path.name)
    return sorted(str(p) for p in root.glob("*.py"))


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)


def test_golden_modules_pass_mypy_strict(tmp_path: Path) -> None:
    result = _run([sys.executable, "-m", "mypy", "--strict", "--no-incremental",
                   *_modules_in(tmp_path)], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_golden_modules_pass_ruff(tmp_path: Path) -> None:
    modules = _modules_in(tmp_path)
    for rules in (PROJECT_RULES, ["--isolated"]):
        result = _run([sys.executable, "-m", "ruff", "check", "--no-cache", *rules, *modules],
                      tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr


# ---------------------------------------------------------------------------------------------
# The declared types against what the drivers hand back.


def _import(path: Path) -> types.ModuleType:
    return import_path(path, f"_inboxgen_golden_{abs(hash(str(path)))}_{path.stem}")


@pytest.fixture
def built(tmp_path: Path) -> Iterator[Any]:
    """A function building a golden case under tmp_path: its modules, by spec name."""

    def build(name: str) -> dict[str, types.ModuleType]:
        root = tmp_path / name
        build_case(GOLDEN / name, root)
        return {p.stem: _import(p) for p in sorted((root / "generated").glob("*.py"))}

    yield build


def _is(value: object, hint: Any) -> bool:
    """Whether value is of the annotated type (unions, None, object and aliases included)."""
    if hint is object or hint is Any:
        return True
    if hint is type(None) or hint is None:
        return value is None
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        return any(_is(value, arg) for arg in typing.get_args(hint))
    if origin is not None:
        return isinstance(value, origin)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True  # a recursive alias such as JSONValue: the payload's decoder checks it


def _hints(module: types.ModuleType, cls: type) -> dict[str, Any]:
    """A row class's attribute types, evaluated in its module."""
    return {f.name: eval(f.type, vars(module)) for f in attrs.fields(cls)}


def _sample(column: str, hint: Any, group: str | None, dialect: str) -> object:
    """A value a NewRow field of this type takes (the first non-None member of a union)."""
    if column == group:
        return "emails"
    if hint is object:  # JSON, or a type sqlite3 stores as given
        return {"k": 1} if dialect == "postgres" else '{"k": 1}'
    if typing.get_origin(hint) in (types.UnionType, typing.Union):
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if typing.get_origin(hint) is Mapping or hint is Mapping:
        return {"trace": "t-1"}
    samples: dict[Any, object] = {
        int: 7, str: "abc", bytes: b"\x00\x01\x02\x03", bool: True, float: 1.5,
        decimal.Decimal: decimal.Decimal("12.34"), datetime.datetime: NOW - datetime.timedelta(
            seconds=5), datetime.date: NOW.date(), datetime.time: datetime.time(12, 30),
        datetime.timedelta: datetime.timedelta(hours=12, minutes=30), uuid.UUID: uuid.uuid4(),
    }
    if hint is str and "uuid" in column:  # MariaDB's UUID as the driver hands it over
        return str(uuid.uuid4())
    if hint is str and "json" in column:  # MySQL's JSON as the driver hands it over
        return '{"k": 1}'
    if hint in samples:
        return samples[hint]
    return {"k": 1}  # JSON: a data column (object) or a payload (JSONValue)


def _new_row(module: types.ModuleType, given_id: object = None) -> Any:
    hints = _hints(module, module.NewRow)
    group = module.DESCRIPTOR.roles.get("group")
    values = {a: _sample(a, h, group, module.DESCRIPTOR.dialect) for a, h in hints.items()}
    ident = module.DESCRIPTOR.roles["id"]
    if ident in values:
        values[ident] = given_id if given_id is not None else values[ident]
    if module.DESCRIPTOR.dialect == "mysql" and isinstance(values.get(ident), str):
        values[ident] = str(uuid.uuid4())  # CHAR(36) and UUID ids alike
    return module.NewRow(**values)


async def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    result = fn(*args, **kwargs)
    return await result if inspect.isawaitable(result) else result


async def _claim(ops: Any, conn: Any) -> list[Any]:
    """Claim through the module as the runtime would: claim, or candidates (advisory)."""
    fn = ops.claim or ops.candidates
    wanted = inspect.signature(fn).parameters
    now = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=1)
    args = {k: v for k, v in {"group": "emails", "now": now, "limit": 10,
                              "locked_until": now + datetime.timedelta(seconds=30)}.items()
            if k in wanted}
    return list(await _call(fn, conn, **args))


async def _round_trip(module: types.ModuleType, conn: Any, commit: Any,
                      twins: bool = False) -> None:
    """Insert a row through the module (or its async twins), claim it back: every value is of
    its declared type."""
    hints = _hints(module, module.ClaimedRow)
    insert = module.insert_async if twins else module.insert
    ops = module.DESCRIPTOR.async_ops if twins else module.DESCRIPTOR.ops
    # The connection's annotation does not evaluate at run time (pymysql): the return's alone.
    returns = eval(inspect.signature(insert).return_annotation, vars(module))
    id_hint = hints[module.DESCRIPTOR.roles["id"]]
    given = uuid.uuid4() if id_hint is uuid.UUID else str(uuid.uuid4()) if id_hint is str else (
        42 if twins else 41)
    new = _new_row(module, given)
    new_id = await _call(insert, conn, new)
    assert _is(new_id, returns), f"insert() returned {new_id!r}, declared {returns}"
    await _call(commit)
    rows = await _claim(ops, conn)
    assert rows, f"{module.DESCRIPTOR.table}: nothing claimed"
    row = rows[-1] if new_id is None else next(
        r for r in rows if getattr(r, module.DESCRIPTOR.roles["id"]) == new_id)
    for attr, hint in hints.items():
        value = getattr(row, attr)
        assert _is(value, hint), (
            f"{module.DESCRIPTOR.table}.{attr}: the driver handed back {type(value).__name__} "
            f"{value!r}, but ClaimedRow declares {hint}")
    payload = module.DESCRIPTOR.roles.get("payload")
    if payload is not None and new_id is not None and module.DESCRIPTOR.codec == "json":
        assert module.decode_payload(getattr(row, payload)) == getattr(new, payload)
    await _call(commit)


def _check_round_trip(module: types.ModuleType, conn: Any, commit: Any) -> None:
    asyncio.run(_round_trip(module, conn, commit))


def _ddl(name: str) -> list[str]:
    text = (GOLDEN / name / "specs" / "types.sql").read_text(encoding="utf-8")
    return [s for s in text.split(";") if s.strip()]


def test_postgres_values_have_the_declared_types(pg_dsn: str, built: Any) -> None:
    modules = built("postgres_types")
    with psycopg.connect(pg_dsn) as conn:
        for statement in _ddl("postgres_types"):
            conn.execute(statement)  # type: ignore[call-overload]
        conn.commit()
        for module in modules.values():
            _check_round_trip(module, conn, conn.commit)


def test_mysql_values_have_the_declared_types(mysql_url: str, built: Any) -> None:
    modules = built("mysql_types")
    conn = open_session(mysql_connect_args(mysql_url))
    with contextlib.closing(conn):
        with conn.cursor() as cur:
            for statement in _ddl("mysql_types"):
                cur.execute(statement)
        conn.commit()
        for module in modules.values():
            _check_round_trip(module, conn, conn.commit)

    async def on_asyncmy() -> None:
        args = asyncmy_args(mysql_connect_args(mysql_url))
        assert args is not None
        conn = await asyncmy.connect(**args, autocommit=False)
        try:
            async with conn.cursor() as cur:
                await cur.execute("SET SESSION time_zone = '+00:00'")
            for module in modules.values():
                await _round_trip(module, conn, conn.commit, twins=True)
        finally:
            conn.close()

    asyncio.run(on_asyncmy())


def test_sqlite_values_have_the_declared_types(sqlite_path: Path, built: Any) -> None:
    modules = built("sqlite_types")
    with contextlib.closing(sqlite3.connect(sqlite_path)) as conn:
        conn.executescript((GOLDEN / "sqlite_types" / "specs" / "types.sql").read_text())
        for module in modules.values():
            _check_round_trip(module, conn, conn.commit)



# ---------------------------------------------------------------------------------------------
# The enqueue functions of a module take the same options.

ENQUEUE = ("insert", "insert_unique", "insert_many")


def _options(fn: Any) -> dict[str, Any]:
    """A function's keyword-only options, with their defaults."""
    return {n: p.default for n, p in inspect.signature(fn).parameters.items()
            if p.kind is inspect.Parameter.KEYWORD_ONLY}


@pytest.mark.parametrize("name", CASE_NAMES)
def test_every_enqueue_function_takes_the_same_options(name: str, built: Any) -> None:
    for module in built(name).values():
        found = {f"{fn}{twin}": _options(getattr(module, f"{fn}{twin}"))
                 for fn in ENQUEUE for twin in ("", "_async")
                 if hasattr(module, f"{fn}{twin}")}
        assert "insert_unique" in found or not module.DESCRIPTOR.statements.get("INSERT_UNIQUE")
        want = {"notify": False} if module.DESCRIPTOR.dialect == "postgres" else {}
        assert found == dict.fromkeys(found, want), module.DESCRIPTOR.table


def _notified(listener: psycopg.Connection[Any], timeout: float) -> list[tuple[str, str]]:
    return [(n.channel, n.payload) for n in listener.notifies(timeout=timeout, stop_after=9)]


@pytest.mark.parametrize("twins", [False, True], ids=["sync", "async"])
def test_every_postgres_enqueue_function_notifies_on_commit(pg_dsn: str, built: Any,
                                                            twins: bool) -> None:
    modules = built("postgres_types")
    jobs, uuid_jobs = modules["pg_given_uuid_jobs"], modules["pg_uuid_jobs"]

    def row(module: types.ModuleType, group: str) -> Any:
        new = _new_row(module, uuid.uuid4())
        return attrs.evolve(new, queue=group)

    calls = [  # (module, function, argument, the groups it wakes)
        (jobs, "insert", row(jobs, "mail"), ["mail"]),
        (jobs, "insert_unique", row(jobs, "sms"), ["sms"]),
        (uuid_jobs, "insert_many", [row(uuid_jobs, "b"), row(uuid_jobs, "a"),
                                    row(uuid_jobs, "b")], ["a", "b"]),
    ]
    with psycopg.connect(pg_dsn) as conn:
        for statement in _ddl("postgres_types"):
            conn.execute(statement)  # type: ignore[call-overload]
        conn.commit()

    async def enqueue(module: types.ModuleType, fn: str, arg: Any, notify: bool) -> Any:
        if twins:
            async with await psycopg.AsyncConnection.connect(pg_dsn) as aconn:
                result = await getattr(module, f"{fn}_async")(aconn, arg, notify=notify)
                await aconn.commit()
                return result
        with psycopg.connect(pg_dsn) as conn:
            result = getattr(module, fn)(conn, arg, notify=notify)
            assert _notified(listener, 0.1) == []  # nothing before the commit
            conn.commit()
            return result

    with psycopg.connect(pg_dsn, autocommit=True) as listener:
        listener.execute('LISTEN "pg_given_uuid_jobs"; LISTEN "pg_uuid_jobs"')
        for module, fn, arg, groups in calls:
            asyncio.run(enqueue(module, fn, arg, notify=True))
            channel = module.CHANNEL
            assert sorted(_notified(listener, 1)) == [(channel, g) for g in groups], fn
            again = arg[:1] if fn == "insert_many" else attrs.evolve(arg, id=uuid.uuid4())
            asyncio.run(enqueue(module, fn, again, notify=False))
            assert _notified(listener, 0.2) == [], f"{fn}(notify=False) notified"
        # A duplicate is not enqueued, so nobody is woken.
        _, _, first, _ = calls[1]
        assert asyncio.run(enqueue(jobs, "insert_unique", first, notify=True)) is False
        assert _notified(listener, 0.3) == []
