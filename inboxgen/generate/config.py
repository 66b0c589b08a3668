"""Project settings: `[tool.inboxgen]` in the nearest pyproject.toml."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import attrs

from inboxgen.errors import ConfigError

DEFAULT_SPECS = "specs"
DEFAULT_OUT = "generated"


@attrs.frozen
class Project:
    root: Path  # the folder holding pyproject.toml (or the working folder)
    specs: Path
    out: Path

    def display(self, path: Path) -> str:
        """A path as messages and generated headers show it: relative to the root, with / (a
        path outside the project starts with ../; one on another drive stays as it is)."""
        try:
            return Path(os.path.relpath(path.resolve(), self.root.resolve())).as_posix()
        except ValueError:
            return path.as_posix()


def find_project(start: Path | None = None) -> Project:
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file():
            return _read(pyproject)
    return Project(here, here / DEFAULT_SPECS, here / DEFAULT_OUT)


def _read(pyproject: Path) -> Project:
    root = pyproject.parent
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except RecursionError:
        raise ConfigError(f"{pyproject.name}: cannot read project settings: arrays or "
                          f"inline tables nested too deeply") from None
    except (OSError, ValueError) as err:  # TOMLDecodeError, UnicodeDecodeError, a huge number
        reason = next(iter(str(err).splitlines()), "") or type(err).__name__
        raise ConfigError(f"{pyproject.name}: cannot read project settings: {reason}"
                          ) from None
    tool = data.get("tool", {})
    settings = tool.get("inboxgen", {}) if isinstance(tool, dict) else None
    if not isinstance(settings, dict):
        raise ConfigError(f"{pyproject.name}: [tool.inboxgen] must be a table")
    unknown = sorted(set(settings) - {"specs", "out"})
    if unknown:
        raise ConfigError(f"{pyproject.name}: unknown key(s) in [tool.inboxgen]: "
                          f"{', '.join(unknown)} (expected: specs, out)")
    values: dict[str, Path] = {}
    for key, default in (("specs", DEFAULT_SPECS), ("out", DEFAULT_OUT)):
        value = settings.get(key, default)
        if not isinstance(value, str):
            raise ConfigError(f"{pyproject.name}: [tool.inboxgen] {key} must be a path string")
        values[key] = root / value
    return Project(root, values["specs"], values["out"])
