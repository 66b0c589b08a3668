"""Behind a transaction pooler (PgBouncer, pool_mode = transaction) session features break: the
advisory form, the counted row lock and a limited one (each holds its jobs with session locks)
are refused, and a lease worker polls instead of listening."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from dbcases import Layout, queue_parts
from servers import PostgresServer

from generated_examples import chat, ledger, mailer
from inboxgen import Worker, WorkerConfigError, ack

REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def bouncer(pg_server: PostgresServer, pg_dsn: str) -> Iterator[str]:
    """A PgBouncer in transaction mode in front of the test database; yields its conninfo."""
    exe = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    assert Path(exe).is_file(), "PgBouncer is not installed (Debian package pgbouncer)"
    dbname = psycopg.conninfo.conninfo_to_dict(pg_dsn)["dbname"]
    folder = Path(tempfile.mkdtemp(prefix="inboxgen-pgbouncer-", dir="/tmp"))
    port = _free_port()
    (folder / "users.txt").write_text('"postgres" ""\n')
    (folder / "pgbouncer.ini").write_text(
        f"[databases]\n{dbname} = host=127.0.0.1 port={pg_server.port} dbname={dbname}\n"
        f"[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\n"
        f"unix_socket_dir =\nauth_type = trust\nauth_file = {folder}/users.txt\n"
        f"pool_mode = transaction\ndefault_pool_size = 4\nserver_round_robin = 1\n"
        f"logfile = {folder}/pgbouncer.log\n")
    command = [exe, str(folder / "pgbouncer.ini")]
    if os.geteuid() == 0:  # PgBouncer will not run as root
        shutil.chown(folder, "postgres")
        for f in folder.iterdir():
            shutil.chown(f, "postgres")
        command = ["runuser", "-u", "postgres", "--", *command]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    dsn = f"host=127.0.0.1 port={port} dbname={dbname} user=postgres"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                psycopg.connect(dsn).close()
                break
            except psycopg.OperationalError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log = folder / "pgbouncer.log"
                    raise RuntimeError("PgBouncer did not start: " + (
                        log.read_text() if log.exists() else "no log")) from None
                time.sleep(0.1)
        yield dsn
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(folder, ignore_errors=True)


def _migrate(dsn: str, folder: str, schema: str | None = None) -> None:
    with psycopg.connect(dsn) as conn:
        if schema:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        for migration in sorted((REPO / "specs" / "migrations" / folder).glob("*.sql")):
            conn.execute(migration.read_text())


def _busy_pool(dsn: str) -> list[psycopg.Connection]:
    """Open server sessions in the pool, so consecutive transactions land on different ones."""
    conns = [psycopg.connect(dsn) for _ in range(3)]
    for c in conns:  # three transactions open at once take three server sessions
        c.execute("SELECT 1")
    for c in conns:
        c.commit()
    return conns


def _refused_at_start(descriptor: Any, bouncer: str, **settings: Any) -> None:
    """A worker of a form that holds session locks, started behind the pooler while other
    clients keep its pool busy, is refused: advisory locks do not hold there."""
    others = _busy_pool(bouncer)
    try:
        worker = Worker(descriptor, lambda job: ack(), database=bouncer, **settings)
        with pytest.raises(WorkerConfigError, match="behind a transaction pooler .* advisory "
                                                    "locks do not hold"):
            asyncio.run(worker.start())
    finally:
        for c in others:
            c.close()

def test_a_limited_row_lock_is_refused_behind_a_transaction_pooler(
        pg_dsn: str, bouncer: str, tmp_path: Path) -> None:
    """A row lock with [flow] concurrency, not counting crashes: its jobs hold seats, session
    locks, which a transaction pooler cannot keep."""
    module, ddl = queue_parts(tmp_path, "postgres", Layout(form="row_lock", processed=False,
                                                           concurrency=3))
    assert module.DESCRIPTOR.seats is not None and not module.DESCRIPTOR.count_crashes
    with psycopg.connect(pg_dsn) as conn:
        conn.execute(ddl)
    _refused_at_start(module.DESCRIPTOR, bouncer)


@pytest.mark.parametrize("example", ["ledger", "mailer"])
def test_forms_holding_session_locks_are_refused_behind_a_transaction_pooler(
        pg_dsn: str, bouncer: str, example: str) -> None:
    """The advisory form (ledger) and the counted row lock (mailer: max_attempts, so crashes
    count), whose counted rows' keys are session locks."""
    _migrate(pg_dsn, example)
    module = {"ledger": ledger, "mailer": mailer}[example]
    assert module.DESCRIPTOR.form == ("advisory" if example == "ledger" else "row_lock")
    _refused_at_start(module.DESCRIPTOR, bouncer,
                      **({"group": "emails"} if example == "mailer" else {}))


def test_a_lease_worker_polls_instead_of_listening_behind_a_transaction_pooler(
        pg_dsn: str, bouncer: str, caplog: pytest.LogCaptureFixture) -> None:
    _migrate(pg_dsn, "chat", schema="Chat")
    others = _busy_pool(bouncer)
    try:
        worker = Worker(chat.DESCRIPTOR, lambda job: ack(), database=bouncer, group="c1")

        async def start_and_stop() -> None:
            await worker.start()
            await worker.shutdown()

        asyncio.run(start_and_stop())
        assert worker.listen is False
        assert any("LISTEN cannot work: polling" in r.getMessage() for r in caplog.records)
    finally:
        for c in others:
            c.close()


def test_a_direct_connection_keeps_listening(pg_dsn: str) -> None:
    _migrate(pg_dsn, "chat", schema="Chat")
    worker = Worker(chat.DESCRIPTOR, lambda job: ack(), database=pg_dsn, group="c1")

    async def start_and_stop() -> None:
        await worker.start()
        await worker.shutdown()

    asyncio.run(start_and_stop())
    assert worker.listen is True
