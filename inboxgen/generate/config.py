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
        """A path as messages and generated headers show it: relative to the root, with /."""
        try:
            return path.resolve().relative_to(self.root.resolve()).as_posix()
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
        raise ConfigError(f"{_shown(pyproject)}: cannot read project settings: arrays or "
                          f"inline tables nested too deeply") from None
    except (OSError, ValueError) as err:  # TOMLDecodeError, UnicodeDecodeError, a huge number
        reason = next(iter(str(err).splitlines()), "") or type(err).__name__
        raise ConfigError(f"{_shown(pyproject)}: cannot read project settings: {reason}"
                          ) from None
    tool = data.get("tool", {})
    settings = tool.get("inboxgen", {}) if isinstance(tool, dict) else None
    if not isinstance(settings, dict):
        raise ConfigError(f"{_shown(pyproject)}: [tool.inboxgen] must be a table")
    unknown = sorted(set(settings) - {"specs", "out"})
    if unknown:
        raise ConfigError(f"{_shown(pyproject)}: unknown key(s) in [tool.inboxgen]: "
                          f"{', '.join(unknown)} (expected: specs, out)")
    values: dict[str, Path] = {}
    for key, default in (("specs", DEFAULT_SPECS), ("out", DEFAULT_OUT)):
        value = settings.get(key, default)
        if not isinstance(value, str):
            raise ConfigError(f"{_shown(pyproject)}: [tool.inboxgen] {key} must be a path string")
        values[key] = root / value
    return Project(root, values["specs"], values["out"])


def _shown(path: Path) -> str:
    """pyproject.toml as messages show it: relative to the working folder (which lies in the
    project, the folder holding the file)."""
    return Path(os.path.relpath(path, Path.cwd().resolve())).as_posix()
