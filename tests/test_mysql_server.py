"""MySQL/MariaDB servers: which versions inboxgen accepts, and what it refuses at startup."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pymysql
import pytest
from genutil import build_module, ddl_of
from mariadb_server import MariaDBServer

from inboxgen import ServerTooOld, Worker, WorkerConfigError, ack
from inboxgen.runtime.serverversion import parse_server_version, require_supported

ACCEPTED = ["8.0.1", "8.0.35", "8.4.2-log", "9.1.0", "10.6.0-MariaDB",
            "10.11.19-MariaDB-0+deb12u1", "11.4.2"]
REFUSED = ["8.0.0", "5.7.44-log", "10.5.22-MariaDB", "garbage", "8.0"]


@pytest.mark.parametrize("text", ACCEPTED)
def test_versions_inboxgen_runs_on(text: str) -> None:
    version = parse_server_version(text)
    assert version is not None and version.supported, text


@pytest.mark.parametrize("text", REFUSED)
def test_versions_inboxgen_refuses(text: str) -> None:
    version = parse_server_version(text)
    assert version is None or not version.supported, text


def test_flavor_and_floor_are_named() -> None:
    maria = parse_server_version("10.5.22-MariaDB")
    mysql = parse_server_version("5.7.44-log")
    assert maria is not None and str(maria) == "MariaDB 10.5.22"
    assert maria.floor == (10, 6, 0)
    assert mysql is not None and str(mysql) == "MySQL 5.7.44"
    assert mysql.floor == (8, 0, 1)


SPEC = """
table = "jobs"
dialect = "mysql"

[columns]
id = { role = "id", generated = true }
payload = { role = "payload", codec = "bytes" }
"""
DDL = """
CREATE TABLE jobs (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    payload BLOB NOT NULL
);
"""


def _create(args: dict[str, object], ddl: str) -> None:
    conn = pymysql.connect(**args)
    try:
        with conn.cursor() as cur:
            for statement in ddl.split(";"):
                if statement.strip():
                    cur.execute(statement)
        conn.commit()
    finally:
        conn.close()


def test_a_worker_on_mariadb_10_11_starts(tmp_path: Path, mariadb_server: MariaDBServer,
                                          mysql_url: str) -> None:
    module = build_module(tmp_path, SPEC, DDL)
    _create(mariadb_server.connect_args(mysql_url.rsplit("/", 1)[1]), ddl_of(tmp_path))
    worker = Worker(module.DESCRIPTOR, lambda job: ack(), database=mysql_url)

    async def start_and_stop() -> None:
        await worker.start()
        await worker.shutdown()

    asyncio.run(start_and_stop())


def test_statement_binlog_format_is_refused_with_a_reason(tmp_path: Path) -> None:
    server = MariaDBServer("--log-bin=binlog", "--binlog-format=STATEMENT", "--server-id=1")
    try:
        url = server.create_database("q")
        module = build_module(tmp_path, SPEC, DDL)
        _create(server.connect_args("q"), ddl_of(tmp_path))
        worker = Worker(module.DESCRIPTOR, lambda job: ack(), database=url)
        with pytest.raises(WorkerConfigError, match="binlog_format is STATEMENT, which refuses "
                                                    "the READ COMMITTED transactions"):
            asyncio.run(worker.start())
    finally:
        server.stop()


@pytest.mark.parametrize(("text", "shown"), [("10.5.22-MariaDB", "MariaDB 10.5.22"),
                                             ("5.7.44-log", "MySQL 5.7.44"),
                                             ("garbage", "'garbage'")])
def test_server_too_old_names_server_and_floor(text: str, shown: str) -> None:
    with pytest.raises(ServerTooOld) as caught:
        require_supported(text, worker="mailer", table="email_jobs")
    assert str(caught.value) == (
        f"the server is {shown}; inboxgen needs MySQL 8.0.1 or MariaDB 10.6 or newer (SKIP "
        f"LOCKED) (worker mailer, table email_jobs)")
    assert caught.value.table == "email_jobs"
