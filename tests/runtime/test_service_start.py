"""`inboxgen serve` as an operator runs it, in a process of its own: every queue of the service
passes its checks before any queue claims or any endpoint is served, and a start that fails is
one line naming the queue and the database (never its password); a database that is not there
is one warning, then that line (the dashboard's start too); a second SIGTERM stops at once, as
`inboxgen worker`'s does."""

from __future__ import annotations

import datetime as dt
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from dbcases import Layout, MakeQueue, Queue, cli_project
from semantics_util import SECRET

REPO = Path(__file__).resolve().parents[2]
LAYOUT = Layout(form="lease", processed=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pg_url(q: Queue, *, port: int | None = None, dbname: str | None = None) -> str:
    """The queue's PostgreSQL database as a URL with a password (the test server ignores it)."""
    info = psycopg.conninfo.conninfo_to_dict(q.target)
    return (f"postgresql://postgres:{SECRET}@127.0.0.1:{port or info['port']}/"
            f"{dbname or info['dbname']}")


def pg_label(q: Queue, *, port: int | None = None, dbname: str | None = None) -> str:
    info = psycopg.conninfo.conninfo_to_dict(q.target)
    return (f"PostgreSQL at 127.0.0.1:{port or info['port']}, database "
            f"{dbname or info['dbname']}, user postgres")


def service_app(folder: Path, modules: dict[str, Queue], body: str
                ) -> tuple[list[str], dict[str, str]]:
    """Write `folder/svc.py`: the generated modules of `modules` imported under their names (by
    path, each its own module), Service imported, then `body`, which makes `service`. Returns
    the `inboxgen serve svc:service` command and its environment."""
    imports = "".join(
        f"{name} = _load({name!r}, {q.mod.__file__!r})\n" for name, q in modules.items())
    (folder / "svc.py").write_text(textwrap.dedent("""\
        import importlib.util, sys, time
        from inboxgen import Service

        def _load(name, path):
            spec = importlib.util.spec_from_file_location("svc_" + name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
            return module

        """) + imports + textwrap.dedent(body))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), *sys.path])}
    return [sys.executable, "-m", "inboxgen", "serve", "svc:service"], env


def add_due(q: Queue, **fields: Any) -> None:
    conn = q.connect()
    q.mod.insert(conn, q.new(retry_after=dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1),
                             **fields))
    conn.commit()


# -- every queue's checks before any claim --------------------------------------------------------


@pytest.mark.parametrize("problem", ["missing table", "unreachable", "malformed address"])
def test_a_queue_that_cannot_start_leaves_the_others_unclaimed_and_serves_no_endpoint(
        queue: MakeQueue, tmp_path: Path, problem: str) -> None:
    """A healthy SQLite queue and a PostgreSQL one that cannot start: the start fails in one
    line naming the PostgreSQL queue and its database (not the password), the SQLite queue's
    job is not claimed (its attempt is not spent), no queue says it serves and the metrics
    endpoint is never announced."""
    lite = queue("sqlite", LAYOUT)
    pg = queue("postgres", LAYOUT)
    add_due(lite)
    url, label = pg_url(pg), pg_label(pg)
    if problem == "missing table":
        conn = pg.connect()
        conn.execute("DROP TABLE jobs")
        conn.commit()
    elif problem == "unreachable":
        port = free_port()  # nothing listens there
        url, label = pg_url(pg, port=port), pg_label(pg, port=port)
    else:
        url += "?sslmode=bogus"
        label = "the PostgreSQL connection string has a bad sslmode"
    cmd, env = service_app(tmp_path, {"lite": lite, "pg": pg}, f"""
        service = Service({lite.target!r}, connect_timeout=2)
        service.queue(lite.DESCRIPTOR, lambda job: None, name="lite", poll_interval=0.05)
        service.queue(pg.DESCRIPTOR, lambda job: None, name="pg", database={url!r})
        service.expose_metrics(port=0)
        """)
    began = time.monotonic()
    result = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 1, result.stderr
    assert time.monotonic() - began < 20
    failed = [line for line in result.stderr.splitlines() if line.startswith("inboxgen:")]
    assert len(failed) == 1, result.stderr
    assert "(worker pg, table jobs" in failed[0] and label in failed[0], failed[0]
    assert "Traceback" not in result.stderr and SECRET not in result.stderr
    assert "metrics on" not in result.stderr, result.stderr
    assert "serving" not in result.stderr, result.stderr
    ((row),) = lite.rows()
    assert row["attempt"] == 1 and row["locked_until"] is None, row


# -- the second signal ----------------------------------------------------------------------------


def test_a_second_sigterm_stops_inboxgen_serve_at_once(queue: MakeQueue, tmp_path: Path) -> None:
    """The first SIGTERM says how many jobs it waits for; the second stops every queue at once:
    the process exits without waiting for the plain handler's thread, whose job is not acked
    (its lease stays, so it runs again when the lease ends)."""
    lite = queue("sqlite", LAYOUT)
    other = queue("sqlite", LAYOUT)
    add_due(lite)
    started = tmp_path / "started"
    cmd, env = service_app(tmp_path, {"lite": lite, "other": other}, f"""
        def slow(job):
            open({str(started)!r}, "w").close()
            time.sleep(60)

        service = Service({lite.target!r}, shutdown_timeout=30)
        service.queue(lite.DESCRIPTOR, slow, name="lite")
        service.queue(other.DESCRIPTOR, lambda job: None, name="other", database={other.target!r})
        """)
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert started.exists(), "the job did not start"
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
        proc.wait()
    assert code == 0, err
    assert "SIGTERM: stopping; waiting up to 30 s for 1 job(s) in work (again to stop at " \
           "once)" in err, err
    assert "SIGTERM again: stopping at once (lite: their leases stay" in err, err
    assert "lite: stopped: 1 delivered, 0 acked" in err, err
    assert "exiting with 1 handler thread(s) still running" in err, err
    assert "Traceback" not in err
    ((row),) = lite.rows()
    assert row["attempt"] == 2 and row["locked_until"] is not None  # not acked: leased


# -- a database that is not there: one warning, then one line -------------------------------------


def _serve(q: Queue, tmp_path: Path, url: str, fresh: Callable[[str], str]
           ) -> subprocess.CompletedProcess[str]:
    cmd, env = service_app(tmp_path, {"pg": q}, f"""
        service = Service({url!r}, connect_timeout=3)
        service.queue(pg.DESCRIPTOR, lambda job: None, name="a")
        service.queue(pg.DESCRIPTOR, lambda job: None, name="b")
        """)
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60, check=False)


def _dashboard(q: Queue, tmp_path: Path, url: str, fresh: Callable[[str], str]
               ) -> subprocess.CompletedProcess[str]:
    root = tmp_path / "project"
    cli_project(root, "postgres", LAYOUT, fresh("postgres"))  # its table, on another database
    env = {**os.environ, "INBOXGEN_DATABASE_URL": url}
    return subprocess.run([sys.executable, "-m", "inboxgen", "dashboard", "--bind",
                           f"127.0.0.1:{free_port()}"], cwd=root, env=env, capture_output=True,
                          text=True, timeout=60, check=False)


RUNS: dict[str, Callable[[Queue, Path, str, Callable[[str], str]],
                         subprocess.CompletedProcess[str]]] = {
    "serve": _serve, "dashboard": _dashboard}


@pytest.mark.parametrize("command", list(RUNS))
@pytest.mark.parametrize("where", ["wrong port", "unknown database"])
def test_a_database_that_is_not_there_is_one_warning_then_one_line(
        queue: MakeQueue, fresh_database: Callable[[str], str], tmp_path: Path, command: str,
        where: str) -> None:
    """A wrong port is waited for: one warning (for the two queues of the database), then the
    line that fails the start once the connect timeout has passed; an unknown database fails
    at once, in that one line. No pool warnings, no hint lines, no password. (The dashboard does
    not wait: one line either way.)"""
    q = queue("postgres", LAYOUT)
    port = free_port() if where == "wrong port" else None
    dbname = "no_such_db" if where == "unknown database" else None
    result = RUNS[command](q, tmp_path, pg_url(q, port=port, dbname=dbname), fresh_database)
    lines = (result.stdout + result.stderr).splitlines()
    assert result.returncode == 1, lines
    waits = 1 if command == "serve" and where == "wrong port" else 0
    assert len(lines) == 1 + waits, lines
    assert pg_label(q, port=port, dbname=dbname) in lines[-1], lines
    assert lines[-1].startswith("inboxgen: "), lines
    assert all(SECRET not in line for line in lines)
    if waits:
        assert "cannot connect to" in lines[0] and "trying again for up to 3 s" in lines[0]
