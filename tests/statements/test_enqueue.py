"""Enqueueing on PostgreSQL: the generated insert can notify, and the wake-up follows the commit."""

from __future__ import annotations

import psycopg

from generated_examples import mailer

MIGRATION = "specs/migrations/mailer/0001_email_jobs.sql"


def _schema(dsn: str) -> None:
    from pathlib import Path

    up = (Path(__file__).resolve().parents[2] / MIGRATION).read_text().split(
        "-- +goose Down")[0]
    with psycopg.connect(dsn) as conn:
        conn.execute(up)


def test_insert_with_notify_wakes_listeners_when_the_transaction_commits(pg_dsn: str) -> None:
    _schema(pg_dsn)
    with psycopg.connect(pg_dsn, autocommit=True) as listener, psycopg.connect(pg_dsn) as conn:
        listener.execute('LISTEN "email_jobs"')
        mailer.insert(conn, mailer.NewRow(name="emails", payload=b"hi"), notify=True)
        assert list(listener.notifies(timeout=0.2)) == []  # nothing before the commit
        conn.commit()
        (note,) = list(listener.notifies(timeout=5, stop_after=1))
        assert (note.channel, note.payload) == ("email_jobs", "emails")


def test_a_rolled_back_insert_neither_enqueues_nor_notifies(pg_dsn: str) -> None:
    _schema(pg_dsn)
    with psycopg.connect(pg_dsn, autocommit=True) as listener, psycopg.connect(pg_dsn) as conn:
        listener.execute('LISTEN "email_jobs"')
        mailer.insert(conn, mailer.NewRow(name="emails", payload=b"hi"), notify=True)
        conn.rollback()
        assert list(listener.notifies(timeout=0.3)) == []
        assert listener.execute("SELECT count(*) FROM email_jobs").fetchone() == (0,)
