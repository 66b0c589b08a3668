"""The oldest servers inboxgen runs on, in one table: the build checks a spec's server_version
against it, and a MySQL/MariaDB worker the server it connects to."""

from __future__ import annotations

import attrs


@attrs.frozen
class Floor:
    server: str  # as messages name it
    version: tuple[int, ...]
    needs: str  # what older servers lack

    @property
    def shown(self) -> str:
        return ".".join(map(str, self.version))


POSTGRES = Floor("PostgreSQL", (9, 5), "SKIP LOCKED")
# The advisory form's keys and FIFO groups' guards hash text with hashtextextended().
POSTGRES_KEY_HASH = Floor("PostgreSQL", (11,), "hashtextextended()")
MYSQL = Floor("MySQL", (8, 0, 1), "SKIP LOCKED")
MARIADB = Floor("MariaDB", (10, 6), "SKIP LOCKED")
SQLITE = Floor("SQLite", (3, 35), "RETURNING")
