"""A generated module reads top to bottom: the row classes and helpers, then each statement's SQL
followed by the function that runs it and its async twin, so the SQL and the code that binds
its parameters are read together. Checked on every module the repository commits."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MODULES = sorted([*(REPO / "generated_examples").glob("*.py"),
                  *(REPO / "tests" / "generate" / "golden").glob("*/expected/*.py"),
                  *(REPO / "bench" / "peers" / "generated").glob("*.py")])
# The connection types of the plain functions and of their async twins.
CONNECTIONS = {"psycopg.AsyncConnection[Any]": "psycopg.Connection[Any]",
               "_v.AsyncMySQLConnection": "pymysql.connections.Connection[Any]",
               # What the enqueue functions also take (inboxgen.connections).
               "_c.AsyncHolder": "_c.ConnectionHolder"}


def _statement(node: ast.stmt) -> str | None:
    """The name of the SQL constant `node` assigns, if it is one."""
    if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
            and "LiteralString" in ast.unparse(node.annotation)):
        return node.target.id
    return None


def _is_statement(node: ast.stmt) -> bool:
    return _statement(node) is not None


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _functions(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """The functions that run statements: those after the first statement."""
    first = next(i for i, node in enumerate(tree.body) if _is_statement(node))
    return [n for n in tree.body[first:] if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def _id(path: Path) -> str:
    return str(path.relative_to(REPO))


def test_every_committed_module_is_checked() -> None:
    assert len(MODULES) >= 20, [_id(p) for p in MODULES]


@pytest.mark.parametrize("path", MODULES, ids=_id)
def test_each_statement_is_followed_by_the_function_that_runs_it(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    body = tree.body
    statements = [(i, name) for i, node in enumerate(body) if (name := _statement(node))]
    assert statements
    for i, name in statements:
        after = next(node for node in body[i + 1:] if not _is_statement(node))
        assert isinstance(after, ast.FunctionDef) and name in _names(after), (
            f"{_id(path)}: {name} is not followed by the function that runs it "
            f"(line {after.lineno})")
    # The row classes and helpers come before the first statement.
    first, _ = statements[0]
    for node in body[first:]:
        assert not isinstance(node, ast.ClassDef), f"{_id(path)}: {node.name} after the SQL"
        if isinstance(node, ast.FunctionDef):
            assert not node.name.startswith("_"), f"{_id(path)}: {node.name} after the SQL"


@pytest.mark.parametrize("path", MODULES, ids=_id)
def test_each_async_twin_follows_its_function_and_differs_only_by_await(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    funcs = _functions(tree)
    twins = [f for f in funcs if isinstance(f, ast.AsyncFunctionDef)]
    if "ASYNC_OPS" not in _names(tree):
        assert twins == []
        return
    assert twins
    for plain, twin in zip(funcs[::2], funcs[1::2], strict=True):
        assert isinstance(plain, ast.FunctionDef), f"{_id(path)}: {plain.name}"
        assert isinstance(twin, ast.AsyncFunctionDef) and twin.name == plain.name + "_async", (
            f"{_id(path)}: {plain.name} is not followed by its async twin")
        text = ast.unparse(twin).removeprefix("async ").replace(f"def {twin.name}(",
                                                                  f"def {plain.name}(")
        text = re.sub(r"\bawait ", "", text).replace("_async(", "(")
        for async_conn, conn in CONNECTIONS.items():
            text = text.replace(async_conn, conn)
        assert text == ast.unparse(plain), f"{_id(path)}: {twin.name} differs from {plain.name}"


# -- compact text: a wrapped list of items is filled to the line length, as a person wraps it --

LINE = 100


def _items(text: str) -> list[str]:
    """The comma-separated items of `text`, split outside brackets and strings."""
    items, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote and text[i - 1] != "\\" else quote
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
    return [i for i in items if i]


def _wrapped(lines: list[str]) -> list[tuple[int, str, list[str], str]]:
    """Every bracket a line opens and a later line of the same indent closes: (line number, the
    opening line, the item lines between, the closing line). The SQL is left out."""
    found = []
    in_sql = False
    for n, line in enumerate(lines):
        if line.count('"""') % 2 == 1 or line.count("'''") % 2 == 1:
            in_sql = not in_sql
        if in_sql or not line.rstrip().endswith(("(", "{", "[")) or line.lstrip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        end = next(k for k in range(n + 1, len(lines))
                   if lines[k].strip() and len(lines[k]) - len(lines[k].lstrip()) <= indent)
        found.append((n + 1, line, lines[n + 1:end], lines[end]))
    return found


@pytest.mark.parametrize("path", MODULES, ids=_id)
def test_wrapped_items_fill_their_lines_and_only_wrap_when_they_must(path: Path) -> None:
    """A call's parameter dict, a signature and the tail's Operations stay on one line when they
    fit in 100 columns; otherwise their items fill the continuation lines (not one a line), and
    the plain function wraps where its async twin must."""
    lines = path.read_text(encoding="utf-8").splitlines()
    twins = any(line.startswith("ASYNC_OPS") for line in lines)
    wrong = []
    for number, first, inner, close in _wrapped(lines):
        if not inner or any(line.rstrip().endswith(("(", "{", "[")) for line in inner):
            continue  # a nested block (a class or descriptor body), checked on its own lines
        if first.startswith(("from ", "DESCRIPTOR")):
            continue  # the import, as isort writes it; the descriptor, in groups of fields
        items = [i for line in inner for i in _items(line)]
        one = first.rstrip() + ", ".join(items) + close.strip().lstrip(",")
        if twins and "await " not in one:  # the twin's line is longer; both wrap alike
            one = one.replace("_v.mysql_execute(", "await _v.mysql_execute_async(").replace(
                " conn.execute(", " await conn.execute(")
        if len(one) <= LINE:
            wrong.append(f"line {number}: fits on one line: {one.strip()}")
        for k, (line, below) in enumerate(zip(inner, inner[1:], strict=False)):
            if len(line) + 1 + len(_items(below)[0]) + 1 <= LINE:
                wrong.append(f"line {number + 1 + k}: not filled: {line.strip()}")
    assert wrong == [], f"{_id(path)}:\n" + "\n".join(wrong)


def test_modules_keep_the_blank_lines_pep8_asks_for_and_no_more() -> None:
    """Two blank lines around each top-level definition, one at most elsewhere: ruff's
    pycodestyle blank-line rules (E301-E306, in preview) pass on every committed module."""
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--isolated",
                             "--preview", "--select", "E3", "--line-length", "100",
                             *map(str, MODULES)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
