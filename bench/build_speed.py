"""Time `inboxgen build` of many specs: copies of the example specs (each under its own name) in a
temporary project, built in one process as the command does. Not a test: the figure depends on
the machine.

    python bench/build_speed.py [N]     # N specs, default 100

Prints the wall time and the CPU time of the build (spec loading, catalog replay, checks,
statements, rendering; writing the modules included), best of three runs.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

from inboxgen.cli import main  # noqa: E402


def make_project(root: Path, count: int) -> None:
    """`count` specs, cycling through the examples, with the examples' migrations."""
    specs = root / "specs"
    shutil.copytree(REPO / "specs" / "migrations", specs / "migrations")
    examples = sorted((REPO / "specs").glob("*.toml"))
    for i in range(count):
        source = examples[i % len(examples)]
        (specs / f"{source.stem}_{i:03d}.toml").write_text(
            source.read_text(encoding="utf-8"), encoding="utf-8")
    (root / "pyproject.toml").write_text(
        '[tool.inboxgen]\nspecs = "specs"\nout = "generated"\n', encoding="utf-8")


def build_once(root: Path) -> tuple[float, float]:
    shutil.rmtree(root / "generated", ignore_errors=True)
    here = Path.cwd()
    os.chdir(root)
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        with contextlib.redirect_stdout(io.StringIO()):
            status = main(["build"])
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        os.chdir(here)
    if status != 0:
        raise SystemExit(f"build failed with exit code {status}")
    return wall, cpu


def run(count: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_project(root, count)
        runs = [build_once(root) for _ in range(3)]
    wall = min(w for w, _ in runs)
    cpu = min(c for _, c in runs)
    print(f"inboxgen build of {count} specs: {wall:.2f} s wall, {cpu:.2f} s CPU "
          f"(best of 3; {wall / count * 1000:.1f} ms per spec)")


if __name__ == "__main__":
    run(int(sys.argv[1]) if len(sys.argv) > 1 else 100)
