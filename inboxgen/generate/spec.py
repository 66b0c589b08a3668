"""Queue specs: one TOML file per queue table, read into a `Spec` with the line of every key.

`tomllib` gives no positions, so a second, line-oriented pass records where each key stands
(tables, dotted headers and inline tables); every diagnostic about a spec points at its line.
"""

from __future__ import annotations

import difflib
import os
import re
import stat
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from inboxgen.descriptor import RuntimeDefaults
from inboxgen.errors import Diagnostic, SpecInvalid
from inboxgen.generate.dialects import DIALECTS, FORMS, Dialect

ROLES = (
    "id",
    "group",
    "priority",
    "retry_after",
    "attempt",
    "processed_at",
    "locked_until",
    "headers",
    "payload",
    "error",
    "result",
    "progress",
    "enqueued_at",
    "parents",
)
CODECS = ("json", "bytes", "text")

_TOP_KEYS = {
    "table", "dialect", "ddl", "claim", "advisory_key", "fifo", "unique", "server_version",
    "count_crashes", "reviewed",
    "columns", "dead_letter", "runtime", "flow", "after",
}
_COLUMN_KEYS = {"role", "generated", "codec", "type"}
_DEAD_LETTER_KEYS = {"group", "table"}
_RUNTIME_KEYS = {"workers", "batch", "lease", "poll_interval", "max_attempts"}
_FLOW_KEYS = {"pauses", "concurrency", "key", "key_concurrency", "rate", "rate_seconds",
              "rate_table", "rate_per_key", "fair", "weights_table"}


@attrs.frozen
class RoleBinding:
    column: str
    role: str
    generated: bool
    codec: str | None
    type: str | None  # "module:Class", the payload's or the result's user type
    line: int


@attrs.frozen
class Reviewed:
    """One `reviewed` entry: "FILE:LINE" of a migration statement inboxgen cannot replay."""

    files: tuple[str, ...]  # the file as the entry may name it
    line: int
    text: str  # the entry as written


@attrs.frozen
class FlowLimits:
    """[flow] limits, across every worker of every process: on the jobs in work at once, the
    queue's (`concurrency`) and, with `key`, each key's (`key_concurrency`); and on the claims
    in any `rate_seconds` (`rate`, of each key apart with `rate_per_key`); with `fair`, claims
    take turns across the key's values."""

    concurrency: int | None
    key: str | None
    key_concurrency: int | None
    # At most `rate` claims in any `rate_seconds`, recorded in `rate_table`.
    rate: int | None = None
    rate_seconds: float | None = None
    rate_table: str | None = None
    rate_per_key: bool = False  # the rate counts each key's claims apart
    fair: bool = False  # claims take turns across the key's values (round robin)
    # With `fair`: the table giving each key's turns in a round (its weight; 1 where absent).
    weights_table: str | None = None


@attrs.frozen
class Spec:
    path: Path
    display: str  # the path as messages and headers show it
    table: str
    schema: str | None
    dialect: Dialect
    ddl: tuple[Path, ...]
    ddl_shown: tuple[str, ...]  # the same paths as messages show them
    claim: str | None
    advisory_key: str | None
    fifo: bool
    # Row lock: the claim counts the attempt in a statement of its own. None: not given, which
    # means counted wherever a job that kills its worker could otherwise come back for ever.
    count_crashes: bool | None
    # Statements a person checked and found harmless to the queue table: each entry's file as
    # messages show it (or as written, relative to the spec) and its line.
    reviewed: tuple[Reviewed, ...]
    unique: tuple[str, ...]
    server_version: tuple[int, ...] | None
    bindings: tuple[RoleBinding, ...]
    dead_letter_group: str | None
    dead_letter_table: str | None
    runtime: RuntimeDefaults
    lines: dict[tuple[str, ...], int]
    # [flow] pauses: the table whose rows pause the queue or one of its groups.
    pause_table: str | None = None
    # [flow] limits on the jobs in work and the claims of a window (FlowLimits).
    limits: FlowLimits | None = None
    # `after`: the table whose rows say which jobs each job waits for (job_id, after_id).
    after_table: str | None = None

    def line(self, *key: str) -> int:
        return line_of(self.lines, key)


def line_of(lines: dict[tuple[str, ...], int], key: tuple[str, ...]) -> int:
    """The line of `key`, or of its nearest enclosing key that has one."""
    while key:
        if key in lines:
            return lines[key]
        key = key[:-1]
    return 1


# ---------------------------------------------------------------------------------------------
# Key positions

# Each pattern matches in time linear in the line: no two parts of it can take the same text
# (a long line of spaces or of key characters must not make the match backtrack for minutes).
_HEADER = re.compile(r"^\s*\[\[?(?P<key>[^\]]*)\]\]?\s*(#.*)?$")
_PART = r'(?:"(?:[^"\\]|\\.)*"|\'[^\']*\'|[A-Za-z0-9_\-]+)'
_KEY = re.compile(rf'^\s*(?P<key>{_PART}(?:[ \t]*\.[ \t]*{_PART})*)[ \t]*=')
_INLINE_KEY = re.compile(r'(?:[{,]\s*)(?P<key>"(?:[^"\\]|\\.)*"|[A-Za-z0-9_\-]+)\s*=')


def _split_key(raw: str) -> tuple[str, ...]:
    parts: list[str] = []
    for m in re.finditer(r'"((?:[^"\\]|\\.)*)"|\'([^\']*)\'|([^.\s]+)', raw):
        parts.append(next(g for g in m.groups() if g is not None))
    return tuple(parts)


def key_lines(text: str) -> dict[tuple[str, ...], int]:
    lines: dict[tuple[str, ...], int] = {}
    prefix: tuple[str, ...] = ()
    for number, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(line)
        if header and header.group("key").strip():
            prefix = _split_key(header.group("key").strip())
            lines.setdefault(prefix, number)
            continue
        key = _KEY.match(line)
        if key:
            full = prefix + _split_key(key.group("key"))
            lines.setdefault(full, number)
            rest = line[key.end():]
            for inner in _INLINE_KEY.finditer(rest):
                lines.setdefault(full + _split_key(inner.group("key")), number)
    return lines


# ---------------------------------------------------------------------------------------------
# Loading


def load_spec(path: Path, display: str | None = None,
              show: Callable[[Path], str] | None = None) -> Spec:
    """Read and shape-check one spec; raises SpecInvalid with every problem found."""
    shown = display or str(path)
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise SpecInvalid([Diagnostic(shown, 1, f"cannot read spec: {err.strerror or err}")]
                          ) from None
    text = raw.decode("utf-8-sig", errors="replace")  # a leading BOM is not TOML
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        msg = str(err)
        m = re.search(r"\(at line (\d+), column \d+\)", msg)
        line = int(m.group(1)) if m else 1
        msg = re.sub(r"\s*\(at line \d+, column \d+\)", "", msg)
        msg = re.sub(r"\s*\(at end of document\)", " (at end of file)", msg)
        raise SpecInvalid([Diagnostic(shown, line, f"invalid TOML: {msg}")]) from None
    except RecursionError:
        raise SpecInvalid([Diagnostic(shown, _deepest_line(text), "invalid TOML: arrays or "
                                      "inline tables nested too deeply")]) from None
    except ValueError as err:  # a number too long to convert
        first = next(iter(str(err).splitlines()), "").split(":")[0] or type(err).__name__
        raise SpecInvalid([Diagnostic(shown, _longest_word_line(text),
                                      f"invalid TOML: a value cannot be read ({first})")]
                          ) from None
    return _Reader(path, shown, key_lines(text), show or _shown).read(data)


def _deepest_line(text: str) -> int:
    """The line where arrays and inline tables first reach their deepest nesting (strings and
    comments skipped, roughly: only for a message)."""
    depth = deepest = 0
    line = where = 1
    quote: str | None = None
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\n":
            line += 1
            if quote in ("'", '"'):
                quote = None  # a one-line string ends with its line
        elif quote is not None:
            if ch == "\\" and quote in ('"', '"""'):
                i += 1
            elif text.startswith(quote, i):
                i += len(quote) - 1
                quote = None
        elif ch == "#":
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        elif ch in "'\"":
            quote = ch * 3 if text.startswith(ch * 3, i) else ch
            i += len(quote) - 1
        elif ch in "[{":
            depth += 1
            if depth > deepest:
                deepest, where = depth, line
        elif ch in "]}":
            depth = max(depth - 1, 0)
        i += 1
    return where


def _longest_word_line(text: str) -> int:
    """The line holding the longest run of word characters (where an over-long number is)."""
    best = max(re.finditer(r"[\w+.-]+", text), key=lambda m: len(m.group()), default=None)
    return text.count("\n", 0, best.start()) + 1 if best else 1


class _Reader:
    def __init__(self, path: Path, display: str, lines: dict[tuple[str, ...], int],
                 show: Callable[[Path], str]) -> None:
        self.show = show  # how messages show a path (relative to the project)
        self.path = path
        self.display = display
        self.lines = lines
        self.problems: list[Diagnostic] = []

    def line(self, *key: str) -> int:
        return line_of(self.lines, key)

    def err(self, key: tuple[str, ...], message: str) -> None:
        self.problems.append(Diagnostic(self.display, self.line(*key), message))

    def unknown(self, table: dict[str, Any], allowed: set[str], where: tuple[str, ...]) -> None:
        for key in table:
            if key not in allowed:
                place = ".".join(where + (key,))
                self.err(where + (key,), f"unknown key '{place}' (expected one of: "
                                         f"{', '.join(sorted(allowed))})")

    def typed(self, data: dict[str, Any], key: tuple[str, ...], kind: type | tuple[type, ...],
              what: str) -> Any:
        value = data.get(key[-1])
        if value is None:
            return None
        ok = isinstance(value, kind) and not (isinstance(value, bool) and kind in (int, float))
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            ok = True
        if not ok:
            self.err(key, f"'{'.'.join(key)}' must be {what}, not {value!r}")
            return None
        return value

    def read(self, data: dict[str, Any]) -> Spec:
        self.unknown(data, _TOP_KEYS, ())
        table_raw = self.typed(data, ("table",), str, "a table name")
        if table_raw is None and "table" not in data:
            self.err(("table",), "'table' is required: the queue table's name")
        schema, table = _split_table(table_raw or "")

        dialect_name = self.typed(data, ("dialect",), str, "a dialect name")
        dialect = DIALECTS.get(dialect_name or "")
        if dialect_name is None and "dialect" not in data:
            self.err(("dialect",), "'dialect' is required: one of postgres, mysql, sqlite")
        elif dialect is None and dialect_name is not None:
            self.err(("dialect",), f"unknown dialect '{dialect_name}' (expected one of "
                                   f"postgres, mysql, sqlite)")

        ddl = self.ddl(data)
        claim = self.typed(data, ("claim",), str, "a claim form")
        if claim is not None and claim not in FORMS:
            self.err(("claim",), f"unknown claim form '{claim}' (expected one of "
                                 f"{', '.join(FORMS)})")
        advisory_key = self.typed(data, ("advisory_key",), str, "a key template")
        fifo = bool(self.typed(data, ("fifo",), bool, "true or false"))
        count_crashes = self.typed(data, ("count_crashes",), bool, "true or false")
        reviewed = self.reviewed(data)
        unique = data.get("unique") or []
        if not (isinstance(unique, list) and all(isinstance(u, str) for u in unique)):
            self.err(("unique",), "'unique' must be a list of column names")
            unique = []
        version = self.typed(data, ("server_version",), str, "a version string like \"11\"")
        server_version = None
        if version is not None:
            if re.fullmatch(r"\d+(\.\d+)*", version):
                server_version = tuple(int(p) for p in version.split("."))
            else:
                self.err(("server_version",), f"'server_version' must look like \"11\" or "
                                              f"\"8.0.1\", not {version!r}")

        bindings = self.columns(data)
        dl_group, dl_table = self.dead_letter(data)
        runtime = self.runtime(data)
        pause_table, limits = self.flow(data)
        after_table = self.typed(data, ("after",), str, "a table name")
        if after_table == "":
            self.err(("after",), "'after' must name a table")
            after_table = None
        if self.problems or dialect is None:
            raise SpecInvalid(self.problems)
        return Spec(
            path=self.path, display=self.display, table=table, schema=schema, dialect=dialect,
            ddl=tuple(ddl), ddl_shown=tuple(self.show(p) for p in ddl),
            claim=claim, advisory_key=advisory_key, fifo=fifo,
            count_crashes=count_crashes, reviewed=reviewed,
            unique=tuple(unique), server_version=server_version, bindings=tuple(bindings),
            dead_letter_group=dl_group, dead_letter_table=dl_table, runtime=runtime,
            lines=self.lines, pause_table=pause_table, limits=limits, after_table=after_table,
        )

    def ddl(self, data: dict[str, Any]) -> list[Path]:
        value = data.get("ddl")
        if value is None:
            self.err(("ddl",), "'ddl' is required: a migration file, a folder of migrations, "
                               "or a list of them")
            return []
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            self.err(("ddl",), "'ddl' must be a path or a list of paths")
            return []
        if not items:
            self.err(("ddl",), "'ddl' is an empty list: give a migration file, a folder of "
                               "migrations, or a list of them")
            return []
        paths: list[Path] = []
        for item in items:
            p = (self.path.parent / item)
            problem = _path_problem(p)
            if problem == "":
                self.err(("ddl",), f"migration path '{_clip(item)}' does not exist (looked for "
                                   f"{_clip(self.show(p))})")
            elif problem is not None:
                self.err(("ddl",), f"migration path '{_clip(item)}' {problem}")
            paths.append(p)
        return paths

    def reviewed(self, data: dict[str, Any]) -> tuple[Reviewed, ...]:
        value = data.get("reviewed")
        if value is None:
            return ()
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.err(("reviewed",), "'reviewed' must be a list of \"FILE:LINE\" strings")
            return ()
        out: list[Reviewed] = []
        for entry in value:
            path, _, line = entry.rpartition(":")
            if not path or not re.fullmatch(r"[0-9]{1,9}", line) or int(line) < 1:
                self.err(("reviewed",), f"'reviewed' entry {entry!r} must look like "
                                        f"\"migrations/0003_backfill.sql:12\" (file:line)")
                continue
            files: tuple[str, ...]
            try:
                files = (path, self.show(self.path.parent / path))
            except (OSError, RuntimeError, ValueError):  # a path too long to resolve, a loop
                files = (path,)
            out.append(Reviewed(files, int(line), entry))
        return tuple(out)

    def columns(self, data: dict[str, Any]) -> list[RoleBinding]:
        cols = data.get("columns")
        if cols is None:
            self.err(("columns",), "'[columns]' is required: it binds columns to roles "
                                   "(at least one column with role \"id\")")
            return []
        if not isinstance(cols, dict):
            self.err(("columns",), "'columns' must be a table of column = role")
            return []
        out: list[RoleBinding] = []
        for column, value in cols.items():
            key = ("columns", column)
            if isinstance(value, str):
                value = {"role": value}
            if not isinstance(value, dict):
                self.err(key, f"column '{column}': expected a role name or "
                              f"{{ role = ..., generated = ... }}, not {value!r}")
                continue
            self.unknown(value, _COLUMN_KEYS, key)
            role = value.get("role")
            if not isinstance(role, str):
                self.err(key, f"column '{column}': 'role' is required")
                continue
            if role not in ROLES:
                near = difflib.get_close_matches(role, ROLES, n=1)
                self.err(key + ("role",), f"column '{column}': unknown role '{role}' "
                                          f"(expected one of: {', '.join(ROLES)}): "
                                          + (f"did you mean '{near[0]}'?" if near else
                                             "a column that only holds your own data needs "
                                             "no entry in [columns]"))
                continue
            generated = self.typed(value, key + ("generated",), bool, "true or false")
            codec = self.typed(value, key + ("codec",), str, "a codec name")
            user_type = self.typed(value, key + ("type",), str, "\"module:Class\"")
            if codec is not None and codec not in CODECS:
                self.err(key + ("codec",), f"column '{column}': unknown codec '{codec}' "
                                           f"(expected one of: {', '.join(CODECS)})")
            if codec is not None and role != "payload":
                self.err(key, f"column '{column}': 'codec' belongs to the payload role, not "
                              f"'{role}'")
            if user_type is not None and role not in ("payload", "result"):
                self.err(key, f"column '{column}': 'type' belongs to the payload and result "
                              f"roles, not '{role}'")
            if user_type is not None and not re.fullmatch(
                    r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", user_type):
                self.err(key + ("type",), f"column '{column}': type must be "
                                          f"\"package.module:ClassName\", not {user_type!r}")
            out.append(RoleBinding(column, role, bool(generated), codec, user_type,
                                   self.line(*key)))
        return out

    def dead_letter(self, data: dict[str, Any]) -> tuple[str | None, str | None]:
        dl = data.get("dead_letter")
        if dl is None:
            return None, None
        if not isinstance(dl, dict):
            self.err(("dead_letter",), "'dead_letter' must be a table with 'group' or 'table'")
            return None, None
        self.unknown(dl, _DEAD_LETTER_KEYS, ("dead_letter",))
        group = self.typed(dl, ("dead_letter", "group"), str, "a group name")
        table = self.typed(dl, ("dead_letter", "table"), str, "a table name")
        if group is not None and table is not None:
            self.err(("dead_letter",), "dead_letter takes 'group' or 'table', not both")
        if group is None and table is None and not self.problems:
            self.err(("dead_letter",), "dead_letter needs 'group' or 'table'")
        return group, table

    def flow(self, data: dict[str, Any]) -> tuple[str | None, FlowLimits | None]:
        flow = data.get("flow")
        if flow is None:
            return None, None
        if not isinstance(flow, dict):
            self.err(("flow",), "'flow' must be a table")
            return None, None
        self.unknown(flow, _FLOW_KEYS, ("flow",))
        pauses: str | None = self.typed(flow, ("flow", "pauses"), str, "a table name")
        if pauses == "":
            self.err(("flow", "pauses"), "'flow.pauses' must name a table")
            pauses = None
        return pauses, self.limits(flow)

    def limits(self, flow: dict[str, Any]) -> FlowLimits | None:
        counts: dict[str, int | None] = {}
        for name in ("concurrency", "key_concurrency"):
            n = self.typed(flow, ("flow", name), int, "a whole number of jobs")
            if n is not None and n < 1:
                self.err(("flow", name), f"'flow.{name}' must be at least 1 (a limit of {n} "
                                         f"would run nothing), not {n}")
                n = None
            counts[name] = n
        key: str | None = self.typed(flow, ("flow", "key"), str, "a column name")
        if key == "":
            self.err(("flow", "key"), "'flow.key' must name a column of the queue table")
            key = None
        per_key = bool(self.typed(flow, ("flow", "rate_per_key"), bool, "true or false"))
        fair = bool(self.typed(flow, ("flow", "fair"), bool, "true or false"))
        if key is not None and all(flow.get(k) in (None, False)
                                   for k in ("key_concurrency", "rate_per_key", "fair")):
            self.err(("flow", "key"), "'flow.key' needs 'flow.key_concurrency' (how many jobs "
                                      "of one key may be in work at once), 'flow.rate_per_key' "
                                      "or 'flow.fair'")
        for needs in ("key_concurrency", "rate_per_key", "fair"):
            if needs in flow and "key" not in flow and flow[needs] is not False:
                self.err(("flow", needs), f"'flow.{needs}' needs 'flow.key': the column whose "
                                          f"values are the keys")
        weights = self.weights(flow, fair)
        rate, seconds, table = self.rate(flow)
        if per_key and "rate" not in flow:
            self.err(("flow", "rate_per_key"), "'flow.rate_per_key' needs 'flow.rate', "
                                               "'flow.rate_seconds' and 'flow.rate_table'")
        key_used = key if counts["key_concurrency"] or (per_key and rate) or fair else None
        if counts["concurrency"] is None and key_used is None and rate is None:
            return None
        return FlowLimits(counts["concurrency"], key_used,
                          counts["key_concurrency"] if key else None, rate, seconds, table,
                          per_key and rate is not None and key is not None,
                          fair and key is not None, weights if fair and key else None)

    def weights(self, flow: dict[str, Any], fair: bool) -> str | None:
        """weights_table: the table of each key's weight, for a fair claim."""
        table: str | None = self.typed(flow, ("flow", "weights_table"), str, "a table name")
        if table == "":
            self.err(("flow", "weights_table"), "'flow.weights_table' must name a table")
            return None
        if table is not None and not fair:
            self.err(("flow", "weights_table"), "'flow.weights_table' needs 'flow.fair = true': "
                                                "the weights give each key its turns in a fair "
                                                "claim's rounds")
            return None
        return table

    def rate(self, flow: dict[str, Any]) -> tuple[int | None, float | None, str | None]:
        """rate, rate_seconds and rate_table: all three, or none."""
        given = [k for k in ("rate", "rate_seconds", "rate_table") if k in flow]
        if given and len(given) < 3:
            missing = [k for k in ("rate", "rate_seconds", "rate_table") if k not in flow]
            self.err(("flow", given[0]), f"'flow.{given[0]}' needs "
                     + " and ".join(f"'flow.{k}'" for k in missing)
                     + ": at most `rate` claims in any `rate_seconds`, recorded in `rate_table`")
            return None, None, None
        rate = self.typed(flow, ("flow", "rate"), int, "a whole number of claims")
        if rate is not None and rate < 1:
            self.err(("flow", "rate"), f"'flow.rate' must be at least 1 (a rate of {rate} "
                                       f"would run nothing), not {rate}")
            rate = None
        seconds = self.typed(flow, ("flow", "rate_seconds"), float, "a number of seconds")
        if seconds is not None and seconds <= 0:
            self.err(("flow", "rate_seconds"), f"'flow.rate_seconds' must be more than 0 (the "
                                               f"window the rate counts claims in), not "
                                               f"{seconds}")
            seconds = None
        table = self.typed(flow, ("flow", "rate_table"), str, "a table name")
        if table == "":
            self.err(("flow", "rate_table"), "'flow.rate_table' must name a table")
            table = None
        if rate is None or seconds is None or table is None:
            return None, None, None
        return rate, float(seconds), table

    def runtime(self, data: dict[str, Any]) -> RuntimeDefaults:
        rt = data.get("runtime")
        if rt is None:
            return RuntimeDefaults()
        if not isinstance(rt, dict):
            self.err(("runtime",), "'runtime' must be a table")
            return RuntimeDefaults()
        self.unknown(rt, _RUNTIME_KEYS, ("runtime",))
        values: dict[str, Any] = {}
        for name in ("workers", "batch", "lease", "max_attempts"):
            v = self.typed(rt, ("runtime", name), int, "a whole number")
            if v is not None and v < 1:
                self.err(("runtime", name), f"'runtime.{name}' must be at least 1, not {v}")
            elif v is not None:
                values["lease_seconds" if name == "lease" else name] = v
        poll = self.typed(rt, ("runtime", "poll_interval"), float, "a number of seconds")
        if poll is not None and poll <= 0:
            self.err(("runtime", "poll_interval"), "'runtime.poll_interval' must be above 0")
        elif poll is not None:
            values["poll_interval"] = float(poll)
        return RuntimeDefaults(**values)


def _split_table(raw: str) -> tuple[str | None, str]:
    if "." in raw:
        schema, _, table = raw.partition(".")
        return schema, table
    return None, raw


def _path_problem(p: Path) -> str | None:
    """What keeps a migration path from being read: None when it is a file or a folder, "" when
    there is nothing there."""
    try:
        mode = os.stat(p).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return "is a symbolic link to nothing" if os.path.lexists(p) else ""
    except OSError as err:  # a name too long, a symlink loop, no permission
        return f"cannot be read: {err.strerror or err}"
    except ValueError:
        return "is not a path the system accepts (it holds a NUL character)"
    if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
        return None
    return "is neither a file nor a folder"


def _clip(text: str, width: int = 120) -> str:
    return text if len(text) <= width else f"{text[:width - 20]}...{text[-17:]}"


def _shown(p: Path) -> str:
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve()))
    except (OSError, RuntimeError, ValueError):
        return str(p)
