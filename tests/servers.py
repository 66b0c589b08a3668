"""Throwaway PostgreSQL servers for the test suite.

``PostgresServer()`` runs ``initdb`` in a fresh temporary directory and starts a
private ``postgres`` on a free TCP port of 127.0.0.1 (plus a private unix socket
directory), tuned for speed rather than durability.  ``stop()`` kills it and
removes the directory.

PostgreSQL refuses to run as root; when we are root every server binary is run as
the ``postgres`` OS user via ``runuser``.  Failure to start raises ``RuntimeError``
carrying the tail of the server log -- tests are never skipped for lack of a server.
"""

from __future__ import annotations

import atexit
import os
import re
import shlex
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

__all__ = ["PostgresServer", "find_pg_bindir"]

PG_ROOT = Path("/usr/lib/postgresql")
OS_USER = "postgres"
SUPERUSER = "postgres"
START_TIMEOUT_S = 30
_DBNAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")

_SETTINGS: dict[str, str] = {
    "listen_addresses": "127.0.0.1",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
}


def _version_key(path: Path) -> tuple[int, ...]:
    parts = re.findall(r"\d+", path.parent.name)
    return tuple(int(p) for p in parts)


def find_pg_bindir() -> Path:
    """Directory holding initdb/pg_ctl/postgres: newest /usr/lib/postgresql/*/bin, else PATH."""
    candidates = sorted(PG_ROOT.glob("*/bin"), key=_version_key, reverse=True)
    for bindir in candidates:
        if all((bindir / exe).is_file() for exe in ("initdb", "pg_ctl", "postgres")):
            return bindir
    found = [shutil.which(exe) for exe in ("initdb", "pg_ctl", "postgres")]
    if all(found):
        return Path(str(found[0])).resolve().parent
    raise RuntimeError(
        "PostgreSQL server binaries (initdb, pg_ctl, postgres) not found in "
        f"{PG_ROOT}/*/bin or on PATH; install the Debian package 'postgresql'"
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _world_traversable(path: Path) -> bool:
    """True if every ancestor of ``path`` can be entered by an unprivileged user."""
    for p in [path, *path.parents]:
        try:
            if not os.stat(p).st_mode & 0o001:
                return False
        except OSError:
            return False
    return True


class PostgresServer:
    """A running, private PostgreSQL server; started by the constructor."""

    host: str
    port: int

    def __init__(self, *, durable: bool = False) -> None:
        # durable: the server's stock fsync, synchronous_commit and full_page_writes (for
        # benchmarks that measure what users run); otherwise tuned for speed.
        self.durable = durable
        self.bindir = find_pg_bindir()
        self.as_root = os.geteuid() == 0
        parent: str | None = None
        if self.as_root and not _world_traversable(Path(tempfile.gettempdir())):
            parent = "/tmp"
        self.base_dir = Path(tempfile.mkdtemp(prefix="inboxgen-pg-", dir=parent))
        self.data_dir = self.base_dir / "data"
        self.socket_dir = self.base_dir / "sock"
        self.log_file = self.base_dir / "server.log"
        self.host = "127.0.0.1"
        self.port = 0
        self._running = False
        self._removed = False
        atexit.register(self.stop)
        try:
            self._prepare_dirs()
            self._initdb()
            self._start()
        except BaseException:
            self.stop()
            raise

    # -- context manager -------------------------------------------------------------

    def __enter__(self) -> PostgresServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- public API ------------------------------------------------------------------

    def conninfo(self, dbname: str = "postgres") -> str:
        """libpq conninfo string for ``dbname`` on this server."""
        return make_conninfo(host=self.host, port=str(self.port), user=SUPERUSER, dbname=dbname)

    def create_database(self, name: str) -> str:
        """Create database ``name``; return its conninfo string."""
        if not _DBNAME_RE.fullmatch(name):
            raise ValueError(f"unsafe database name: {name!r}")
        with psycopg.connect(self.conninfo("postgres"), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.conninfo(name)

    def stop(self) -> None:
        """Stop the server immediately and remove its directory (idempotent)."""
        if self._removed:
            return
        try:
            if self._running or (self.data_dir / "postmaster.pid").exists():
                self._run(
                    [
                        self._exe("pg_ctl"),
                        "stop",
                        "-D",
                        str(self.data_dir),
                        "-m",
                        "immediate",
                        "-w",
                        "-t",
                        str(START_TIMEOUT_S),
                    ],
                    check=False,
                )
        finally:
            self._running = False
            self._removed = True
            atexit.unregister(self.stop)
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_file.read_text(errors="replace")
        except OSError:
            return "(no server log)"
        return "\n".join(text.splitlines()[-lines:])

    # -- internals -------------------------------------------------------------------

    def _exe(self, name: str) -> str:
        return str(self.bindir / name)

    def _run(self, args: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = ["runuser", "-u", OS_USER, "--", *args] if self.as_root else args
        proc = subprocess.run(
            cmd,
            cwd=self.base_dir,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT_S * 2,
            check=False,
        )
        if check and proc.returncode != 0:
            raise RuntimeError(
                f"command failed (exit {proc.returncode}): {shlex.join(cmd)}\n"
                f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}\n"
                f"server log tail:\n{self.log_tail()}"
            )
        return proc

    def _prepare_dirs(self) -> None:
        self.socket_dir.mkdir(mode=0o700)
        if self.as_root:
            for p in (self.base_dir, self.socket_dir):
                shutil.chown(p, user=OS_USER, group=OS_USER)
        os.chmod(self.base_dir, 0o700)

    def _initdb(self) -> None:
        self._run(
            [
                self._exe("initdb"),
                "-D",
                str(self.data_dir),
                "-U",
                SUPERUSER,
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ]
        )

    def _start(self) -> None:
        last_error: RuntimeError | None = None
        for _attempt in range(3):  # a just-probed free port can be taken by someone else
            self.port = _free_port()
            settings = {
                **{k: v for k, v in _SETTINGS.items()
                   if not self.durable or k in ("listen_addresses", "max_connections")},
                "port": str(self.port),
                "unix_socket_directories": str(self.socket_dir),
            }
            opts = " ".join(f"-c {shlex.quote(f'{k}={v}')}" for k, v in settings.items())
            proc = self._run(
                [
                    self._exe("pg_ctl"),
                    "start",
                    "-D",
                    str(self.data_dir),
                    "-l",
                    str(self.log_file),
                    "-w",
                    "-t",
                    str(START_TIMEOUT_S),
                    "-o",
                    opts,
                ],
                check=False,
            )
            if proc.returncode == 0:
                self._running = True
                return
            last_error = RuntimeError(
                f"PostgreSQL failed to start on 127.0.0.1:{self.port} "
                f"(pg_ctl exit {proc.returncode}) in {self.base_dir}\n"
                f"pg_ctl stdout:\n{proc.stdout}\npg_ctl stderr:\n{proc.stderr}\n"
                f"server log tail:\n{self.log_tail()}"
            )
            # pg_ctl -w may time out while the postmaster is still alive: kill it
            self._run(
                [self._exe("pg_ctl"), "stop", "-D", str(self.data_dir), "-m", "immediate", "-w"],
                check=False,
            )
            if "already in use" not in self.log_tail():
                break
        assert last_error is not None
        raise last_error

    def __repr__(self) -> str:
        return f"<PostgresServer {self.host}:{self.port} {self.base_dir}>"
