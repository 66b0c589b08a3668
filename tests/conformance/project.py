"""The conformance matrix's project: every shape of the level's covering array (axes.py) and
one refused shape per reason and dialect, as specs and migrations a user would write, built
with `inboxgen build` once for the session.

INBOXGEN_CONFORMANCE picks the level: `pairs` (the default), `triples` or `full`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from conformance import shapes
from conformance.axes import Shape, covering_array, refusal, refused_probes

LEVEL = os.environ.get("INBOXGEN_CONFORMANCE", "pairs")
SHAPES = covering_array(LEVEL)
PROBES = refused_probes()


@dataclass
class Project:
    root: Path
    build: subprocess.CompletedProcess[str]  # of every valid shape
    refused: subprocess.CompletedProcess[str]  # of the refused shapes (a build fails whole)

    def module_path(self, s: Shape) -> Path:
        return self.root / "generated" / f"{s.name}.py"

    def errors_of(self, s: Shape) -> list[str]:
        """The build's error lines about shape s's spec."""
        output = self.refused.stderr if refusal(s) is not None else self.build.stderr
        return [line for line in output.splitlines()
                if line.startswith(f"specs/{s.name}.toml:") and ": warning:" not in line]


def write_project(root: Path, every: list[Shape]) -> None:
    (root / "specs" / "migrations").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[tool.inboxgen]\nspecs = "specs"\n'
                                         'out = "generated"\n')
    (root / f"{shapes.PAYLOAD_MODULE}.py").write_text(shapes.PAYLOAD_SOURCE)
    for s in every:
        (root / "specs" / "migrations" / f"{s.name}.sql").write_text(shapes.ddl(s))
        (root / "specs" / f"{s.name}.toml").write_text(shapes.spec(s))


def shape_id(s: Shape) -> str:
    return s.name


def located(line: str) -> bool:
    """An error line names its spec file and line: `specs/x.toml:12: error: ...`."""
    return re.match(r"specs/[\w.]+\.toml:\d+: ", line) is not None




def build_project(root: Path) -> Project:
    """Write every shape's spec and migration under `root` and build them (the refused ones
    apart: a build with one error writes nothing)."""
    write_project(root, SHAPES + PROBES)

    def build(which: list[Shape]) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "inboxgen", "build",
                               *(f"specs/{s.name}.toml" for s in which)], cwd=root,
                              capture_output=True, text=True, timeout=900)

    return Project(root, build(SHAPES), build(PROBES))
