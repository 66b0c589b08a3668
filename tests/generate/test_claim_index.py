"""The claim index the build asks for, on a table that keeps its finished rows: which existing
index counts as serving the claim, and the index a MySQL claim names (FORCE INDEX)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from dbcases import apply_ddl
from genutil import make_project

from inboxgen.generate.build import generate
from inboxgen.generate.catalog import load_catalog, null_column
from inboxgen.generate.dialects import DIALECTS
from inboxgen.generate.model import ClaimIndex, TableRef

MYSQL_SPEC = """\
table = "jobs"
dialect = "mysql"

[columns]
id = { role = "id", generated = true }
grp = "group"
priority = "priority"
processed_at = "processed_at"
payload = "payload"
"""
MYSQL_TABLE = """\
CREATE TABLE jobs (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    grp VARCHAR(64) NOT NULL,
    priority INT NOT NULL,
    processed_at DATETIME(6) NULL,
    payload JSON NOT NULL
);
"""


def _mysql_build(root: Path, indexes: str) -> tuple[str, list[str]]:
    project = make_project(root, MYSQL_SPEC, MYSQL_TABLE + indexes)
    generated = generate(project, [project.specs / "jobs.toml"])
    assert generated.ok, [d.format() for d in generated.diagnostics]
    ((_, text),) = generated.outputs.items()
    return text, [d.message for d in generated.diagnostics]


def test_a_mysql_claim_forces_the_index_keyed_by_processed_at(tmp_path: Path) -> None:
    text, warnings = _mysql_build(
        tmp_path, "CREATE INDEX jobs_order ON jobs (grp, priority, id);\n"
                  "CREATE INDEX jobs_unfinished ON jobs (grp, processed_at, priority, id);\n")
    assert "FROM `jobs` FORCE INDEX (`jobs_unfinished`)" in text
    assert "FORCE INDEX (`jobs_order`)" not in text
    assert warnings == []


def test_without_it_a_mysql_claim_still_reads_the_claim_order_and_is_warned(
        tmp_path: Path) -> None:
    text, warnings = _mysql_build(tmp_path,
                                  "CREATE INDEX jobs_order ON jobs (grp, priority, id);\n")
    assert "FROM `jobs` FORCE INDEX (`jobs_order`)" in text
    assert warnings == ["no index serves the claim order (grp, priority, id) of table \"jobs\" "
                        "over unfinished rows only; claims walk every finished row: CREATE "
                        "INDEX jobs_claim ON jobs (grp, processed_at, priority, id)"]


def test_the_catalog_keeps_the_column_a_partial_index_requires_null() -> None:
    pg = DIALECTS["postgres"]
    catalog = load_catalog([("m.sql", """
        CREATE TABLE jobs (id INT PRIMARY KEY, done TIMESTAMPTZ, p INT) WITH (fillfactor = 70);
        ALTER TABLE jobs SET (autovacuum_vacuum_threshold = 2000);
        CREATE INDEX a ON jobs (id) WHERE done IS NULL;
        CREATE INDEX b ON jobs (id) WHERE ((done IS NULL));
        CREATE INDEX c ON jobs (id) WHERE done IS NULL AND p > 0;
        CREATE INDEX d ON jobs (id) WHERE done IS NOT NULL;
        CREATE INDEX e ON jobs (id);
    """)], pg)
    assert [(i.name, i.partial, i.where_null) for i in catalog.indexes] == [
        ("a", True, "done"), ("b", True, "done"), ("c", True, None), ("d", True, None),
        ("e", False, None)]
    table = catalog.table(None, "jobs")
    assert table is not None
    assert table.settings == {"fillfactor": "70", "autovacuum_vacuum_threshold": "2000"}
    # As PostgreSQL's pg_get_expr() gives an index's predicate back.
    assert null_column("(processed_at IS NULL)", pg) == "processed_at"
    assert null_column("(processed_at IS NULL) AND (x > 1)", pg) is None


def test_a_mysql_fifo_lease_keeps_the_claim_order_over_every_row(tmp_path: Path) -> None:
    """Its claim waits for the group's head through the index it names; finishing a row would
    move the row's entry in an index keyed by processed_at, and the two would deadlock."""
    spec = MYSQL_SPEC.replace("[columns]", "fifo = true\n\n[columns]") + \
        'until = "locked_until"\n'
    table = MYSQL_TABLE.replace("processed_at DATETIME(6) NULL,",
                                "processed_at DATETIME(6) NULL,\n    until DATETIME NULL,")
    project = make_project(tmp_path, spec, table + (
        "CREATE INDEX jobs_order ON jobs (grp, priority, id);\n"
        "CREATE INDEX jobs_unfinished ON jobs (grp, processed_at, priority, id);\n"))
    generated = generate(project, [project.specs / "jobs.toml"])
    assert generated.ok, [d.format() for d in generated.diagnostics]
    ((_, text),) = generated.outputs.items()
    assert "FROM `jobs` FORCE INDEX (`jobs_order`)" in text
    assert "jobs_unfinished" not in text
    assert [d.message for d in generated.diagnostics] == []


# The claim index as an earlier build asked for it, before finished rows were considered: in
# the claim order over every row, under the name the build gives a claim index.
LEASE_SPEC = """\
table = "jobs"
dialect = "{dialect}"

[columns]
id = {{ role = "id", generated = true }}
grp = "group"
priority = "priority"
processed_at = "processed_at"
locked_until = "locked_until"
payload = "payload"
"""
LEASE_TABLE = {
    "postgres": "CREATE TABLE jobs (id BIGSERIAL PRIMARY KEY, grp TEXT NOT NULL, "
                "priority INT NOT NULL, processed_at TIMESTAMPTZ, locked_until TIMESTAMPTZ, "
                "payload TEXT NOT NULL) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor "
                "= 0, autovacuum_vacuum_threshold = 5000, "
                "autovacuum_vacuum_insert_scale_factor = 0);\n",
    "mysql": "CREATE TABLE jobs (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, "
             "grp VARCHAR(64) NOT NULL, priority INT NOT NULL, processed_at DATETIME(6) NULL, "
             "locked_until DATETIME NULL, payload TEXT NOT NULL);\n",
    "sqlite": "CREATE TABLE jobs (id INTEGER PRIMARY KEY, grp TEXT NOT NULL, "
              "priority INTEGER NOT NULL, processed_at TEXT, locked_until TEXT, "
              "payload TEXT NOT NULL);\n",
}
OLD_CLAIM_INDEX = "CREATE INDEX jobs_claim ON jobs (grp, priority, id);\n"


def _claim_advice(root: Path, dialect: str, ddl: str) -> list[str]:
    project = make_project(root, LEASE_SPEC.format(dialect=dialect), ddl)
    generated = generate(project, [project.specs / "jobs.toml"])
    assert generated.ok, [d.format() for d in generated.diagnostics]
    return [d.message for d in generated.diagnostics if "claim order" in d.message]


@pytest.mark.parametrize(("dialect", "taken"), [
    ("postgres", ""), ("mysql", ""), ("sqlite", ""),
    # PostgreSQL and SQLite name tables and indexes from one set of names.
    ("postgres", "CREATE TABLE jobs_claim_2 (x INT);\n"),
    ("sqlite", "CREATE TABLE jobs_claim_2 (x INT);\n"),
    ("mysql", "CREATE INDEX jobs_claim_2 ON jobs (payload(10));\n")])
def test_the_claim_index_advice_runs_as_printed_where_the_old_index_is(
        tmp_path: Path, fresh_database: Callable[[str], str], dialect: str, taken: str) -> None:
    ddl = LEASE_TABLE[dialect] + OLD_CLAIM_INDEX + taken
    (warning,) = _claim_advice(tmp_path / "before", dialect, ddl)
    advice = warning[warning.index("CREATE INDEX"):]
    assert advice.startswith(f"CREATE INDEX jobs_claim_{3 if taken else 2} ON jobs ("), advice
    database = fresh_database(dialect)
    apply_ddl(dialect, database, ddl)
    apply_ddl(dialect, database, advice + ";")  # before the fix: jobs_claim already exists
    # Applied, the DDL builds without the warning.
    assert _claim_advice(tmp_path / "after", dialect, ddl + advice + ";\n") == []


def test_the_advised_name_fits_the_servers_limit() -> None:
    """The table's part of the name gives way, so that the server does not cut the name to one
    the database has already."""
    pg, mysql = DIALECTS["postgres"], DIALECTS["mysql"]
    wanted = ClaimIndex(TableRef(None, "j" * 60), ("id",))
    assert wanted.free_name(pg) == "j" * 57 + "_claim"
    assert wanted.free_name(pg, ["j" * 57 + "_claim"]) == "j" * 55 + "_claim_2"
    assert wanted.free_name(mysql, ["J" * 58 + "_CLAIM"]) == "j" * 56 + "_claim_2"
    assert len(wanted.free_name(mysql)) == 64
    assert ClaimIndex(TableRef(None, "jobs"), ("id",)).free_name(DIALECTS["sqlite"], [
        "JOBS_CLAIM", "jobs_claim_2"]) == "jobs_claim_3"
