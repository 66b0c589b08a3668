"""The database fixtures are real: actual servers, fresh isolated databases."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
from servers import PostgresServer


def test_pg_dsn_accepts_ddl_and_dml(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn) as conn:
        conn.execute("CREATE TABLE jobs (id bigserial PRIMARY KEY, payload text NOT NULL)")
        conn.execute("INSERT INTO jobs (payload) VALUES (%s), (%s)", ("a", "b"))
        rows = conn.execute("SELECT id, payload FROM jobs ORDER BY id").fetchall()
    assert rows == [(1, "a"), (2, "b")]


def test_databases_are_independent(pg_server: PostgresServer, pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE only_here (x int)")
        row = conn.execute("SELECT current_database()").fetchone()
    assert row is not None
    other_dsn = pg_server.create_database(f"{row[0]}_other")
    assert other_dsn != pg_dsn
    with psycopg.connect(other_dsn) as conn:
        found = conn.execute("SELECT to_regclass('public.only_here')").fetchone()
        tables = conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
        ).fetchone()
    assert found == (None,)
    assert tables == (0,)


def test_server_version_and_sqlite_path(pg_dsn: str, sqlite_path: Path) -> None:
    with psycopg.connect(pg_dsn) as conn:
        row = conn.execute("SHOW server_version_num").fetchone()
        fsync = conn.execute("SHOW fsync").fetchone()
    assert row is not None and int(row[0]) >= 110000
    assert fsync == ("off",)

    assert not sqlite_path.exists()
    with sqlite3.connect(sqlite_path) as db:
        db.execute("CREATE TABLE t (x)")
    assert sqlite_path.is_file()
