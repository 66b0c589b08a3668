"""The package's import graph: no module imports itself back through others (every import
counts, those under TYPE_CHECKING and inside functions too), and the parts below the worker
never import it; and the worker keeps to its size."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "inboxgen"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imports(name: str, path: Path) -> set[str]:
    """The package's modules that module `name` imports, wherever in it the import stands."""
    found = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            # `from a.b import c` imports the module a.b.c where there is one, else a.b.
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base
                       for a in node.names]
        else:
            continue
        found.update(t for t in targets if t in MODULES and t != name)
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _cycles() -> list[list[str]]:
    """Every cycle, each found once from its smallest module (Tarjan's components would say
    which modules; the paths say how)."""
    cycles = []
    for start in sorted(GRAPH):
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in sorted(GRAPH[node]):
                if nxt == start:
                    cycles.append(path + [start])
                elif nxt > start and nxt not in path:
                    stack.append((nxt, path + [nxt]))
        if len(cycles) > 20:
            break
    return cycles


def test_the_graph_was_read() -> None:
    assert "inboxgen.runtime.worker" in GRAPH
    assert "inboxgen.runtime.forms.base" in GRAPH["inboxgen.runtime.forms.row_lock"]


def test_no_import_cycle() -> None:
    assert [" -> ".join(c) for c in _cycles()] == []


def test_nothing_below_the_worker_imports_it() -> None:
    below = [n for n in GRAPH if n.startswith(("inboxgen.runtime.backends",
                                              "inboxgen.runtime.forms"))
             or n in {"inboxgen.runtime.listener", "inboxgen.runtime.watcher",
                      "inboxgen.runtime.connecting", "inboxgen.runtime.delivery",
                      "inboxgen.runtime.outage", "inboxgen.runtime.slots",
                      "inboxgen.runtime.clocksync", "inboxgen.runtime.signals"}]
    assert len(below) > 10
    assert [n for n in below if "inboxgen.runtime.worker" in GRAPH[n]] == []


# The size the runtime's shape set for worker.py (docs/runtime.md): its lifecycle, signals and
# the slot loop. What grows in belongs to another module (the clock's readings in clocksync.py,
# the wake-ups a listener or a commit brings in slots.py, the checks of a start in
# connecting.py), and moves there.
WORKER_LINES = 350


def test_the_worker_keeps_to_its_size() -> None:
    lines = len((PACKAGE / "runtime" / "worker.py").read_text(encoding="utf-8").splitlines())
    assert lines <= WORKER_LINES, f"runtime/worker.py has {lines} lines, more than " \
                                  f"{WORKER_LINES}: move what is not its own to its module"
