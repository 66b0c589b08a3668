"""Whether a MySQL or MariaDB server is one inboxgen runs on (the floors are in floors.py)."""

from __future__ import annotations

import re

import attrs

from inboxgen import floors
from inboxgen.errors import ServerTooOld

_VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:[-.+~].*)?$")


@attrs.frozen
class ServerVersion:
    flavor: str  # "MySQL" or "MariaDB"
    version: tuple[int, int, int]

    @property
    def floor(self) -> tuple[int, int, int]:
        major, minor, patch = (*(floors.MARIADB if self.flavor == "MariaDB"
                                 else floors.MYSQL).version, 0, 0)[:3]
        return major, minor, patch

    @property
    def supported(self) -> bool:
        return self.version >= self.floor

    def __str__(self) -> str:
        return f"{self.flavor} {'.'.join(map(str, self.version))}"


def parse_server_version(text: str) -> ServerVersion | None:
    """`SELECT VERSION()` as a flavor and version; None when it is not a version string.

    MariaDB reports itself with "-MariaDB"; a bare 10.x or 11.x (MariaDB's numbering, which MySQL
    never used) is MariaDB too.
    """
    m = _VERSION.match(text.strip())
    if m is None:
        return None
    version = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
    flavor = "MariaDB" if "mariadb" in text.lower() or version[0] in (10, 11, 12) else "MySQL"
    return ServerVersion(flavor, version)


def require_supported(text: str, *, worker: str = "", table: str = "") -> ServerVersion:
    """The server's version, or ServerTooOld naming the server and the floor it misses."""
    version = parse_server_version(text)
    if version is None or not version.supported:
        shown = str(version) if version else repr(text)
        my, maria = floors.MYSQL, floors.MARIADB
        raise ServerTooOld(f"the server is {shown}; inboxgen needs {my.server} {my.shown} or "
                           f"{maria.server} {maria.shown} or newer ({my.needs})", worker=worker,
                           table=table)
    return version
