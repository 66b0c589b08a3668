"""MySQL/MariaDB servers: what a worker refuses at startup (the versions it accepts are
tests/unit/test_server_version.py's)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pymysql
import pytest
from dbcases import MakeQueue
from genutil import build_module, ddl_of
from mariadb_server import MariaDBServer
from semantics_util import PLAIN

from inboxgen import Worker, WorkerConfigError, ack

SPEC, DDL = PLAIN["mysql"]


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


def test_a_worker_on_mariadb_10_11_starts(queue: MakeQueue) -> None:
    q = queue("mysql", spec=SPEC, ddl=DDL)
    worker = Worker(q.mod.DESCRIPTOR, lambda job: ack(), database=q.target)

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
