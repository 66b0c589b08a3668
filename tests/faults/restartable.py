"""Private servers the fault suite may restart, kept apart from the session's shared ones.

- `RestartablePostgres`: tests/servers.py's PostgresServer plus `restart_immediate()`
  (`pg_ctl restart -m immediate`, the options of the first start kept). Fault databases set
  `synchronous_commit = on` (shapes.make_target), so an acknowledged commit survives it.
- `RestartableMariaDB`: tests/mariadb_server.py's MariaDBServer made crash-safe (commits flushed,
  `innodb_flush_log_at_trx_commit = 1`; the doublewrite buffer on: without it a table created
  moments before a SIGKILL was once found "corrupted" after the restart; the binary log off) plus
  `kill_and_restart()`: SIGKILL mariadbd, then start it again on the same port and data
  directory.
"""

from __future__ import annotations

import subprocess

from mariadb_server import MariaDBServer
from servers import OS_USER, START_TIMEOUT_S, PostgresServer


class RestartablePostgres(PostgresServer):
    def restart_immediate(self) -> None:
        cmd = [self._exe("pg_ctl"), "restart", "-D", str(self.data_dir), "-m", "immediate",
               "-w", "-t", str(START_TIMEOUT_S), "-l", str(self.log_file)]
        if self.as_root:
            cmd = ["runuser", "-u", OS_USER, "--", *cmd]
        # The postmaster inherits pg_ctl's descriptors: nothing may wait for them to close.
        proc = subprocess.run(cmd, cwd=self.base_dir, stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=START_TIMEOUT_S * 2, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"pg_ctl restart failed ({proc.returncode}):\n{self.log_tail()}")


class RestartableMariaDB(MariaDBServer):
    def __init__(self) -> None:
        super().__init__("--skip-log-bin", "--innodb-flush-log-at-trx-commit=1",
                         "--innodb-doublewrite=1")

    def kill_and_restart(self) -> None:
        assert self._proc is not None
        self._proc.kill()
        self._proc.wait(30)
        self._start()
