"""The example services in scripts/ run as a newcomer runs them, and say what they did."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psycopg
import pymysql
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
