"""Build a spec and its DDL in a temporary project, and import the module it generates.

The generator is imported where a module is built, so that worker processes can import this
module for `import_path` without loading it.
"""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from inboxgen.generate.config import Project


def import_path(path: Path | str, name: str) -> ModuleType:
    """The Python file at `path`, imported as the module `name` (and registered under it)."""
    loader_spec = importlib.util.spec_from_file_location(name, path)
    assert loader_spec is not None and loader_spec.loader is not None
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[name] = module
    loader_spec.loader.exec_module(module)
    return module


def make_project(root: Path, spec: str, ddl: str, name: str = "jobs") -> Project:
    """Write `specs/<name>.toml` and `specs/<name>.sql` under root; the spec's ddl is that file."""
    from inboxgen.generate.config import Project

    specs = root / "specs"
    specs.mkdir(parents=True, exist_ok=True)
    (specs / f"{name}.sql").write_text(textwrap.dedent(ddl).lstrip(), encoding="utf-8")
    text = textwrap.dedent(spec).lstrip()
    if "ddl" not in text.split("[", 1)[0]:
        text = f'ddl = "{name}.sql"\n' + text
    (specs / f"{name}.toml").write_text(text, encoding="utf-8")
    return Project(root, specs, root / "generated")


def build_module(root: Path, spec: str, ddl: str, name: str = "jobs") -> ModuleType:
    """Generate the module for one spec and import it (under a name unique to `root`)."""
    from inboxgen.errors import CheckFailed
    from inboxgen.generate.build import generate, write

    project = make_project(root, spec, ddl, name)
    generated = generate(project, [project.specs / f"{name}.toml"])
    if not generated.ok:
        raise CheckFailed(generated.diagnostics)
    ((path, _),) = write(generated)
    return import_path(path, f"_inboxgen_test_{abs(hash(str(path)))}_{name}")


def ddl_of(root: Path, name: str = "jobs") -> str:
    return (root / "specs" / f"{name}.sql").read_text(encoding="utf-8")


REPO = Path(__file__).resolve().parent.parent


def example_parts(name: str) -> tuple[str, str]:
    """An example's spec (without its `ddl` line, for build_module) and its migrations' text."""
    spec = (REPO / "specs" / f"{name}.toml").read_text(encoding="utf-8")
    spec = "\n".join(line for line in spec.splitlines() if not line.startswith("ddl ="))
    folder = REPO / "specs" / "migrations" / name
    ddl = "\n".join(p.read_text(encoding="utf-8") for p in sorted(folder.glob("*.sql")))
    return spec, ddl
