"""The service's own code, imported by the commands: a `worker` target and a typed payload's
class. Its folder goes first on sys.path, because the installed `inboxgen` script's sys.path
starts with the script's own folder, not the working folder. A failure is one line naming what
was imported and why it failed, never a traceback."""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from pathlib import Path
from types import ModuleType

from inboxgen.errors import ConfigError


def on_path(folder: Path) -> None:
    """Make the packages in `folder` importable, as `python -m` does for the working folder."""
    entry = str(folder)
    if entry not in sys.path:
        sys.path.insert(0, entry)


def why(err: BaseException, folder: Path) -> str:
    """One line saying why an import failed: the error and, for anything but a module not found,
    its type; where in the code of `folder` it was raised, when it was."""
    def shown(path: str) -> str:
        relative = os.path.relpath(path, folder)
        return path if relative.startswith(os.pardir) else Path(relative).as_posix()

    if isinstance(err, SyntaxError) and err.filename:
        return f"SyntaxError: {err.msg} ({shown(err.filename)}:{err.lineno})"
    first = next(iter(str(err).splitlines()), "")
    text = first if isinstance(err, ImportError) else (
        f"{type(err).__name__}: {first}" if first else type(err).__name__)
    inside = [f for f in traceback.extract_tb(err.__traceback__)
              if not f.filename.startswith("<") and not os.path.isabs(shown(f.filename))]
    if inside:
        text += f" ({shown(inside[-1].filename)}:{inside[-1].lineno})"
    return text


def _import(name: str, folder: Path) -> tuple[ModuleType | None, str]:
    on_path(folder)
    try:
        return importlib.import_module(name), ""
    except Exception as err:  # the service's module may fail in any way while it is imported
        return None, why(err, folder)


def check_payload_type(type_: str, where: str, folder: Path) -> None:
    """Import `type_` ("package.module:Class", named at `where`, a spec's file and line) the way
    the generated module imports it; ConfigError saying why it cannot be."""
    module_name, _, name = type_.partition(":")
    module, failed = _import(module_name, folder)
    if module is not None and not hasattr(module, name):
        failed = f"module {module_name} has no attribute {name!r}"
    if failed:
        raise ConfigError(f"{where}: payload type {type_} cannot be imported: {failed}")
