"""`inboxgen build` never crashes: every input gets exit 0, 1 or 2 and one located line per finding.

The fuzzer starts from the example specs (specs/*.toml) and their migrations (specs/migrations/)
and mutates them: lines deleted, duplicated and swapped, files truncated, binary junk, deep
nesting, huge identifiers, random TOML values, fragments of other inputs, and changes to the
migration folder's layout (upper-case names, one folder per migration, symlink loops). Each
example is built in-process in a fresh project, then checked:

- nothing escapes `inboxgen.cli.main`, and the exit code is 0, 1 or 2;
- stderr holds no traceback and no "internal error" (the last-resort guard in `main` turns a
  crash into such a line: the fuzzer fails on it, so that crashes get fixed, not hidden);
- every stderr line starts with a path of the project and a line number (`path:line: `), or
  is an `inboxgen:` summary line;
- a failed build writes nothing; a clean one writes a module that compiles, and `verify` then
  finds it up to date.

CI runs a fixed, derandomized budget. A longer local run finds more:

    export INBOXGEN_FUZZ_EXAMPLES=20000 INBOXGEN_FUZZ_SEED=1
    python3 -m pytest -q tests/generate/test_fuzz.py

(INBOXGEN_FUZZ_MUTATIONS, default 4, sets how many mutations an example may stack.)

Every crash found is kept: as an `@example` on `test_build_survives_mutations`, as a folder in
tests/generate/cases/, or as one of the tests at the end of this file.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import io
import json
import os
import re
import shutil
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, seed, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

from inboxgen.cli import main

REPO = Path(__file__).resolve().parents[2]
SPECS = REPO / "specs"
PYPROJECT = '[tool.inboxgen]\nspecs = "specs"\nout = "generated"\n'

EXAMPLES = int(os.environ.get("INBOXGEN_FUZZ_EXAMPLES", "300"))
# Nothing of Hypothesis's is written into the repository: no example database (database=None
# below) and its caches and patch files in a temporary folder.
_HOME = tempfile.mkdtemp(prefix="inboxgen-hypothesis-")
atexit.register(shutil.rmtree, _HOME, ignore_errors=True)
set_hypothesis_home_dir(_HOME)
SEED = os.environ.get("INBOXGEN_FUZZ_SEED")
MUTATIONS = int(os.environ.get("INBOXGEN_FUZZ_MUTATIONS", "4"))  # at most, per example
SLOW = 30.0  # seconds; a build this slow is a hang, not a slow machine

# ---------------------------------------------------------------------------------------------
# Running inboxgen in-process


def run_main(root: Path, *argv: str) -> tuple[int, str, str]:
    """`inboxgen ARGV` in `root`; (exit code, stdout, stderr). Any exception fails the test."""
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    os.chdir(root)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(argv))
    except BaseException as exc:  # SystemExit included: main returns its exit code
        raise AssertionError(f"inboxgen {' '.join(argv)} raised {type(exc).__name__}: {exc}\n"
                             f"stderr:\n{err.getvalue()[-2000:]}") from exc
    finally:
        os.chdir(here)
    return code, out.getvalue(), err.getvalue()


_LOCATED = re.compile(r"(?P<path>[^:\s][^:]*):(?P<line>\d+): ")


def check_build(root: Path, specs: list[str]) -> tuple[int, str]:
    """Build `root` and check everything a build must do; returns (exit code, stderr)."""
    started = time.monotonic()
    code, stdout, stderr = run_main(root, "build")
    elapsed = time.monotonic() - started
    assert elapsed < SLOW, f"build took {elapsed:.1f} s"
    assert code in (0, 1, 2), (code, stderr)
    assert "Traceback" not in stderr + stdout, stderr
    assert "internal error" not in stderr, stderr
    for line in stderr.splitlines():
        if line.startswith("inboxgen: "):
            continue
        m = _LOCATED.match(line)
        assert m, f"an error line without file and line: {line[:300]!r}"
        path = m.group("path")
        assert not os.path.isabs(path), f"not relative to the project: {line[:300]!r}"
        assert os.path.lexists(root / path), f"names no file of the project: {line[:300]!r}"
        assert int(m.group("line")) >= 1, line[:300]
    generated = root / "generated"
    if code != 0:
        assert not generated.exists(), f"a failed build wrote {sorted(generated.rglob('*'))}"
        assert stdout == ""
        return code, stderr
    for name in specs:
        module = generated / f"{name}.py"
        assert module.is_file(), f"clean build did not write {module.name}: {stdout}"
        compile(module.read_text(encoding="utf-8"), str(module), "exec")
    code, _, verify_err = run_main(root, "verify")
    assert code == 0, f"verify right after build: {verify_err[:2000]}"
    return 0, stderr


@contextlib.contextmanager
def project() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="inboxgen-fuzz-") as tmp:
        root = Path(tmp)
        (root / "pyproject.toml").write_text(PYPROJECT, encoding="utf-8")
        (root / "specs").mkdir()
        try:
            yield root
        finally:  # what a mutation made unreadable must still be removable
            for p in root.rglob("*"):
                if not p.is_symlink():
                    with contextlib.suppress(OSError):
                        p.chmod(0o700)


# ---------------------------------------------------------------------------------------------
# Seeds: the example specs and their migrations


def _seed_specs() -> dict[str, tuple[bytes, str]]:
    """spec name -> (spec text, the migration folder it reads, relative to specs/)."""
    found: dict[str, tuple[bytes, str]] = {}
    for path in sorted(SPECS.glob("*.toml")):
        raw = path.read_bytes()
        ddl = tomllib.loads(raw.decode("utf-8"))["ddl"]
        first = ddl if isinstance(ddl, str) else ddl[0]
        folder = first if (SPECS / first).is_dir() else str(Path(first).parent)
        found[path.stem] = (raw, folder)
    return found


SEED_SPECS = _seed_specs()
SEED_FILES = [p for p in sorted((SPECS / "migrations").rglob("*")) if p.is_file()]
SEED_LINES = sorted({line for p in [*SPECS.glob("*.toml"), *SEED_FILES]
                     for line in p.read_bytes().split(b"\n") if line.strip()})

SQL_FRAGMENTS = [
    b"CREATE TABLE p PARTITION OF {t}", b"CREATE TABLE p PARTITION OF {t} DEFAULT",
    b"CREATE TABLE {t} (LIKE {t} INCLUDING ALL)", b"CREATE TABLE {t} LIKE {t}",
    b"CREATE TABLE {t} AS SELECT 1", b"DROP TABLE {t}", b"ALTER TABLE {t} RENAME TO {t}2",
    b"ALTER TABLE {t} RENAME COLUMN id TO id", b"ALTER TABLE {t} DROP COLUMN payload",
    b"ALTER TABLE {t} ALTER COLUMN id TYPE text", b"ALTER TABLE {t} ALTER COLUMN id DROP NOT NULL",
    b"ALTER TABLE {t} ADD COLUMN IF NOT EXISTS id INT", b"ALTER TABLE {t} MODIFY COLUMN id INT",
    b"ALTER TABLE {t} CHANGE COLUMN id id2 INT", b"ALTER TABLE {t} ADD CONSTRAINT c UNIQUE (id)",
    b"ALTER TABLE {t} ADD PRIMARY KEY (nope)", b"CREATE UNIQUE INDEX ON {t} (lower(id))",
    b"CREATE INDEX i ON {t} (id) WHERE id > 0", b"DROP INDEX i", b"CREATE INDEX ON {t} ()",
    b"ALTER TABLE {t} ADD COLUMN id INT GENERATED ALWAYS AS IDENTITY",
    b"ALTER TABLE {t} ADD COLUMN c INT GENERATED ALWAYS AS (id + 1) STORED",
    b"COMMENT ON TABLE {t} IS 'x'", b"GRANT ALL ON {t} TO x", b"DO $$ BEGIN END $$",
    b"CREATE FUNCTION f() RETURNS int AS $x$ SELECT 1 $x$ LANGUAGE sql", b"$$", b"$x$", b"'",
    b'"', b"`", b"/*", b"*/", b"--", b"-- +goose Down", b"-- +goose Up", b"-- migrate:down",
    b"---- create above / drop below ----", b";", b";;", b"(", b")", b",", b"::", b"\\",
    b"E'\\", b"x'", b"[", b"{", b"\x00", b"\r", b"\r\n", b"\x0b", b"\x0c", b"\xef\xbb\xbf",
    "\u2028".encode(), b"\xff\xfe", b"\xc3", b"\xed\xa0\x80",
]
TOML_FRAGMENTS = [
    b"[columns]", b"[[columns]]", b"[runtime]", b"[dead_letter]", b"[columns.id]", b'"""',
    b"'''", b"ddl = []", b'ddl = ""', b'ddl = "."', b'ddl = "/"', b'ddl = "/dev/null"',
    b'ddl = "migrations"', b'ddl = ["migrations", "migrations"]', b'table = ""',
    b'table = "a.b.c"', b'table = "."', b'reviewed = ["x:1"]', b'reviewed = ["x:99999999999"]',
    b"unique = [[]]", b"fifo = true", b"count_crashes = true", b'claim = "advisory"',
    b'advisory_key = "{id}{id}"', b'advisory_key = "{"', b'server_version = "1.2.3.4.5"',
    b"x = 1e400", b"x = 0x" + b"f" * 40, b"x = 1979-05-27T07:32:00Z", b"x = 07:32:00",
    b"x = inf", b"x = nan", b"x = -0", b"a.b.c = 1", b'"" = 1', b"columns = 1", b"runtime = []",
]
VALUES = [
    b'"postgres"', b'"mysql"', b'"sqlite"', b'"row_lock"', b'"lease"', b'"advisory"',
    b'"id"', b'"group"', b'"priority"', b'"retry_after"', b'"attempt"', b'"processed_at"',
    b'"locked_until"', b'"headers"', b'"payload"', b'"json"', b'"bytes"', b'"text"',
    b'"a.b:C"', b'{ role = "payload", codec = "json", type = "a.b:C" }',
    b'{ role = "id", generated = true }', b'{ role = "attempt", generated = 1 }', b"true",
    b"false", b"0", b"-1", b"1", b"1.5", b"99999999999999999999999", b'"9.4"', b'"8.0.1"',
    b'"10.5"', b'"3.31"', b'"11"', b'"jobs-{id}"', b"[]", b'["x"]', b"{}", b'""', b'"\\u0000"',
    b'"a\\nb"', b'"\\u2028"', b'"migrations/shop"', b'["migrations/chat/0001_chat.sql"]',
]
NESTS = [(b"(", b")"), (b"[", b"]"), (b"{ a = ", b" }"), (b"NOT ", b""), (b"- ", b""),
         (b"CASE WHEN 1 THEN ", b" END"), (b"ARRAY[", b"]"), (b"(SELECT ", b")"),
         (b"x = [", b"]"), (b"/*", b"*/")]
DEPTHS = [5, 40, 60, 200, 1000, 3000]
SIZES = [63, 64, 65, 255, 256, 5000, 100_000]
HUGE_CHARS = [b"x", "\u00e9".encode(), "\u65e5".encode(), b"9", b"_", b" ", b"$", b","]
_WORD = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
WORDS = sorted({m.group() for line in SEED_LINES for m in _WORD.finditer(line)} | {
    b"INT", b"TEXT", b"BYTEA", b"JSONB", b"TIMESTAMPTZ", b"DATETIME", b"BLOB", b"SERIAL",
    b"NULL", b"NOT", b"DEFAULT", b"PRIMARY", b"UNIQUE", b"KEY", b"INDEX", b"IF", b"EXISTS",
    b"LIKE", b"PARTITION", b"OF", b"GENERATED", b"ALWAYS", b"IDENTITY", b"AUTO_INCREMENT",
    b"UNSIGNED", b"INTEGER", b"AUTOINCREMENT", b"CHECK", b"CONSTRAINT", b"COLLATE", b"ARRAY"})

TEXT_OPS = ["delete", "duplicate", "swap", "truncate", "insert", "insert_line",
            "replace_value", "nest", "huge", "byte", "word", "word", "word"]
FS_OPS = ["upper_sql", "into_folder", "sql_folder", "self_loop", "dir_loop", "dangling",
          "down_file", "empty_file", "second_spec", "folder_is_file", "unreadable"]


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return {"inf": "inf", "-inf": "-inf", "nan": "nan"}.get(repr(value), repr(value))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return "{ " + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + " }"


toml_values = st.recursive(
    st.none().map(lambda _: "")  # a key with no value at all
    | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                 max_size=3),
    max_leaves=8,
).map(lambda v: _toml(v).encode("utf-8", "surrogatepass"))

payloads = st.one_of(
    st.sampled_from(SQL_FRAGMENTS + TOML_FRAGMENTS + VALUES),
    st.sampled_from(SEED_LINES),
    st.binary(min_size=1, max_size=40),
    st.text(min_size=1, max_size=20).map(lambda s: s.encode("utf-8", "surrogatepass")),
    toml_values,
)
mutations = st.tuples(
    st.sampled_from(["spec", "migration", "fs"]),
    st.sampled_from(TEXT_OPS + FS_OPS),
    st.integers(0, 1 << 16), st.integers(0, 1 << 16), payloads,
)


def mutate_text(content: bytes, op: str, a: int, b: int, payload: bytes, table: bytes) -> bytes:
    lines = content.split(b"\n")
    n = len(lines)
    payload = payload.replace(b"{t}", table)
    if op == "delete":
        del lines[a % n:a % n + 1 + b % 3]
    elif op == "duplicate":
        lines.insert(b % (n + 1), lines[a % n])
    elif op == "swap":
        i, j = a % n, b % n
        lines[i], lines[j] = lines[j], lines[i]
    elif op == "truncate":
        return content[:a % (len(content) + 1)]
    elif op == "insert":
        pos = a % (len(content) + 1)
        return content[:pos] + payload + content[pos:]
    elif op == "insert_line":
        lines.insert(a % (n + 1), payload)
    elif op == "replace_value":
        keyed = [i for i, line in enumerate(lines) if b"=" in line]
        if keyed:
            i = keyed[a % len(keyed)]
            lines[i] = lines[i].split(b"=", 1)[0] + b"= " + payload
    elif op == "nest":
        opening, closing = NESTS[(b // len(DEPTHS)) % len(NESTS)]
        depth = DEPTHS[b % len(DEPTHS)]
        pos = a % (len(content) + 1)
        return content[:pos] + opening * depth + b"1" + closing * depth + content[pos:]
    elif op == "huge":
        words = list(_WORD.finditer(content))
        if words:
            w = words[a % len(words)]
            char = HUGE_CHARS[(b // len(SIZES)) % len(HUGE_CHARS)]
            return content[:w.start()] + char * SIZES[b % len(SIZES)] + content[w.end():]
    elif op == "word":
        words = list(_WORD.finditer(content))
        if words:
            w = words[a % len(words)]
            return content[:w.start()] + WORDS[b % len(WORDS)] + content[w.end():]
    elif op == "byte" and content:
        pos = a % len(content)
        return content[:pos] + bytes([b % 256]) + content[pos + 1:]
    return b"\n".join(lines)


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def mutate_layout(root: Path, spec: str, folder: Path, op: str, a: int) -> None:
    if op == "second_spec":
        shutil.copy(root / "specs" / f"{spec}.toml", root / "specs" / f"{spec}_again.toml")
    if not folder.is_dir():  # an earlier mutation made it a file
        return
    files = _files(folder) or [folder / "0001_x.sql"]
    victim = files[a % len(files)]
    if op == "upper_sql" and victim.exists():
        victim.rename(victim.with_suffix(".SQL"))
    elif op == "into_folder" and victim.exists():
        target = folder / victim.stem / "migration.sql"
        target.parent.mkdir(parents=True, exist_ok=True)
        victim.rename(target)
    elif op == "sql_folder":
        (folder / f"{a % 7}_folder.sql").mkdir(exist_ok=True)
        (folder / f"{a % 7}_folder.sql" / "up.sql").write_bytes(b"SELECT 1;\n")
    elif op == "self_loop":
        with contextlib.suppress(OSError):
            (folder / "9999_loop.sql").symlink_to("9999_loop.sql")
    elif op == "dir_loop":
        with contextlib.suppress(OSError):
            (folder / f"{a % 5}_again").symlink_to(".")
    elif op == "dangling":
        with contextlib.suppress(OSError):
            (folder / f"{a % 9}_gone.sql").symlink_to("nowhere/at/all.sql")
    elif op == "down_file":
        (folder / f"{a % 9}_x.down.sql").write_bytes(b"DROP TABLE everything;\n")
    elif op == "empty_file":
        (folder / f"{a % 9}_empty.sql").write_bytes(b"")
    elif op == "folder_is_file" and not folder.is_symlink():
        shutil.rmtree(folder)
        folder.write_bytes(b"CREATE TABLE t (id INT);\n")
    elif op == "unreadable" and victim.exists():
        victim.chmod(0)


def apply(root: Path, spec: str, muts: list[tuple[str, str, int, int, bytes]]) -> list[str]:
    """Write the seed project for `spec`, apply `muts`; returns the names of the specs."""
    raw, ddl_folder = SEED_SPECS[spec]
    shutil.copytree(SPECS / "migrations", root / "specs" / "migrations")
    spec_path = root / "specs" / f"{spec}.toml"
    spec_path.write_bytes(raw)
    folder = root / "specs" / ddl_folder
    table = tomllib.loads(raw.decode("utf-8"))["table"].encode()
    for target, op, a, b, payload in muts:
        if op in FS_OPS:
            mutate_layout(root, spec, folder, op, a)
            continue
        if target == "spec":
            path = spec_path
        else:
            files = _files(folder) if folder.is_dir() else [folder]
            path = files[b % len(files)] if files else spec_path
        if path.is_file() and os.access(path, os.R_OK):
            path.write_bytes(mutate_text(path.read_bytes(), op, a, b, payload, table))
    return sorted(p.stem for p in (root / "specs").glob("*.toml"))


# ---------------------------------------------------------------------------------------------
# The fuzz test

_settings = settings(
    max_examples=EXAMPLES,
    derandomize=SEED is None,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.filter_too_much],
)


def _seeded(test: Callable[..., None]) -> Callable[..., None]:
    return seed(int(SEED))(test) if SEED is not None else test


@_seeded
@_settings
@given(spec=st.sampled_from(sorted(SEED_SPECS)),
       muts=st.lists(mutations, min_size=1, max_size=MUTATIONS))
# Crashes the fuzzer found, kept as examples (the known classes have cases in
# tests/generate/cases/).
@example(spec="mailer", muts=[("migration", "nest", 40, 4, b"")])  # deep parentheses
@example(spec="reports", muts=[("spec", "nest", 0, 16, b"")])  # deep TOML arrays (x = [[[...)
@example(spec="chat", muts=[("fs", "sql_folder", 0, 0, b"")])  # a folder named *.sql
@example(spec="shop_emails", muts=[("fs", "self_loop", 0, 0, b"")])  # a symlink loop
@example(spec="thumbnails", muts=[("fs", "dangling", 0, 0, b"")])  # a link to nothing
@example(spec="ledger", muts=[("migration", "insert_line", 1 << 16, 0,
                               b"CREATE TABLE p PARTITION OF ledger_jobs")])
@example(spec="mailer_mariadb", muts=[("spec", "replace_value", 2, 0, b'"' + b"a" * 300 + b'"')])
@example(spec="ledger_mariadb", muts=[("spec", "insert", 0, 0, b"x = 1" + b"1" * 5000 + b"\n")])
@example(spec="shop_checkout", muts=[("spec", "replace_value", 0, 0, b'"a\\u2028b"')])
@example(spec="mailer", muts=[("spec", "replace_value", 1, 0, b'"/dev/null"')])
@example(spec="ledger", muts=[("migration", "insert_line", 0, 0,  # sqlglot's exponential time
                               b"SELECT " + b"ARRAY[" * 30 + b"1" + b"]" * 30 + b";")])
@example(spec="chat", muts=[("spec", "insert_line", 1, 0,  # the key-line pattern backtracked
                             b'advisory_key = """\n' + b" " * 20000 + b'\n"""')])
@example(spec="reports", muts=[("spec", "insert_line", 1, 0,
                                b'reviewed = ["x:' + b"9" * 5000 + b'", "x:\xc2\xb2"]')])
def test_build_survives_mutations(spec: str, muts: list[tuple[str, str, int, int, bytes]]
                                  ) -> None:
    with project() as root:
        specs = apply(root, spec, muts)
        check_build(root, specs)


# ---------------------------------------------------------------------------------------------
# Inputs the fuzzer cannot express as a case folder (symlinks, permissions, write failures)

SPEC = '''table = "jobs"
dialect = "postgres"
ddl = "{ddl}"

[columns]
id = {{ role = "id", generated = true }}
payload = "payload"
'''
# With the table settings the build asks for, so that its output is only what a test looks for.
CREATE = ("CREATE TABLE jobs (id BIGSERIAL PRIMARY KEY, payload BYTEA NOT NULL) WITH (fillfactor = "
          "70, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000, "
          "autovacuum_vacuum_insert_scale_factor = 0);\n")


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


@pytest.fixture
def root() -> Iterator[Path]:
    with project() as path:
        yield path


@pytest.fixture
def deny(monkeypatch: pytest.MonkeyPatch) -> Callable[[Path], None]:
    """Make a file or folder unreadable, for root as well (who reads anything)."""
    denied: set[str] = set()
    real_open, real_listdir, real_scandir = io.open, os.listdir, os.scandir

    def refuse(path: Any) -> None:
        if isinstance(path, (str, os.PathLike)) and os.path.realpath(path) in denied:
            raise PermissionError(13, "Permission denied", str(path))

    def opening(file: Any, *args: Any, **kwargs: Any) -> Any:
        refuse(file)
        return real_open(file, *args, **kwargs)

    def listing(path: Any = ".") -> Any:
        refuse(path)
        return real_listdir(path)

    def scanning(path: Any = ".") -> Any:
        refuse(path)
        return real_scandir(path)

    monkeypatch.setattr(io, "open", opening)
    monkeypatch.setattr(builtins, "open", opening)
    monkeypatch.setattr(os, "listdir", listing)
    monkeypatch.setattr(os, "scandir", scanning)

    def add(path: Path) -> None:
        path.chmod(0)
        denied.add(os.path.realpath(path))
    return add


def test_symlink_loops_in_the_migrations_folder(root: Path) -> None:
    _write(root, {"specs/jobs.toml": SPEC.format(ddl="m"), "specs/m/0001_jobs.sql": CREATE})
    (root / "specs/m/0002_loop.sql").symlink_to("0002_loop.sql")
    (root / "specs/m/again").symlink_to(".")  # a folder that leads back: not replayed twice
    (root / "specs/m/0003_gone.sql").symlink_to("missing.sql")
    (root / "specs/m/.#0004_lock.sql").symlink_to("user@host.123")  # an editor's lock file
    code, err = check_build(root, ["jobs"])
    assert code == 1
    assert err.splitlines() == [
        "specs/m/0002_loop.sql:1: cannot be read: Too many levels of symbolic links, so no "
        "statement of specs/m/0002_loop.sql was replayed",
        "specs/m/0003_gone.sql:1: cannot be read: No such file or directory, so no statement "
        "of specs/m/0003_gone.sql was replayed",
        "inboxgen: build failed; nothing was written",
    ]


def test_ddl_that_is_a_symlink_loop_or_a_device(root: Path) -> None:
    _write(root, {"specs/loop.toml": SPEC.format(ddl="loop.sql"),
                  "specs/dev.toml": SPEC.format(ddl="/dev/null")})
    (root / "specs/loop.sql").symlink_to("loop.sql")
    code, err = check_build(root, ["dev", "loop"])
    assert code == 1
    assert err.splitlines() == [
        "specs/dev.toml:3: migration path '/dev/null' is neither a file nor a folder",
        "specs/loop.toml:3: migration path 'loop.sql' cannot be read: Too many levels of "
        "symbolic links",
        "inboxgen: build failed; nothing was written",
    ]


def test_unreadable_migration_file_and_folder(root: Path,
                                              deny: Callable[[Path], None]) -> None:
    _write(root, {"specs/jobs.toml": SPEC.format(ddl="m"), "specs/m/0001_jobs.sql": CREATE,
                  "specs/m/0002_more.sql": "SELECT 1;\n",
                  "specs/m/0003_step/migration.sql": "SELECT 1;\n"})
    deny(root / "specs/m/0002_more.sql")
    deny(root / "specs/m/0003_step")
    code, err = check_build(root, ["jobs"])
    assert code == 1
    assert err.splitlines() == [
        "specs/jobs.toml:3: migration folder specs/m/0003_step cannot be read: Permission "
        "denied, so none of its migrations was replayed",
        "specs/m/0002_more.sql:1: cannot be read: Permission denied, so no statement of "
        "specs/m/0002_more.sql was replayed",
        "inboxgen: build failed; nothing was written",
    ]


def test_unreadable_spec_and_odd_spec_entries(root: Path, deny: Callable[[Path], None]) -> None:
    _write(root, {"specs/jobs.toml": SPEC.format(ddl="jobs.sql"), "specs/jobs.sql": CREATE,
                  "specs/folder.toml/inside.txt": "a folder is not a spec\n"})
    (root / "specs/loop.toml").symlink_to("loop.toml")
    deny(root / "specs/jobs.toml")
    code, err = check_build(root, ["jobs", "loop"])
    assert code == 1
    assert err.splitlines() == [
        "specs/jobs.toml:1: cannot read spec: Permission denied",
        "specs/loop.toml:1: cannot read spec: Too many levels of symbolic links",
        "inboxgen: build failed; nothing was written",
    ]


def test_modules_that_cannot_be_written_or_read(root: Path,
                                                deny: Callable[[Path], None]) -> None:
    _write(root, {"specs/jobs.toml": SPEC.format(ddl="jobs.sql"), "specs/jobs.sql": CREATE,
                  "generated": "a file where the modules' folder should be\n"})
    code, out, err = run_main(root, "build")
    assert (code, out) == (1, "")
    assert err.splitlines() == ["generated/jobs.py: cannot write: File exists",
                                "inboxgen: build failed while writing the modules"]
    (root / "generated").unlink()
    assert run_main(root, "build")[0] == 0
    deny(root / "generated/jobs.py")
    code, out, err = run_main(root, "verify")
    assert code == 1
    assert err.splitlines() == ["generated/jobs.py: cannot be read: Permission denied"]


def test_spec_argument_with_a_name_too_long(root: Path) -> None:
    code, out, err = run_main(root, "build", "s" * 300 + ".toml")
    assert code == 2
    assert err == f"inboxgen: {'s' * 100}...{'s' * 12}.toml: cannot be read: File name too long\n"


def test_an_unexpected_failure_is_one_line_naming_the_spec(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import inboxgen.generate.build

    def broken(*args: Any) -> None:
        raise KeyError("boom")

    _write(root, {"specs/jobs.toml": SPEC.format(ddl="jobs.sql"), "specs/jobs.sql": CREATE})
    monkeypatch.setattr(inboxgen.generate.build, "resolve", broken)
    code, out, err = run_main(root, "build")
    assert (code, out) == (1, "")
    assert err == ("inboxgen: internal error, please report it: while building "
                   "specs/jobs.toml: KeyError: 'boom'\n")


@pytest.mark.parametrize("content", [
    b"tool = 1\n", b"[tool]\ninboxgen = 1\n", b"\xff\xfe\n",
    b"x = " + b"[" * 2000 + b"]" * 2000 + b"\n", b"x = " + b"1" * 5000 + b"\n",
], ids=["tool-not-a-table", "inboxgen-not-a-table", "not-utf8", "nested", "huge-number"])
def test_broken_project_settings_are_a_usage_error(root: Path, content: bytes) -> None:
    (root / "pyproject.toml").write_bytes(content)
    code, out, err = run_main(root, "build")
    assert (code, out) == (2, "")
    assert err.startswith("inboxgen: pyproject.toml: "), err
    assert len(err.splitlines()) == 1, err
