"""A new virtual environment holding only some of the packages of the one running the tests, and
inboxgen from this checkout: a user's environment without the optional drivers
(`driverless_venv`).

`pip install` would fetch from the package index (sqlglot is not in this machine's local one),
so the environment gets the running one's installed distributions instead, offline: each
distribution named and what it requires (its files linked into a folder of the environment's
path, its metadata with them), and the checkout on the path as `pip install -e .` puts it.
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import venv
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Every package an inboxgen extra brings: a driver-less environment has none of them.
OPTIONAL = ("psycopg", "psycopg_pool", "pymysql", "asyncmy", "sqlalchemy", "django",
            "prometheus_client", "opentelemetry", "starlette", "uvicorn")


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(roots: Iterable[str]) -> dict[str, importlib.metadata.Distribution]:
    """The installed distributions `roots` name and those they require (extras left out; a
    requirement not installed here is one its environment markers leave out)."""
    found: dict[str, importlib.metadata.Distribution] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        if _key(name) in found:
            continue
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        found[_key(name)] = dist
        for requirement in dist.requires or ():
            if "extra ==" not in requirement:
                match = re.match(r"[A-Za-z0-9._-]+", requirement)
                if match:
                    todo.append(match.group(0))
    return found


def driverless_venv(folder: Path, packages: Iterable[str]) -> Path:
    """A virtual environment at `folder` (of the Python running the tests, without its
    site-packages) with `packages` and what they require, and inboxgen from the checkout.
    Returns its python."""
    venv.create(folder, with_pip=False)
    python = folder / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; "
                              "print(sysconfig.get_paths()['purelib'])"], check=True,
                             capture_output=True, text=True).stdout.strip()
    linked = folder / "linked"
    linked.mkdir()
    for dist in closure(packages).values():
        tops = {Path(str(f)).parts[0] for f in dist.files or ()}
        for top in sorted(tops):
            if top in ("..", "__pycache__") or (linked / top).exists():
                continue
            source = Path(str(dist.locate_file(top)))
            if source.exists():
                (linked / top).symlink_to(source)
    (Path(purelib) / "linked.pth").write_text(f"{linked}\n", encoding="utf-8")
    (Path(purelib) / "inboxgen_checkout.pth").write_text(f"{REPO}\n", encoding="utf-8")
    return python


def importable(python: Path, name: str) -> bool:
    """Whether `name` imports in the environment of `python`."""
    return subprocess.run([str(python), "-c", f"import {name}"], capture_output=True,
                          check=False).returncode == 0
