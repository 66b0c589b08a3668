"""The text of a generated module that is the same on every dialect: docstrings, comments and
literals, the plain and async renderings of a function body, the template, the imports the body
uses, the filling of long calls, signatures and lists to the line length, and the wrapping of
lines that names near the servers' limits make too long."""

from __future__ import annotations

import functools
import io
import json
import re
import textwrap
import tokenize
from collections.abc import Sequence
from pathlib import Path

import jinja2

from inboxgen.errors import GeneratorBug
from inboxgen.generate.model import Queue


def docstring(text: str, indent: str = "    ") -> str:
    """A docstring wrapped to the line length."""
    one = f'{indent}"""{text}"""'
    if len(one) <= 100:
        return one
    first, *rest = textwrap.wrap(text, width=96 - len(indent))
    return "\n".join([f'{indent}"""{first}', *(f"{indent}{line}" for line in rest),
                      f'{indent}"""'])


def comment(text: str) -> str:
    return "\n".join(textwrap.wrap(text, width=98, initial_indent="# ",
                                   subsequent_indent="# "))


def py_str(value: str) -> str:
    """A double-quoted Python string literal (non-ASCII text as written)."""
    return json.dumps(value, ensure_ascii=False)


def sql_literal(sql: str) -> str:
    """The SQL as a readable triple-quoted literal, or a plain one where that is not safe."""
    if "\\" in sql:
        return py_str(sql)
    if '"""' in sql:
        # A quoted name holding `"` doubles it: the other triple quote keeps it readable.
        return py_str(sql) if "'''" in sql else f"'''\n{sql}\n'''"
    return f'"""\n{sql}\n"""'


def sync_line(line: str) -> str:
    """A body line as the plain function runs it."""
    return line.replace("AWAIT_TWIN ", "").replace("AWAIT ", "")


def async_line(line: str) -> str:
    """A body line as the async twin runs it: a helper of inboxgen.values or
    inboxgen.connections that is awaited is that helper's `_async` twin, and so is a function
    of the module itself marked AWAIT_TWIN."""
    line = re.sub(r"AWAIT_TWIN (\w+)\(", r"await \1_async(", line)
    return re.sub(r"AWAIT (_v|_c)\.(\w+)\(", r"await \1.\2_async(", line).replace("AWAIT ",
                                                                                 "await ")


def template_folder() -> Path:
    """Where the module template is: inside the package in an installed wheel (the build maps
    the project's top-level templates/ there), beside the package in a source checkout."""
    package = Path(__file__).resolve().parents[2]
    for folder in (package / "templates", package.parent / "templates"):
        if (folder / TEMPLATE).is_file():
            return folder
    raise GeneratorBug(f"the module template {TEMPLATE} is missing from the installation "
                       f"(looked in {package / 'templates'} and {package.parent / 'templates'})")


TEMPLATE = "module.py.j2"


@functools.cache
def template() -> jinja2.Template:
    """The module template, compiled once per process: compiling it costs more than rendering
    a module, and a build renders one module per spec."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(template_folder()),
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
        autoescape=False,
    ).get_template(TEMPLATE)


LINE_LENGTH = 100


def fill(head: str, items: Sequence[str], close: str, indent: str = "",
         width: int = 0) -> list[str]:
    """`head` + the items joined by commas + `close`, on one line when it fits in the line
    length (measured as `width` long when that is more, the async twin's line); else the items
    fill the lines under `head`, one indent deeper, each line ending with a comma, and `close`
    gets a line of its own."""
    one = f"{indent}{head}{', '.join(items)}{close}"
    if max(len(one), width) <= LINE_LENGTH or not items:
        return [one]
    return [f"{indent}{head}", *filled(items, indent + "    "), f"{indent}{close}"]


def filled(items: Sequence[str], indent: str) -> list[str]:
    """The items on as few lines at `indent` as the line length allows, each line ending with
    a comma."""
    out: list[str] = []
    line = ""
    for item in items:
        if line and len(f"{line} {item},") > LINE_LENGTH:
            out.append(line)
            line = ""
        line = f"{line} {item}," if line else f"{indent}{item},"
    return [*out, line] if line else out


def split_items(text: str) -> list[str]:
    """The comma-separated items of a Python expression list, split outside brackets and
    strings (an f-string's fields are in brackets)."""
    items: list[str] = []
    depth, quote, start, escaped = 0, "", 0, False
    for i, ch in enumerate(text):
        if quote:
            if not escaped and ch == quote:
                quote = ""
            escaped = not escaped and ch == "\\"
        elif ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append(text[start:i].strip())
            start = i + 1
    items.append(text[start:].strip())
    return [item for item in items if item]


def body_line(line: str, is_async: bool, indent: str, twins: bool) -> str:
    """A line of a generated function's body, plain or async, at `indent`. A statement run
    whose line is too long keeps its call on the first line and fills the lines below with
    its parameters; where the module has async twins, the twin's longer line decides, so both
    wrap alike."""
    text = async_line(line) if is_async else sync_line(line)
    indent += text[:len(text) - len(text.lstrip())]
    text = text.lstrip()
    longest = len(indent + async_line(line).lstrip()) if twins else 0
    head, brace, rest = text.partition("{")
    if not (brace and rest.endswith("})") and _RUN.fullmatch(head)):
        return indent + text
    return "\n".join(fill(head + brace, split_items(rest[:-2]), "})", indent, longest))


# The start of a statement run, up to its parameter dict: `[x = ][await ]f([conn, ]NAME, `.
_RUN = re.compile(r"(\w+ = )?(await )?[\w.]+\((\w+, )?[A-Z][A-Z0-9_]*, ")


def wrap_long_lines(text: str) -> str:
    """Break the Python lines that names near the servers' limits (63 or 64 bytes) make too long.

    A line breaks between two tokens inside brackets (implicit line joining), preferably where
    there is a space; a string "a.b" breaks into "a." "b" (implicit concatenation). Lines of
    the SQL constants are wrapped when the statements are rendered.
    """
    lines = text.splitlines(keepends=True)
    if all(len(line.rstrip("\n")) <= LINE_LENGTH for line in lines):
        return text
    # Per line: (column, depth, token) of every token that starts on it.
    starts: dict[int, list[tuple[int, int, tokenize.TokenInfo]]] = {}
    depth = 0
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.OP and tok.string in ")]}":
            depth -= 1
        starts.setdefault(tok.start[0], []).append((tok.start[1], depth, tok))
        if tok.type == tokenize.OP and tok.string in "([{":
            depth += 1
    out: list[str] = []
    for number, line in enumerate(lines, start=1):
        body = line.rstrip("\n")
        if len(body) <= LINE_LENGTH or number not in starts:
            out.append(line)
            continue
        out.append("\n".join(_break_line(body, starts[number])) + "\n")
    return "".join(out)


def _break_line(line: str, toks: list[tuple[int, int, tokenize.TokenInfo]]) -> list[str]:
    indent = line[:len(line) - len(line.lstrip())] + "    "
    # Places to break: before a token inside brackets (not the line's first), best after a space.
    cuts = [(col, line[col - 1] == " ") for col, depth, _ in toks[1:] if depth > 0]
    for col, depth, tok in toks:
        if (depth > 0 and tok.type == tokenize.STRING and "." in tok.string
                and tok.string[0] == '"' and "\\" not in tok.string):
            dot = tok.string.index(".") + 1
            cuts.append((col + dot, False))
    cuts.sort()
    pieces: list[str] = []
    start = 0
    while len(line) - start + (len(indent) if pieces else 0) > LINE_LENGTH:
        room = LINE_LENGTH - (len(indent) if pieces else 0)
        fits = [(col, spaced) for col, spaced in cuts if start < col <= start + room]
        if not fits:
            break
        spaced = [col for col, is_spaced in fits if is_spaced]
        cut = spaced[-1] if spaced else fits[-1][0]
        piece = line[start:cut].rstrip()
        if _inside_string(line, cut):
            piece += '"'
            line = line[:cut] + '"' + line[cut:]
        pieces.append(piece)
        start = cut
        while start < len(line) and line[start] == " ":
            start += 1
    pieces.append(line[start:])
    return [pieces[0]] + [indent + p.strip() for p in pieces[1:]]


def _inside_string(line: str, col: int) -> bool:
    """Whether `col` falls inside a double-quoted string (a cut at a dot of "a.b")."""
    return line[:col].count('"') % 2 == 1


def with_imports(body: str, q: Queue) -> str:
    """Insert exactly the imports the body uses (ruff rejects unused ones)."""
    head, marker, rest = body.partition("# -- imports --\n")
    std: list[str] = ["from __future__ import annotations", ""]
    uses = rest
    mods = []
    for mod in ("datetime", "decimal", "sqlite3", "uuid"):
        if re.search(rf"\b{mod}\.", uses):
            mods.append(f"import {mod}")
    std += mods
    abc = [n for n in ("Mapping", "Sequence") if re.search(rf"\b{n}\[", uses)]
    if abc:
        std.append(f"from collections.abc import {', '.join(abc)}")
    typing_names = [n for n in ("Any", "Final", "LiteralString", "cast")
                    if re.search(rf"\b{n}\b", uses)]
    if typing_names:
        std.append(f"from typing import {', '.join(typing_names)}")
    third = ["import attrs"]
    if re.search(r"\bmsgspec\.", uses):
        third.append("import msgspec")
    if re.search(r"\bpsycopg\.", uses):
        third.append("import psycopg")
    if re.search(r"\bpsycopg\.sql\.", uses):  # prune --partitions: names quoted by psycopg
        third.append("import psycopg.sql")
    if re.search(r"\bpymysql\.", uses):
        third.append("import pymysql")
    third_from = []
    if re.search(r"\b_c\.", uses):
        third_from.append("from inboxgen import connections as _c")
    if "_v." in uses:
        third_from.append("from inboxgen import values as _v")
    # Wrapped as isort wraps a line past 88 characters (ruff's default line length).
    health = "    TableHealth,\n" if "TableHealth" in uses else ""
    replaced = "    Replaced,\n" if "Replaced(" in uses else ""
    after = "    AfterState,\n" if "AfterState" in uses else ""
    seats = "    Seats,\n" if "Seats(" in uses else ""
    third_from.append(f"from inboxgen.descriptor import (\n{after}    JobState,\n    Operations,\n"
                      f"    QueueStatus,\n{replaced}"
                      f"    RuntimeDefaults,\n{seats}    TableDescriptor,\n{health})")
    if "Jsonb(" in uses:
        third_from.append("from psycopg.types.json import Jsonb")
    # isort's order: plain imports first, then from-imports, each sorted by module.
    lines = std + [""] + sorted(third) + third_from
    # The user's classes (payload, result): a group of their own, after the third-party one.
    user: dict[str, set[str]] = {}
    for t in (q.payload_type, q.result_type):
        if t:
            module, _, name = t.partition(":")
            user.setdefault(module, set()).add(name)
    if user:
        lines += [""] + [f"from {module} import {', '.join(sorted(names))}"
                         for module, names in sorted(user.items())]
    return head + "\n".join(lines) + "\n" + rest
