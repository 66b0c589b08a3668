"""A virtual environment for tests that install into one (a wheel, the checkout): it sees the
packages of the environment running the tests, so that what it installs with --no-deps finds
its dependencies without fetching them."""

from __future__ import annotations

import site
import sys
import sysconfig
import venv
from pathlib import Path


def make_venv(folder: Path, *, with_pip: bool = False) -> Path:
    """A virtual environment at `folder` that sees the running environment's packages (also
    when that is itself a virtual environment, whose packages a new one's system site-packages
    would not include); with its own pip when `with_pip`. Returns its python."""
    venv.create(folder, system_site_packages=True, with_pip=with_pip)
    python = folder / "bin" / "python"
    if sys.prefix != sys.base_prefix:  # the tests run in a virtual environment
        version = f"python{sys.version_info.major}.{sys.version_info.minor}"
        purelib = folder / "lib" / version / "site-packages"
        running = [sysconfig.get_paths()["purelib"], *site.getsitepackages()]
        (purelib / "running_environment.pth").write_text(
            "".join(f"{p}\n" for p in dict.fromkeys(running)), encoding="utf-8")
    return python
