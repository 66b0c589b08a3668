"""Connection settings are checked as the driver will read them: a parameter it refuses fails
when the Worker is built, in one line naming the parameter and never the password; a refusal no
retry can cure (TLS the server lacks, an authentication method) fails the start at once; and a
signal is honoured while a connection attempt hangs."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from dbcases import MakeQueue, Queue
from semantics_util import PLAIN, SECRET, start, worker_app

from inboxgen import ConnectFailed, Worker, WorkerConfigError

CA_FILE = "/etc/ssl/certs/ca-certificates.crt"


@pytest.fixture
def my_jobs(queue: MakeQueue) -> Queue:
    spec, ddl = PLAIN["mysql"]
    return queue("mysql", spec=spec, ddl=ddl)


def run_cli(tmp_path: Path, module: Any, database: str, **kw: Any
            ) -> subprocess.Popen[str]:
    cmd, env = worker_app(tmp_path, module, "conn_app",
                          f"worker = Worker(m.DESCRIPTOR, lambda job: None, "
                          f"database={database!r}, connect_timeout=60)\n")
    return subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


@pytest.mark.parametrize(("query", "named"), [
    ("connect_timeout=abc", "connect_timeout"),
    ("sslmode=bogus", "sslmode"),
    ("target_session_attrs=weird", "target_session_attrs"),
    ("keepalives=x", "keepalives"),
    ("keepalives_idle=5s", "keepalives_idle"),
    ("hostaddr=not-an-ip", "hostaddr"),
    ("bogus=1", "bogus"),
])
def test_pg_parameters_the_driver_refuses_fail_when_the_worker_is_built(
        pg_jobs: Queue, pg_url: str, query: str, named: str) -> None:
    began = time.monotonic()
    with pytest.raises(WorkerConfigError) as caught:
        Worker(pg_jobs.mod.DESCRIPTOR, lambda job: None, database=f"{pg_url}?{query}")
    assert time.monotonic() - began < 1
    text = str(caught.value)
    assert named in text and "\n" not in text and SECRET not in text, text


def test_pg_conninfo_strings_are_checked_the_same_way(pg_jobs: Queue) -> None:
    for extra, named in ((f"password={SECRET} port=abc", "port"),
                         (f"password={SECRET} foo=bar", "foo"),
                         ("connect_timeout=abc", "connect_timeout")):
        with pytest.raises(WorkerConfigError) as caught:
            Worker(pg_jobs.mod.DESCRIPTOR, lambda job: None, database=f"{pg_jobs.target} {extra}")
        assert named in str(caught.value) and SECRET not in str(caught.value)
    # What libpq accepts still builds (no connection is made when the worker is built).
    Worker(pg_jobs.mod.DESCRIPTOR, lambda job: None,
           database=f"{pg_jobs.target} sslmode=prefer connect_timeout=5 keepalives=1 "
                    f"target_session_attrs=read-write application_name=mailer")


@pytest.mark.parametrize("query", ["sslmode=require", "require_auth=scram-sha-256",
                                   "channel_binding=require"])
def test_pg_refusals_no_retry_cures_fail_the_start_at_once(pg_jobs: Queue, pg_url: str,
                                                           query: str) -> None:
    # The test server has no TLS and trusts every local user.
    worker = Worker(pg_jobs.mod.DESCRIPTOR, lambda job: None, database=f"{pg_url}?{query}")
    began = time.monotonic()
    err = start(worker)
    assert time.monotonic() - began < 5, "a refusal no retry can cure is not retried"
    assert isinstance(err, ConnectFailed), err
    assert SECRET not in str(err) and "\n" not in str(err)


def test_pg_cli_with_a_bad_connect_timeout_exits_1_at_once_in_one_line(
        tmp_path: Path, pg_jobs: Queue, pg_url: str) -> None:
    began = time.monotonic()
    proc = run_cli(tmp_path, pg_jobs.mod, f"{pg_url}?connect_timeout=abc")
    out, err = proc.communicate(timeout=60)
    assert time.monotonic() - began < 10
    assert proc.returncode != 0, err  # the worker's module does not import: no worker
    assert err.count("\n") == 1 and "connect_timeout" in err, err
    assert "Traceback" not in err and "psycopg.pool" not in err and SECRET not in err + out


def test_pg_cli_requiring_tls_the_server_lacks_exits_1_at_once(
        tmp_path: Path, pg_jobs: Queue, pg_url: str) -> None:
    began = time.monotonic()
    proc = run_cli(tmp_path, pg_jobs.mod, f"{pg_url}?sslmode=require")
    out, err = proc.communicate(timeout=60)
    assert time.monotonic() - began < 10, "no 30 s wait"
    assert proc.returncode == 1, err
    lines = [line for line in err.splitlines() if line.startswith("inboxgen:")]
    assert len(lines) == 1 and "does not support SSL" in lines[0], err
    assert "Traceback" not in err and SECRET not in err + out


def test_sigterm_while_a_connection_attempt_hangs_stops_the_worker_at_once(
        tmp_path: Path, pg_jobs: Queue) -> None:
    # A server that takes the connection and never answers: the attempt would wait for
    # libpq's connect timeout.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        silent.settimeout(20)
        port = silent.getsockname()[1]
        proc = run_cli(tmp_path, pg_jobs.mod,
                       f"postgresql://postgres:{SECRET}@127.0.0.1:{port}/app")
        try:
            peer, _ = silent.accept()  # the worker is in its connection attempt
            time.sleep(0.3)
            proc.send_signal(signal.SIGTERM)
            began = time.monotonic()
            out, err = proc.communicate(timeout=15)
            took = time.monotonic() - began
            peer.close()
        finally:
            proc.kill()
    assert took < 3, took
    assert proc.returncode == 0, err
    assert "Traceback" not in err and SECRET not in err + out


@pytest.mark.parametrize(("suffix", "named"), [
    ("?ssl_mode=REQUIRED", "ssl_mode"),
    ("?connect_timeout=5", "connect_timeout"),
    ("?charset=bogus", "charset"),
    ("?ssl_ca=/nonexistent/ca.pem", "ssl_ca"),
])
def test_mysql_url_parameters_the_driver_refuses_fail_when_the_worker_is_built(
        my_jobs: Queue, suffix: str, named: str) -> None:
    url = my_jobs.target.replace("mysql://root@", f"mysql://root:{SECRET}@") + suffix
    with pytest.raises(WorkerConfigError) as caught:
        Worker(my_jobs.mod.DESCRIPTOR, lambda job: None, database=url)
    text = str(caught.value)
    assert named in text and "\n" not in text and SECRET not in text, text


def test_mysql_bad_port_and_unknown_arguments_fail_when_the_worker_is_built(
        my_jobs: Queue, mariadb_server: Any) -> None:
    for database, named in (
            (f"mysql://root:{SECRET}@127.0.0.1:abc/app", "port"),
            ({"host": "127.0.0.1", "port": "3306", "password": SECRET}, "port"),
            ({"host": "127.0.0.1", "pasword": SECRET}, "pasword"),
            ({"host": "127.0.0.1", "connect_timeout": "abc"}, "connect_timeout")):
        with pytest.raises(WorkerConfigError) as caught:
            Worker(my_jobs.mod.DESCRIPTOR, lambda job: None, database=database)
        assert named in str(caught.value) and SECRET not in str(caught.value)


@pytest.mark.parametrize("scheme", ["mysql", "mysql+pymysql"])
def test_mysql_tls_the_server_lacks_fails_the_start_at_once(
        my_jobs: Queue, scheme: str) -> None:
    url = my_jobs.target.replace("mysql://root@", f"{scheme}://root@") + f"?ssl_ca={CA_FILE}"
    began = time.monotonic()
    err = start(Worker(my_jobs.mod.DESCRIPTOR, lambda job: None, database=url))
    assert time.monotonic() - began < 5, "a refusal no retry can cure is not retried"
    assert isinstance(err, ConnectFailed), err
    assert "SSL" in str(err) and "\n" not in str(err)
