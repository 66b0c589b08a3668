"""The example services in scripts/ run as a newcomer runs them, and say what they did."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import psycopg
import pymysql
import pytest
from mariadb_server import MariaDBServer

REPO = Path(__file__).resolve().parents[2]


def run_script(name: str, *args: str, cwd: Path) -> str:
    result = subprocess.run([sys.executable, str(REPO / "scripts" / name), *args], cwd=cwd,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    return result.stdout


def test_shop_places_an_order_sends_its_confirmation_and_keeps_the_reminder(
        tmp_path: Path) -> None:
    out = run_script("shop.py", cwd=tmp_path)
    assert "checkout 1: placed order 1 for ada@example.com" in out
    assert "checkout 2: order 2 failed: 'not-an-address' is no address" in out
    assert "checkout 3: order 1 was placed already; nothing to do" in out
    assert "email 1: sent confirmation for order 1 to ada@example.com" in out
    assert "waiting: review email for order 1" in out
    assert out.rstrip().endswith("done: 1 order(s), 1 checkout(s) placed, 1 email(s) sent, "
                                 "1 waiting")


def test_reports_renew_a_lease_shorter_than_the_render(tmp_path: Path) -> None:
    out = run_script("reports.py", "--count", "1", "--lease", "1", "--render-seconds", "1.6",
                     cwd=tmp_path)
    assert "rendered report 1" in out
    summary = out.strip().splitlines()[-1]
    assert "1 rendered" in summary and "0 lost" in summary
    assert "0 lease renewal(s)" not in summary


def _migrate_mysql(server: MariaDBServer, url: str) -> None:
    ddl = (REPO / "specs/migrations/mailer_mariadb/0001_email_jobs.sql").read_text()
    conn = pymysql.connect(**server.connect_args(url.rsplit("/", 1)[1]))
    with conn.cursor() as cur:
        for statement in ddl.split(";"):
            if statement.strip():
                cur.execute(statement)
    conn.close()


def test_mailer_on_postgresql(pg_dsn: str, tmp_path: Path) -> None:
    ddl = (REPO / "specs/migrations/mailer/0001_email_jobs.sql").read_text()
    with psycopg.connect(pg_dsn) as conn:
        conn.execute(ddl.split("-- +goose Down")[0])
    out = run_script("mailer.py", "--database", pg_dsn, cwd=tmp_path)
    assert "sent 'welcome'" in out and "sent 'receipt'" in out
    assert "done: 2 sent, 1 dead-lettered" in out


def test_mailer_on_mariadb(mariadb_server: MariaDBServer, mysql_url: str,
                           tmp_path: Path) -> None:
    _migrate_mysql(mariadb_server, mysql_url)
    out = run_script("mailer.py", "--database", mysql_url, cwd=tmp_path)
    assert "done: 2 sent, 1 dead-lettered" in out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _http(method: str, url: str, body: dict[str, Any] | None = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.loads(response.read())


def test_the_asgi_shop_runs_its_queues_in_the_apps_lifespan(tmp_path: Path) -> None:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--app-dir", str(REPO), "--port", str(port),
         "scripts.asgi_shop:app"], cwd=tmp_path, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
        env={**os.environ, "SHOP_DATABASE": str(tmp_path / "shop.db")})
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:  # until uvicorn serves (after the lifespan started the queues)
            try:
                _http("GET", f"{base}/orders/1")
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    pytest.fail(f"uvicorn did not start: {proc.communicate()[1]}")
                time.sleep(0.1)
        assert _http("POST", f"{base}/checkout", {"order_id": 1, "email": "ada@example.com"}
                     ) == {"queued": True}
        while (seen := _http("GET", f"{base}/orders/1"))["emails"].get(
                "confirmation") != "sent" and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert seen == {"placed": True, "emails": {"confirmation": "sent", "review": "waiting"}}, err
    # uvicorn ends by raising the signal it stopped on again, once the app has shut down
    assert proc.returncode in (0, -signal.SIGTERM), err
    assert "checkout 1: placed order 1 for ada@example.com" in out
    assert "Traceback" not in err
    assert "Application shutdown complete." in err
