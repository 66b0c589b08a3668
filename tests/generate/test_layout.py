"""A generated module reads top to bottom: the row classes and helpers, then each statement's SQL
followed by the function that runs it and its async twin, so the SQL and the code that binds
its parameters are read together. Checked on every module the repository commits."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MODULES = sorted([*(REPO / "generated_examples").glob("*.py"),
                  *(REPO / "tests" / "generate" / "golden").glob("*/expected/*.py"),
                  *(REPO / "bench" / "peers" / "generated").glob("*.py")])
# The connection types of the plain functions and of their async twins.
CONNECTIONS = {"psycopg.AsyncConnection[Any]": "psycopg.Connection[Any]",
               "_v.AsyncMySQLConnection": "pymysql.connections.Connection[Any]"}


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
