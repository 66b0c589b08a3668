"""The service's own code, imported by the commands: a `worker` target and a typed payload's
class. Its folder goes first on sys.path, because the installed `inboxgen` script's sys.path
starts with the script's own folder, not the working folder. A failure is one line naming what
was imported and why it failed, never a traceback."""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import os
import site
import sys
import sysconfig
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

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
              if not f.filename.startswith("<") and not os.path.isabs(shown(f.filename))
              and not _installed(f.filename)]
    if inside:
        text += f" ({shown(inside[-1].filename)}:{inside[-1].lineno})"
    return text


def _installed(path: str) -> bool:
    """Whether `path` is a file of inboxgen's, of Python's standard library or of an installed
    package (a virtual environment in the project's folder holds those too), not the project's
    own code. (Not every file under Python's prefix: an application may live in /usr/src/app.)"""
    real = os.path.realpath(path)
    return any(real.startswith(root + os.sep) for root in _library_roots())


@functools.cache
def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    found = [str(Path(__file__).resolve().parents[1]),  # the inboxgen package
             *(paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths),
             *site.getsitepackages()]
    with contextlib.suppress(AttributeError):  # (a site module without user site packages)
        found.append(site.getusersitepackages())
    return tuple(sorted({os.path.realpath(p) for p in found}))


def _import(name: str, folder: Path) -> tuple[ModuleType | None, str]:
    on_path(folder)
    try:
        return importlib.import_module(name), ""
    except Exception as err:  # the service's module may fail in any way while it is imported
        return None, why(err, folder)


def check_user_type(type_: str, role: str, where: str, folder: Path) -> None:
    """Import `type_` ("package.module:Class", the `role` column's type, named at `where`, a
    spec's file and line) the way the generated module imports it; ConfigError saying why it
    cannot be."""
    module_name, _, name = type_.partition(":")
    module, failed = _import(module_name, folder)
    if module is not None and not hasattr(module, name):
        failed = f"module {module_name} has no attribute {name!r}"
    if failed:
        raise ConfigError(f"{where}: {role} type {type_} cannot be imported: {failed}")


def load_worker(target: str, folder: Path) -> Any:
    """The Worker `target` ("package.module:name") names: a Worker, or a function taking no
    arguments that returns one. Anything else is a ConfigError saying what it is instead."""
    from inboxgen.runtime.worker import Worker

    return _load(target, folder, Worker, "worker")


def load_service(target: str, folder: Path) -> Any:
    """The Service `target` names (or a function taking no arguments that returns one)."""
    from inboxgen.runtime.service import Service

    return _load(target, folder, Service, "service")


def _load(target: str, folder: Path, kind: type, noun: str) -> Any:
    name = kind.__name__
    must = f"the target must be a {name} or a function returning one"
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"{noun} target must look like package.module:name, not {target!r}")
    module, failed = _import(module_name, folder)
    if module is None:
        raise ConfigError(f"{target}: cannot import {module_name}: {failed}")
    try:
        obj = getattr(module, attr)
    except AttributeError:
        raise ConfigError(f"{target}: module {module_name} has no attribute {attr!r}") from None
    if isinstance(obj, kind):
        return obj
    if callable(obj) and not isinstance(obj, type):
        try:
            inspect.signature(obj).bind()
        except TypeError:  # a handler, most likely: it takes the job
            params = ", ".join(inspect.signature(obj).parameters)
            raise ConfigError(f"{target} is not an inboxgen {name} but a function that takes "
                              f"arguments ({params}): {must}") from None
        except ValueError:  # no signature to read: calling it is the only way to know
            pass
        made = obj()
        if isinstance(made, kind):
            return made
        if inspect.iscoroutine(made):
            made.close()  # never awaited, and saying so would only add a warning
        raise ConfigError(f"{target} is not an inboxgen {name} but a function that returned "
                          f"{_what(made)}: {must}")
    raise ConfigError(f"{target} is not an inboxgen {name} but {_what(obj)}: {must}")


def _what(obj: object) -> str:
    """What `obj` is, in a few words (never its value, which may hold a secret)."""
    if obj is None:
        return "None"
    if isinstance(obj, type):
        return f"the class {obj.__name__}"
    if isinstance(obj, ModuleType):
        return "a module"
    name = type(obj).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"
