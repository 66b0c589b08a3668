"""A throwaway MariaDB Galera cluster on loopback for the test suite.

``GaleraCluster(nodes)`` installs a data folder per node in a fresh temporary directory, starts
the first node as a new cluster and the others joining it (state transfer by rsync), each a
private ``mariadbd`` on free TCP ports of 127.0.0.1, and waits until every node is synced.
``kill(n)`` SIGKILLs one node's server (the others keep the cluster's quorum when they are
the majority) and ``rejoin(n)`` starts it again on its data folder, joining the running nodes,
and waits until it is synced. ``stop()`` shuts them down and removes the directory. A cluster
that cannot start raises ``RuntimeError`` with the tail of the failing node's log: tests never
skip for lack of one (Debian packages mariadb-server, galera-4 and rsync).
"""

from __future__ import annotations

import atexit
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pymysql
from mariadb_server import _exe, _free_port

__all__ = ["GaleraCluster"]

START_TIMEOUT_S = 120
# A node that stops answering is suspected after 2 s and dropped from the view after 4 s (the
# defaults, 5 s and 15 s, suit a network; on loopback they only lengthen a killed node's outage).
FAILURE_DETECTION = ("evs.keepalive_period=PT0.5S;evs.suspect_timeout=PT2S;"
                     "evs.inactive_timeout=PT4S;evs.install_timeout=PT4S")
PROVIDERS = ("/usr/lib/galera/libgalera_smm.so", "/usr/lib/libgalera_smm.so")


class GaleraCluster:
    def __init__(self, nodes: int = 2) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="inboxgen-galera-"))
        provider = next((p for p in PROVIDERS if Path(p).is_file()), None)
        if provider is None:
            raise RuntimeError(f"Galera is not installed: none of {', '.join(PROVIDERS)} "
                               f"(Debian package galera-4)")
        self.provider = provider
        self.ports = [_free_port() for _ in range(nodes)]
        self.group_ports = [_free_port() for _ in range(nodes)]
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._count = 0
        try:
            for n in range(nodes):
                self._install(n)
            for n in range(nodes):
                self._start(n)
        except BaseException:
            self.stop()
            raise
        atexit.register(self.stop)

    def _node_dir(self, n: int) -> Path:
        return self.dir / f"node{n}"

    def _install(self, n: int) -> None:
        data = self._node_dir(n) / "data"
        result = subprocess.run(
            [_exe("mariadb-install-db", "mysql_install_db"), "--user=root", f"--datadir={data}",
             "--auth-root-authentication-method=normal", "--skip-test-db"],
            capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"mariadb-install-db failed:\n{result.stdout}\n{result.stderr}")
        self._open_to_rsync(n)

    def _open_to_rsync(self, n: int) -> None:
        # The joiner's rsync daemon (state transfer) writes into the data folder as another
        # user (started by root, it runs as nobody): the throwaway folders are open to it, and
        # a rejoining node's files are its own, or it could not set their modes.
        nobody = pwd.getpwnam("nobody") if os.geteuid() == 0 else None
        for path in (self.dir, self._node_dir(n), *self._node_dir(n).rglob("*")):
            path.chmod(0o777 if path.is_dir() else 0o666)
            if nobody is not None and path != self.dir:
                os.chown(path, nobody.pw_uid, nobody.pw_gid)

    def _start(self, n: int, *, new_cluster: bool | None = None) -> None:
        node = self._node_dir(n)
        members = ",".join(f"127.0.0.1:{p}" for p in self.group_ports)
        args = [_exe("mariadbd", "mysqld"), "--no-defaults", "--user=root",
                f"--datadir={node / 'data'}", f"--socket={node / 'mysqld.sock'}",
                f"--port={self.ports[n]}", "--bind-address=127.0.0.1", "--skip-name-resolve",
                f"--pid-file={node / 'mysqld.pid'}", f"--log-error={node / 'server.log'}",
                "--innodb-flush-log-at-trx-commit=0", "--innodb-doublewrite=0",
                "--max-connections=300", "--binlog-format=ROW", "--innodb-autoinc-lock-mode=2",
                "--wsrep-on=ON", f"--wsrep-provider={self.provider}",
                "--wsrep-cluster-name=inboxgen", f"--wsrep-node-name=node{n}",
                f"--wsrep-cluster-address=gcomm://{members}",
                f"--wsrep-node-address=127.0.0.1:{self.group_ports[n]}",
                f"--wsrep-provider-options=gmcast.listen_addr=tcp://127.0.0.1:"
                f"{self.group_ports[n]};ist.recv_addr=127.0.0.1:{_free_port()};"
                f"{FAILURE_DETECTION}",
                f"--wsrep-sst-receive-address=127.0.0.1:{_free_port()}",
                "--wsrep-sst-method=rsync",
                *(["--wsrep-new-cluster"] if (n == 0 if new_cluster is None else new_cluster)
                  else [])]
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        self._procs[n] = proc
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"Galera node {n} exited with {proc.returncode}:\n"
                                   f"{self.log_tail(n)}")
            try:
                if self._status(n, "wsrep_local_state_comment") == "Synced":
                    return
            except pymysql.err.OperationalError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"Galera node {n} was not synced in {START_TIMEOUT_S} s:\n"
                           f"{self.log_tail(n)}")

    def connect_args(self, n: int, database: str | None = None) -> dict[str, Any]:
        args: dict[str, Any] = {"host": "127.0.0.1", "port": self.ports[n], "user": "root",
                                "password": ""}
        if database:
            args["database"] = database
        return args

    def url(self, n: int, database: str) -> str:
        return f"mysql://root@127.0.0.1:{self.ports[n]}/{database}"

    def create_database(self) -> str:
        """A fresh database (created on the first node, replicated to the others); its name."""
        self._count += 1
        name = f"t_{self._count}"
        conn = pymysql.connect(**self.connect_args(0))
        try:
            with conn.cursor() as cur:
                cur.execute(f"CREATE DATABASE `{name}`")
        finally:
            conn.close()
        return name

    def rolled_back(self) -> int:
        """Transactions the cluster aborted for another node's write (certification failures
        and brute-force aborts), summed over its nodes."""
        total = 0
        for n in range(len(self.ports)):
            conn = pymysql.connect(**self.connect_args(n))
            try:
                with conn.cursor() as cur:
                    cur.execute("SHOW STATUS WHERE Variable_name IN "
                                "('wsrep_local_cert_failures', 'wsrep_local_bf_aborts')")
                    total += sum(int(value) for _, value in cur.fetchall())
            finally:
                conn.close()
        return total

    def log_tail(self, n: int, lines: int = 40) -> str:
        try:
            text = (self._node_dir(n) / "server.log").read_text(errors="replace")
            return "\n".join(text.splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def kill(self, n: int) -> None:
        """SIGKILL node n's server, as a crashed host would lose it."""
        proc = self._procs[n]
        proc.kill()
        proc.wait()

    def rejoin(self, n: int) -> float:
        """Start node n again (after `kill`), joining the running nodes; the seconds until it
        was synced."""
        if self._procs[n].poll() is None:
            raise RuntimeError(f"Galera node {n} is still running")
        began = time.monotonic()
        self._open_to_rsync(n)
        self._start(n, new_cluster=False)
        return time.monotonic() - began

    def cluster_size(self, n: int) -> int:
        """The nodes node n sees in its primary component."""
        return int(self._status(n, "wsrep_cluster_size") or 0)

    def _status(self, n: int, name: str) -> str | None:
        """Node n's status variable `name` (SHOW STATUS), None where it has none."""
        conn = pymysql.connect(**self.connect_args(n))
        try:
            with conn.cursor() as cur:
                cur.execute("SHOW STATUS LIKE %s", (name,))
                row = cur.fetchone()
        finally:
            conn.close()
        return None if row is None else str(row[1])

    def stop(self) -> None:
        procs = [self._procs[n] for n in sorted(self._procs, reverse=True)]
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._procs = {}
        shutil.rmtree(self.dir, ignore_errors=True)
