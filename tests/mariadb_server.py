"""A throwaway MariaDB server for the test suite.

``MariaDBServer()`` runs ``mariadb-install-db`` in a fresh temporary directory and starts a
private ``mariadbd`` on a free TCP port of 127.0.0.1 with its own socket, binary log off, tuned
for speed. ``stop()`` shuts it down and removes the directory. A server that cannot start raises
``RuntimeError`` with the tail of its log: tests never skip for lack of a server.
"""

from __future__ import annotations

import atexit
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pymysql

__all__ = ["MariaDBServer"]

START_TIMEOUT_S = 60


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _exe(*names: str) -> str:
    for name in names:
        for folder in ("/usr/sbin", "/usr/bin", "/usr/local/bin"):
            path = Path(folder) / name
            if path.is_file():
                return str(path)
        found = shutil.which(name)
        if found:
            return found
    raise RuntimeError(f"MariaDB is not installed: none of {', '.join(names)} found "
                       f"(Debian package mariadb-server)")


class MariaDBServer:
    def __init__(self, *extra_args: str) -> None:
        self.extra_args = extra_args  # e.g. "--log-bin", "--binlog-format=STATEMENT"
        self.dir = Path(tempfile.mkdtemp(prefix="inboxgen-mariadb-"))
        self.datadir = self.dir / "data"
        self.socket = str(self.dir / "mysqld.sock")
        self.log = self.dir / "server.log"
        self.port = _free_port()
        self.host = "127.0.0.1"
        self._proc: subprocess.Popen[bytes] | None = None
        self._count = 0
        try:
            self._install()
            self._start()
        except BaseException:
            self.stop()
            raise
        atexit.register(self.stop)

    def _install(self) -> None:
        result = subprocess.run(
            [_exe("mariadb-install-db", "mysql_install_db"), "--user=root",
             f"--datadir={self.datadir}", "--auth-root-authentication-method=normal",
             "--skip-test-db"],
            capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"mariadb-install-db failed:\n{result.stdout}\n{result.stderr}")

    def _start(self) -> None:
        with open(self.log, "wb") as log:
            self._proc = subprocess.Popen(
                [_exe("mariadbd", "mysqld"), "--no-defaults", "--user=root",
                 f"--datadir={self.datadir}", f"--socket={self.socket}",
                 f"--port={self.port}", "--bind-address=127.0.0.1",
                 *(["--skip-log-bin"] if not self.extra_args else []),
                 "--skip-name-resolve", "--innodb-flush-log-at-trx-commit=0",
                 "--innodb-doublewrite=0", "--max-connections=300",
                 f"--pid-file={self.dir / 'mysqld.pid'}", f"--log-error={self.log}",
                 *self.extra_args],
                stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"mariadbd exited with {self._proc.returncode}:\n"
                                   f"{self.log_tail()}")
            try:
                pymysql.connect(**self.connect_args()).close()
                return
            except pymysql.err.OperationalError:
                time.sleep(0.2)
        raise RuntimeError(f"mariadbd did not accept connections in {START_TIMEOUT_S} s:\n"
                           f"{self.log_tail()}")

    def connect_args(self, database: str | None = None) -> dict[str, Any]:
        args: dict[str, Any] = {"host": self.host, "port": self.port, "user": "root",
                                "password": ""}
        if database:
            args["database"] = database
        return args

    def url(self, database: str) -> str:
        return f"mysql://root@{self.host}:{self.port}/{database}"

    def create_database(self, name: str | None = None) -> str:
        """A fresh database; returns its URL."""
        self._count += 1
        name = name or f"t_{self._count}"
        conn = pymysql.connect(**self.connect_args())
        try:
            with conn.cursor() as cur:
                cur.execute(f"CREATE DATABASE `{name}`")
        finally:
            conn.close()
        return self.url(name)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
        shutil.rmtree(self.dir, ignore_errors=True)
