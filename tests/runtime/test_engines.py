"""Engines that speak PostgreSQL's or MySQL's protocol and hold less than the claims ask for: a
worker refuses the forms they cannot hold before its first claim, in one line. PostgreSQL (a
writable one and a read-only one) and MariaDB are asked for real; the others are judged from
the answers such servers give (their version strings and settings, as recorded from them)."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from dbcases import Layout, MakeQueue, mysql_connect

from inboxgen import Worker, WorkerConfigError, ack
from inboxgen.ops.live.mysql import MySQLLive
from inboxgen.ops.live.postgres import PostgresLive
from inboxgen.runtime.engines import (
    ADVISORY,
    ALL_FORMS,
    LEASE,
    ROW_LOCK,
    Engine,
    mysql_engine,
    postgres_engine,
)

PG15 = "PostgreSQL 15.8 (Debian 15.8-0+deb12u1) on x86_64-pc-linux-gnu, compiled by gcc 12.2.0"
YB = "PostgreSQL 11.2-YB-2.20.1.0-b0 on x86_64-pc-linux-gnu, compiled by clang version 16.0.6"
COCKROACH = "CockroachDB CCL v23.2.4 (x86_64-pc-linux-gnu, built 2024/04/08 21:50:39, go1.21.9)"
WRITABLE = (False, "off", "read committed")

# (what the server answers, the engine's name, the forms it refuses, whether it listens)
RECORDED: list[tuple[str, Engine, str, set[str], bool]] = [
    ("postgres", postgres_engine(PG15, WRITABLE), "PostgreSQL", set(), True),
    ("standby", postgres_engine(PG15, (True, "on", "read committed")),
     "a read-only PostgreSQL", set(ALL_FORMS), True),
    ("demoted writer", postgres_engine(PG15, (False, "on", "read committed")),
     "a read-only PostgreSQL", set(ALL_FORMS), True),
    ("cockroachdb", postgres_engine(COCKROACH, None), "CockroachDB", {ROW_LOCK, ADVISORY}, False),
    ("yugabytedb", postgres_engine(YB, WRITABLE), "YugabyteDB", {ADVISORY}, True),
    ("yugabytedb serializable", postgres_engine(YB, (False, "off", "serializable")),
     "YugabyteDB", {ROW_LOCK, ADVISORY}, True),
    ("mysql", mysql_engine([("8.0.36", "MySQL Community Server - GPL"), None, None]), "MySQL",
     set(), True),
    ("mariadb", mysql_engine([("10.11.6-MariaDB-0+deb12u1", "Debian 12"), ("wsrep_on", "OFF"),
                              None]), "MariaDB", set(), True),
    ("galera, one node", mysql_engine([("10.11.6-MariaDB-0+deb12u1", "Debian 12"),
                                       ("wsrep_on", "ON"), ("wsrep_cluster_size", "1")]),
     "MariaDB", set(), True),
    ("galera, three nodes", mysql_engine([("10.11.6-MariaDB-0+deb12u1", "Debian 12"),
                                          ("wsrep_on", "ON"), ("wsrep_cluster_size", "3")]),
     "a MariaDB Galera cluster of 3 nodes", {ROW_LOCK, ADVISORY}, True),
    ("tidb", mysql_engine([("8.0.11-TiDB-v7.5.0", "TiDB Server (Apache License 2.0) Community "
                                                  "Edition, MySQL 8.0 compatible"), None, None]),
     "TiDB", set(ALL_FORMS), True),
    ("vitess", mysql_engine([("8.0.30-Vitess", "Vitess"), None, None]), "Vitess", {ADVISORY},
     True),
]


@pytest.mark.parametrize(("engine", "name", "refused", "listens"),
                         [r[1:] for r in RECORDED], ids=[r[0] for r in RECORDED])
def test_each_engine_refuses_the_forms_it_cannot_hold(engine: Engine, name: str,
                                                      refused: set[str], listens: bool) -> None:
    assert engine.name == name
    assert set(engine.refused) == refused
    assert engine.listens is listens
    for form in ALL_FORMS:
        if form in refused:
            with pytest.raises(WorkerConfigError) as err:
                engine.check(form, "PostgreSQL at db:5432, database app", {"worker": "w"},
                             True, "w")
            said = str(err.value)
            assert "\n" not in said
            assert f"is {name}, where the {form} form cannot hold: " in said
            # Where another form holds, the message names it.
            assert ("; use the" in said) is (refused != set(ALL_FORMS))
        else:
            assert engine.check(form, "db", {}, True, "w") is listens


@pytest.mark.parametrize(("engine", "name", "refused", "listens"),
                         [r[1:] for r in RECORDED], ids=[r[0] for r in RECORDED])
def test_a_counted_row_lock_holds_only_where_advisory_locks_do(
        engine: Engine, name: str, refused: set[str], listens: bool) -> None:
    """Counting crashes, a row lock commits its claim and holds its jobs with session locks:
    on Vitess (GET_LOCK on one shard's session) and YugabyteDB (advisory locks missing) it is
    refused, while the row lock that does not count them holds there."""
    said = engine.refusal(ROW_LOCK, counted=True)
    if ROW_LOCK in refused:  # refused as a row lock already
        assert said == engine.refusal(ROW_LOCK)
    elif ADVISORY in refused:
        assert said is not None
        assert said.startswith(f"is {name}, where the counted row lock cannot hold: it holds "
                               f"its jobs with session locks, as the advisory form does, and "
                               f"{engine.refused[ADVISORY]}; use the row lock with "
                               f"count_crashes = false"), said
        with pytest.raises(WorkerConfigError):
            engine.check(ROW_LOCK, "db", {}, True, "w", counted=True)
    else:
        assert said is None
    assert engine.refusal(LEASE, counted=True) == engine.refusal(LEASE)


def test_a_worker_on_an_engine_without_listen_polls(caplog: pytest.LogCaptureFixture) -> None:
    cockroach = postgres_engine(COCKROACH, None)
    assert cockroach.check(LEASE, "db", {}, True, "mailer") is False
    assert "mailer: CockroachDB has no LISTEN/NOTIFY: polling instead" in caplog.text
    assert cockroach.check(LEASE, "db", {}, False, "mailer") is False


def test_postgres_and_mariadb_say_what_they_are(fresh_database: Any) -> None:
    """The questions run on the real servers, and neither refuses a form."""
    with psycopg.connect(fresh_database("postgres")) as conn:
        pg = PostgresLive(conn).engine()
    conn = mysql_connect(fresh_database("mysql"))
    try:
        maria = MySQLLive(conn).engine()
    finally:
        conn.close()
    assert (pg.name, pg.refused, maria.name, maria.refused) == ("PostgreSQL", {}, "MariaDB", {})


@pytest.mark.parametrize("form", ALL_FORMS)
def test_a_worker_refuses_a_read_only_postgres_before_claiming(queue: MakeQueue,
                                                               form: str) -> None:
    """A database whose sessions are read-only (as a writer demoted by a failover answers):
    every form writes, so no worker starts, and the error says why in one line."""
    q = queue("postgres", Layout(form=form))
    with psycopg.connect(q.target, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{conn.info.dbname}" SET default_transaction_read_only = on')
    worker = Worker(q.mod.DESCRIPTOR, lambda job: ack(), database=q.target)
    with pytest.raises(WorkerConfigError) as err:
        asyncio.run(worker.start())
    said = str(err.value)
    assert f"is a read-only PostgreSQL, where the {form} form cannot hold: every claim writes, " \
           f"and its sessions are read-only" in said
    assert "\n" not in said
