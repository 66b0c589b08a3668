"""`inboxgen verify --database-url`: the committed modules checked against a live PostgreSQL or
MariaDB (and SQLite): every statement prepares, each claim has an index serving its order, and
the live table has the columns the migrations give it, with their types and nullability."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from dbcases import Layout, cli_project, mysql_connect

SERVERS = ["postgres", "mysql"]
GROUPS = Layout(form="lease", group=True)


@pytest.fixture
def project(fresh_database: Callable[[str], str],
            tmp_path: Path) -> Callable[..., tuple[Path, str]]:
    def make(dialect: str, layout: Layout = GROUPS) -> tuple[Path, str]:
        url = fresh_database(dialect)
        root = tmp_path / "app"
        cli_project(root, dialect, layout, url)
        return root, url

    return make


def run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "inboxgen", *args], cwd=root,
                          capture_output=True, text=True, check=False, timeout=120)


def alter(dialect: str, url: str, sql: str) -> None:
    if dialect == "postgres":
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql)
    elif dialect == "mysql":
        conn: Any = mysql_connect(url, autocommit=True)
        with conn.cursor() as cur:
            cur.execute(sql)
        conn.close()
    else:
        import sqlite3

        with sqlite3.connect(url) as db:
            db.executescript(sql)


@pytest.mark.parametrize("dialect", [*SERVERS, "sqlite"])
def test_a_database_as_the_migrations_build_it_verifies(project: Callable[[str], tuple[Path, str]],
                                                        dialect: str) -> None:
    root, url = project(dialect)
    result = run(root, "verify", "--database-url", url)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "against" in result.stdout


@pytest.mark.parametrize("dialect", [*SERVERS, "sqlite"])
@pytest.mark.parametrize("layout", [
    Layout(form="row_lock", group=True, pauses=True),
    Layout(form="lease", group=True, pauses=True, concurrency=3, key_concurrency=2),
    Layout(form="lease", processed=False, concurrency=3, rate=(10, 1.0)),
    Layout(form="lease", group=True, pauses=True, fair=True),
    Layout(form="lease", processed=False, fair=True, weights=True),
    Layout(form="row_lock", group=True, dead="group", after=True),
    Layout(form="lease", processed=False, dead="table", after=True),
    Layout(form="row_lock", processed=False, concurrency=3, count_crashes=True),
    Layout(form="advisory", processed=False, key="job-{id}", concurrency=3,
           key_concurrency=2),
], ids=["row_lock-pauses", "lease-pauses-limits", "lease-limit-rate", "lease-fair",
        "lease-weighted", "row_lock-after", "lease-after", "row_lock-seats", "advisory-seats"])
def test_the_flow_tables_and_counts_of_a_claim_verify(
        project: Callable[..., tuple[Path, str]], dialect: str, layout: Layout) -> None:
    """A claim that reads a pause table of a few rows (scanned, not indexed), counts the jobs
    in work (through the indexes the build asks for) or looks up what a job waits for (the
    after table, and the jobs it names by id) still reads the queue in claim order: verify
    finds nothing (it once named the pause table's scan as the claim's)."""
    if dialect == "sqlite" and layout.form == "row_lock":
        layout = Layout(form="lease", group=True, pauses=layout.pauses, dead=layout.dead,
                        after=layout.after, concurrency=layout.concurrency)
    root, url = project(dialect, layout)
    result = run(root, "verify", "--database-url", url)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("dialect", SERVERS)
def test_a_dropped_column_is_named(project: Callable[[str], tuple[Path, str]],
                                   dialect: str) -> None:
    root, url = project(dialect)
    alter(dialect, url, "ALTER TABLE jobs DROP COLUMN payload")
    result = run(root, "verify", "--database-url", url)
    assert result.returncode == 1
    assert "table jobs, column payload: missing in the database" in result.stderr


@pytest.mark.parametrize("dialect", SERVERS)
def test_a_retyped_or_nullable_column_is_named(project: Callable[[str], tuple[Path, str]],
                                               dialect: str) -> None:
    root, url = project(dialect)
    retype = ("ALTER TABLE jobs ALTER COLUMN attempt TYPE TEXT" if dialect == "postgres"
              else "ALTER TABLE jobs MODIFY attempt TEXT NOT NULL")
    alter(dialect, url, retype)
    nullable = ("ALTER TABLE jobs ALTER COLUMN account DROP NOT NULL" if dialect == "postgres"
                else "ALTER TABLE jobs MODIFY account VARCHAR(191) NULL")
    alter(dialect, url, nullable)
    result = run(root, "verify", "--database-url", url)
    assert result.returncode == 1
    assert "table jobs, column attempt: is" in result.stderr
    assert "table jobs, column account: is nullable in the database, NOT NULL in the migrations" \
        in result.stderr


@pytest.mark.parametrize("dialect", SERVERS)
def test_a_claim_without_a_usable_index_is_named(project: Callable[[str], tuple[Path, str]],
                                                 dialect: str) -> None:
    root, url = project(dialect)
    alter(dialect, url, "DROP INDEX jobs_claim" if dialect == "postgres"
          else "DROP INDEX jobs_claim ON jobs")
    result = run(root, "verify", "--database-url", url)
    assert result.returncode == 1
    assert "table jobs, statement CLAIM" in result.stderr, result.stderr
    if dialect == "postgres":
        assert "no index serves the claim order" in result.stderr


def test_the_password_never_shows(project: Callable[[str], tuple[Path, str]],
                                  pg_server: Any) -> None:
    root, _ = project("sqlite")
    bad = f"postgresql://nobody:hunter2-secret@127.0.0.1:{pg_server.port}/nope"
    result = run(root, "verify", "--database-url", bad)
    assert result.returncode == 2  # a SQLite table checked against PostgreSQL: a usage error
    assert "hunter2" not in result.stdout + result.stderr


RETYPED_AND_UNINDEXED = {
    "postgres": "ALTER TABLE jobs ALTER COLUMN payload TYPE BYTEA USING convert_to(payload, "
                "'UTF8'); DROP INDEX jobs_claim;",
    "mysql": "ALTER TABLE jobs MODIFY payload LONGBLOB NOT NULL, DROP INDEX jobs_claim",
    # SQLite retypes by building the table again: the claim index is not built with it.
    "sqlite": GROUPS.ddl("sqlite").split(";")[0].replace(
        "CREATE TABLE jobs", "CREATE TABLE jobs_new").replace(
        "payload TEXT NOT NULL", "payload BLOB NOT NULL")
    + "; INSERT INTO jobs_new SELECT * FROM jobs; DROP TABLE jobs; "
      "ALTER TABLE jobs_new RENAME TO jobs;",
}


@pytest.mark.parametrize("dialect", [*SERVERS, "sqlite"])
def test_every_finding_of_a_table_is_reported(project: Callable[[str], tuple[Path, str]],
                                              dialect: str) -> None:
    """A retyped column does not hide a dropped claim index: each finding is its own line."""
    root, url = project(dialect)
    alter(dialect, url, RETYPED_AND_UNINDEXED[dialect])
    result = run(root, "verify", "--database-url", url)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert any("table jobs, column payload: is " in line for line in lines), result.stderr
    # MariaDB's claim names its index (FORCE INDEX), so without it the claim does not prepare.
    gone = ("does not prepare: (1176, \"Key 'jobs_claim' doesn't exist" if dialect == "mysql"
            else "no index serves the claim order")
    assert sum(f"table jobs, statement CLAIM: {gone}" in line for line in lines) == 1, lines
    assert all(line.startswith("generated/jobs.py: table jobs, ") for line in lines), lines


@pytest.mark.parametrize("dialect", [*SERVERS, "sqlite"])
def test_a_dropped_unique_index_is_named(project: Callable[..., tuple[Path, str]],
                                         dialect: str) -> None:
    """Without it, enqueue's duplicate check fails (PostgreSQL, SQLite) or lets duplicates in
    (MariaDB, whose insert waits for a duplicate-key error that never comes)."""
    root, url = project(dialect, Layout(form="lease", group=True, unique=True))
    assert run(root, "verify", "--database-url", url).returncode == 0
    alter(dialect, url, "DROP INDEX jobs_once ON jobs" if dialect == "mysql"
          else "DROP INDEX jobs_once")
    result = run(root, "verify", "--database-url", url)
    assert result.returncode == 1
    assert ("generated/jobs.py: table jobs, unique key (account, grp): no unique index on these "
            "columns in the database, which enqueue's duplicate check needs") \
        in result.stderr.splitlines(), result.stderr


# The claim index as the build asked for it before finished rows were considered: in the claim
# order over every row, finished ones too.
OVER_FINISHED_ROWS = {
    "postgres": "DROP INDEX jobs_claim; "
                "CREATE INDEX jobs_claim ON jobs (grp, priority, retry_after, id);",
    "mysql": "ALTER TABLE jobs DROP INDEX jobs_claim, "
             "ADD INDEX jobs_claim (grp, priority, retry_after, id)",
    "sqlite": "DROP INDEX jobs_claim; "
              "CREATE INDEX jobs_claim ON jobs (grp, priority, retry_after, id);",
}
# The index to create, named {name}: jobs_claim where the database has no index of that name,
# else the next free name.
ADVICE = {
    "postgres": "CREATE INDEX {name} ON jobs (grp, priority, retry_after, id) "
                "WHERE processed_at IS NULL",
    "mysql": "CREATE INDEX {name} ON jobs (grp, processed_at, priority, retry_after, id)",
    "sqlite": "CREATE INDEX {name} ON jobs (grp, priority, retry_after, id) "
              "WHERE processed_at IS NULL",
}
DATABASE = {"postgres": "(PostgreSQL at ", "mysql": "(MySQL/MariaDB at ", "sqlite": "(SQLite file "}


@pytest.mark.parametrize("dialect", [*SERVERS, "sqlite"])
def test_a_claim_index_that_holds_finished_rows_is_named(
        project: Callable[[str], tuple[Path, str]], dialect: str) -> None:
    root, url = project(dialect)
    alter(dialect, url, OVER_FINISHED_ROWS[dialect])
    result = run(root, "verify", "--database-url", url)
    assert result.returncode == 1, result.stdout + result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("generated/jobs.py: table jobs, claim index: jobs_claim holds "
                           f"finished rows too {DATABASE[dialect]}"), line
    advice = ADVICE[dialect].format(name="jobs_claim_2")  # jobs_claim is the old one's
    assert line.endswith(f"); claims walk every finished row: {advice}"), line


@pytest.mark.parametrize("predicate", ["processed_at IS NOT NULL", "attempt < 5"])
def test_a_partial_claim_index_on_another_condition_is_named(
        project: Callable[[str], tuple[Path, str]], predicate: str) -> None:
    root, url = project("postgres")
    alter("postgres", url, "DROP INDEX jobs_claim; CREATE INDEX jobs_other ON jobs "
                           f"(grp, priority, retry_after, id) WHERE {predicate};")
    result = run(root, "verify", "--database-url", url)
    assert result.returncode == 1
    assert ("table jobs, claim index: jobs_other holds finished rows too (PostgreSQL at "
            in result.stderr), result.stderr


def test_a_dropped_claim_index_names_the_one_to_create(
        project: Callable[[str], tuple[Path, str]]) -> None:
    root, url = project("sqlite")
    alter("sqlite", url, "DROP INDEX jobs_claim;")
    result = run(root, "verify", "--database-url", url)
    assert result.returncode == 1
    assert (f"generated/jobs.py: table jobs, claim index: none serves the claim order (grp, "
            f"priority, retry_after, id) over unfinished rows only (SQLite file {url}); claims "
            f"walk every finished row: {ADVICE['sqlite'].format(name='jobs_claim')}") \
        in result.stderr.splitlines()


@pytest.mark.parametrize("dialect", [*SERVERS, "sqlite"])
def test_the_claim_index_advice_runs_as_printed_where_the_old_index_is(
        project: Callable[[str], tuple[Path, str]], dialect: str) -> None:
    """The advice names an index the database does not have: not jobs_claim, which holds
    finished rows too, nor another relation's name (PostgreSQL and SQLite share one set of names
    between tables and indexes)."""
    root, url = project(dialect)
    taken = {"postgres": "CREATE TABLE jobs_claim_2 (x INT);",
             "mysql": "ALTER TABLE jobs ADD INDEX jobs_claim_2 (account)",
             "sqlite": "CREATE TABLE jobs_claim_2 (x INT);"}[dialect]
    alter(dialect, url, OVER_FINISHED_ROWS[dialect])
    alter(dialect, url, taken)
    result = run(root, "verify", "--database-url", url)
    assert result.returncode == 1, result.stdout + result.stderr
    (line,) = result.stderr.splitlines()
    advice = line[line.index("CREATE INDEX"):]
    assert advice == ADVICE[dialect].format(name="jobs_claim_3"), line
    alter(dialect, url, advice)  # before the fix: jobs_claim already exists
    again = run(root, "verify", "--database-url", url)
    assert again.returncode == 0, again.stderr


_ROWID_SPEC = """
table = "jobs"
dialect = "sqlite"
ddl = "jobs.sql"
[columns]
id = {{ role = "id", generated = true }}
{group}locked_until = "locked_until"
payload = "payload"
"""
_ROWID_DDL = """
CREATE TABLE jobs (id INTEGER PRIMARY KEY, {group}locked_until TEXT, payload BLOB NOT NULL);
"""


@pytest.mark.parametrize("grouped", [False, True])
def test_sqlite_claims_walking_the_rowid_serve_their_order_unless_they_skip_groups(
        tmp_path: Path, grouped: bool) -> None:
    """A SQLite claim ordered by an INTEGER PRIMARY KEY walks the table in rowid order, no sort
    (SQLite prefers that to an index on the id alone): no finding. With a group column and no
    index on (group, id), the same walk passes over every other group's rows: a finding."""
    import sqlite3

    root = tmp_path / "app"
    (root / "specs").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[tool.inboxgen]\nspecs = "specs"\nout = "gen"\n')
    group = "grp TEXT NOT NULL, " if grouped else ""
    ddl = _ROWID_DDL.format(group=group) + "CREATE INDEX jobs_claim ON jobs (id);\n"
    (root / "specs" / "jobs.sql").write_text(ddl)
    (root / "specs" / "jobs.toml").write_text(
        _ROWID_SPEC.format(group='grp = "group"\n' if grouped else ""))
    assert run(root, "build").returncode == 0
    url = str(tmp_path / "app.sqlite3")
    with sqlite3.connect(url) as db:
        db.executescript(ddl)
    result = run(root, "verify", "--database-url", url)
    if grouped:
        assert result.returncode == 1, result.stdout + result.stderr
        assert "statement CLAIM: no index serves the claim order" in result.stdout + result.stderr
    else:
        assert result.returncode == 0, result.stdout + result.stderr


def test_a_lease_claimed_in_id_order_verifies_on_postgres(fresh_database: Callable[[str], str],
                                                          tmp_path: Path) -> None:
    """A PostgreSQL lease table claimed in id order starts its claims at `from_id`; planned
    with a NULL there the claim matched nothing and its plan showed a sort: a false finding."""
    import psycopg

    root = tmp_path / "app"
    (root / "specs").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[tool.inboxgen]\nspecs = "specs"\nout = "gen"\n')
    ddl = ("CREATE TABLE jobs (id BIGSERIAL PRIMARY KEY, grp TEXT NOT NULL, "
           "locked_until TIMESTAMPTZ, payload BYTEA NOT NULL);\n"
           "CREATE INDEX jobs_claim ON jobs (grp, id);\n")
    (root / "specs" / "jobs.sql").write_text(ddl)
    (root / "specs" / "jobs.toml").write_text(
        'table = "jobs"\ndialect = "postgres"\nddl = "jobs.sql"\n[columns]\n'
        'id = { role = "id", generated = true }\ngrp = "group"\n'
        'locked_until = "locked_until"\npayload = "payload"\n')
    assert run(root, "build").returncode == 0
    assert "from_id" in (root / "gen" / "jobs.py").read_text()
    url = fresh_database("postgres")
    with psycopg.connect(url) as conn:
        conn.execute(ddl)
    result = run(root, "verify", "--database-url", url)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_read_only_postgres_is_named(project: Callable[..., tuple[Path, str]]) -> None:
    """A database whose sessions are read-only (a standby, or a writer demoted by failover):
    no worker could claim there, and verify says so for each table."""
    root, url = project("postgres")
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{conn.info.dbname}" SET default_transaction_read_only = on')
    result = run(root, "verify", "--database-url", url)
    assert result.returncode == 1
    assert re.search(r"table jobs: PostgreSQL at [^ ]+, database \w+, user \w+ is a read-only "
                     r"PostgreSQL, where the lease form cannot hold: every claim writes, and its "
                     r"sessions are read-only", result.stderr), result.stderr
