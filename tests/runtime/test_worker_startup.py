"""A worker that cannot reach its database says so at once, in one line naming host, port,
database and user (never the password): a wrong password, an unknown database, a malformed
address, a missing SQLite file. A server that is not there yet is tried again until the connect
timeout, and a signal during that wait stops the worker promptly."""

from __future__ import annotations

import datetime as dt
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from dbcases import Layout, MakeQueue, Queue
from genutil import build_module
from semantics_util import PLAIN, SECRET, start, worker_app

from inboxgen import ConnectFailed, Worker, WorkerConfigError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def password_user(pg_server: Any, pg_jobs: Queue) -> str:
    """A role that must give its password over TCP (the test server trusts everyone else)."""
    with psycopg.connect(pg_jobs.target, autocommit=True) as conn:
        # Roles are the server's, shared by the tests' databases: made once.
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = 'pw_user'").fetchone()
        if exists is None:
            conn.execute(f"CREATE ROLE pw_user LOGIN PASSWORD '{SECRET}'")
        conn.execute("GRANT ALL ON ALL TABLES IN SCHEMA public TO pw_user")
    hba = pg_server.data_dir / "pg_hba.conf"
    original = hba.read_text()
    if "pw_user" not in original:
        hba.write_text(f"host all pw_user 127.0.0.1/32 scram-sha-256\n{original}")
    with psycopg.connect(pg_jobs.target, autocommit=True) as conn:
        conn.execute("SELECT pg_reload_conf()")
    return "pw_user"


def test_a_wrong_password_fails_at_once_naming_the_server_not_the_password(
        pg_jobs: Queue, pg_server: Any, password_user: str) -> None:
    dbname = psycopg.conninfo.conninfo_to_dict(pg_jobs.target)["dbname"]
    url = f"postgresql://{password_user}:wrong-{SECRET}@127.0.0.1:{pg_server.port}/{dbname}"
    worker = Worker(pg_jobs.mod.DESCRIPTOR, lambda job: None, database=url)
    began = time.monotonic()
    err = start(worker)
    assert time.monotonic() - began < 5, "a refused password is not retried"
    assert isinstance(err, ConnectFailed), err
    text = str(err)
    assert f"127.0.0.1:{pg_server.port}" in text and dbname in text and "pw_user" in text
    assert "password authentication failed" in text
    assert SECRET not in text and "\n" not in text
    # The right password works, through the same path.
    good = Worker(pg_jobs.mod.DESCRIPTOR, lambda job: None,
                  database=url.replace(f"wrong-{SECRET}", SECRET))
    assert start(good) is None


def test_an_unknown_database_fails_at_once(pg_jobs: Queue, pg_server: Any) -> None:
    url = f"postgresql://postgres@127.0.0.1:{pg_server.port}/no_such_db"
    err = start(Worker(pg_jobs.mod.DESCRIPTOR, lambda job: None, database=url))
    assert isinstance(err, ConnectFailed), err
    assert "no_such_db" in str(err) and "does not exist" in str(err)


def test_a_malformed_address_is_refused_when_the_worker_is_built(pg_jobs: Queue) -> None:
    with pytest.raises(WorkerConfigError) as caught:
        Worker(pg_jobs.mod.DESCRIPTOR, lambda job: None,
               database=f"host=db password={SECRET} dbname")
    assert "neither a PostgreSQL connection string" in str(caught.value)
    assert SECRET not in str(caught.value)


def test_a_server_that_is_not_there_is_tried_until_the_connect_timeout(
        pg_jobs: Queue, caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()  # nothing listens there
    worker = Worker(pg_jobs.mod.DESCRIPTOR, lambda job: None, connect_timeout=1.5,
                    database=f"postgresql://postgres:{SECRET}@127.0.0.1:{port}/app")
    began = time.monotonic()
    err = start(worker)
    took = time.monotonic() - began
    assert isinstance(err, ConnectFailed), err
    assert 1.4 <= took < 6, took
    assert f"127.0.0.1:{port}" in str(err) and "within 1.5 s" in str(err)
    waits = [r for r in caplog.records if "trying again" in r.getMessage()]
    assert len(waits) == 1, "one line for the outage, not one per attempt"
    assert all(SECRET not in r.getMessage() for r in caplog.records)


def test_a_missing_sqlite_file_fails_naming_it_and_is_not_created(tmp_path: Path) -> None:
    module = build_module(tmp_path, *PLAIN["sqlite"])
    missing = tmp_path / "typo.sqlite3"
    err = start(Worker(module.DESCRIPTOR, lambda job: None, database=missing))
    assert isinstance(err, ConnectFailed), err
    assert str(missing) in str(err) and "no such file" in str(err)
    assert not missing.exists()


def test_mariadb_access_denied_and_unknown_database_fail_at_once(
        tmp_path: Path, mariadb_server: Any) -> None:
    module = build_module(tmp_path, *PLAIN["mysql"])
    host = f"{mariadb_server.host}:{mariadb_server.port}"
    for url, reason in ((f"mysql://nobody:{SECRET}@{host}/app", "Access denied"),
                        (f"mysql://root@{host}/no_such_db", "Unknown database")):
        began = time.monotonic()
        err = start(Worker(module.DESCRIPTOR, lambda job: None, database=url))
        assert time.monotonic() - began < 5
        assert isinstance(err, ConnectFailed), err
        assert host in str(err) and reason in str(err) and SECRET not in str(err)


def test_sigterm_while_waiting_for_the_server_stops_the_worker_at_once(tmp_path: Path,
                                                                       pg_jobs: Queue) -> None:
    port = free_port()
    cmd, env = worker_app(tmp_path, pg_jobs.mod, "app_under_test",
                          f"worker = Worker(m.DESCRIPTOR, lambda job: None, connect_timeout=60,\n"
                          f"                database='postgresql://postgres@127.0.0.1:{port}/app')\n")
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        line = ""
        assert proc.stderr is not None
        while "trying again" not in line and time.monotonic() < deadline:
            line = proc.stderr.readline()
        assert "trying again" in line, line
        proc.send_signal(signal.SIGTERM)
        began = time.monotonic()
        code = proc.wait(10)
        assert time.monotonic() - began < 3
        rest = proc.stderr.read()
    finally:
        proc.kill()
    assert code == 0
    assert "Traceback" not in rest


def test_a_second_signal_stops_at_once_and_the_exit_says_what_was_done(
        tmp_path: Path, queue: MakeQueue) -> None:
    spec, ddl = PLAIN["sqlite"]
    q = queue("sqlite", spec=spec, ddl=ddl)
    module, db = q.mod, q.target
    conn = q.connect()
    module.insert_many(conn, [module.NewRow(payload=b"quick"), module.NewRow(payload=b"slow")])
    conn.commit()
    started = tmp_path / "started"
    cmd, env = worker_app(tmp_path, module, "lifecycle_app",
                          "import time\n"
                          "def handle(job):\n"
                          "    if job.payload == b'slow':\n"
                          f"        open({str(started)!r}, 'w').close()\n"
                          "        time.sleep(60)\n"
                          f"worker = Worker(m.DESCRIPTOR, handle, database={str(db)!r}, "
                          "shutdown_timeout=30)\n")
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert started.exists()
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert proc.poll() is None, "the first signal waits for the job in work"
        proc.send_signal(signal.SIGTERM)
        began = time.monotonic()
        code = proc.wait(10)
        assert time.monotonic() - began < 3
        assert proc.stderr is not None
        err = proc.stderr.read()
    finally:
        proc.kill()
    assert code == 0
    assert "waiting up to 30 s for 1 job(s) in work" in err
    assert "again: stopping at once" in err
    assert "stopped: 2 delivered, 1 acked" in err
    assert "Traceback" not in err


def test_a_second_signal_that_cuts_a_statement_short_tells_no_lost_connection(
        tmp_path: Path, queue: MakeQueue) -> None:
    """The second SIGINT cancels a claim whose statement is under way (here MariaDB's, waiting
    for a row lock another session holds): asyncmy closes the connection it cancels. That is
    the stop the operator asked for, not an outage: no WARNING or ERROR says a connection was
    lost or claims failed."""
    q = queue("mysql", Layout(form="advisory", processed=False))
    conn = q.connect()
    q.mod.insert(conn, q.new(retry_after=dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)))
    conn.commit()
    with conn.cursor() as cur:  # the worker's take (an UPDATE of the row) waits for this lock
        cur.execute("SELECT * FROM jobs FOR UPDATE")
    cmd, env = worker_app(tmp_path, q.mod, "hurried_app",
                          f"worker = Worker(m.DESCRIPTOR, lambda job: None, database="
                          f"{q.target!r}, workers=2, poll_interval=0.05)\n")
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 20
        line = ""
        while "serving" not in line and time.monotonic() < deadline:
            line = proc.stderr.readline()
        assert "serving" in line, line
        time.sleep(0.5)  # a slot's take waits for the row lock
        proc.send_signal(signal.SIGINT)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        code = proc.wait(10)
        err = proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()
        conn.rollback()
    assert code == 0, err
    assert "SIGINT again: stopping at once" in err, err
    loud = [line for line in err.splitlines() if " WARNING " in line or " ERROR " in line]
    assert [line for line in loud if "again: stopping at once" not in line] == [], err
    assert "stopped: 0 delivered" in err, err


def test_the_cli_worker_refused_exits_1_with_one_line(tmp_path: Path, pg_jobs: Queue,
                                                      pg_server: Any,
                                                      password_user: str) -> None:
    dbname = psycopg.conninfo.conninfo_to_dict(pg_jobs.target)["dbname"]
    cmd, env = worker_app(
        tmp_path, pg_jobs.mod, "refused_app",
        f"worker = Worker(m.DESCRIPTOR, lambda job: None, database="
        f"'postgresql://{password_user}:wrong-{SECRET}@127.0.0.1:{pg_server.port}/{dbname}')\n")
    result = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=30, check=False)
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if line.startswith("inboxgen:")]
    assert len(lines) == 1 and "ConnectFailed" in lines[0], result.stderr
    assert "password authentication failed" in lines[0]
    assert "Traceback" not in result.stderr and SECRET not in result.stderr + result.stdout
