"""The public API is exactly what `__all__` says, at run time and for a type checker."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest

import inboxgen
import inboxgen.testing

REPO = Path(__file__).resolve().parents[2]
PUBLIC_MODULES = [inboxgen, inboxgen.testing]


@pytest.mark.parametrize("module", PUBLIC_MODULES, ids=lambda m: m.__name__)
def test_public_names_are_exactly_all(module: types.ModuleType) -> None:
    public = {name for name, value in vars(module).items()
              if not name.startswith("_") and not isinstance(value, types.ModuleType)}
    assert public == set(module.__all__)
    assert list(module.__all__) == sorted(module.__all__)


@pytest.mark.parametrize("module", PUBLIC_MODULES, ids=lambda m: m.__name__)
def test_type_checkers_see_every_public_name(module: types.ModuleType,
                                             tmp_path: Path) -> None:
    names = list(module.__all__)
    user = tmp_path / "user_code.py"
    user.write_text(f"from {module.__name__} import {', '.join(names)}\n\n"
                    + "".join(f"print({n})\n" for n in names), encoding="utf-8")
    # --strict implies --no-implicit-reexport: a name imported but not exported is an error.
    result = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental",
                             str(user)], cwd=REPO, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout
