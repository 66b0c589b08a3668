"""Partitioned queue tables in the migrations: MySQL/MariaDB's partition clause, which sqlglot
cannot read, is read apart (the table is replayed, and known to be partitioned); SQLite, which has
no partitions, is refused on the spec's line."""

from __future__ import annotations

from pathlib import Path

from genutil import make_project

from inboxgen.generate.build import generate
from inboxgen.generate.catalog import load_catalog
from inboxgen.generate.dialects import DIALECTS

MYSQL_TABLE = """
CREATE TABLE jobs (
    id BIGINT NOT NULL AUTO_INCREMENT,
    note VARCHAR(40) NOT NULL DEFAULT 'PARTITION BY (not a clause)',
    payload JSON NOT NULL,
    PRIMARY KEY (id),
    KEY jobs_claim (id)
) ENGINE=InnoDB /* PARTITION BY, in a comment */
PARTITION BY RANGE (id) (
    PARTITION p0 VALUES LESS THAN (1000),
    PARTITION p1 VALUES LESS THAN MAXVALUE
);
CREATE TABLE plain (id BIGINT PRIMARY KEY, note VARCHAR(40) DEFAULT 'PARTITION BY x');
"""


def test_a_mysql_partition_clause_is_read_apart_and_the_table_replayed() -> None:
    catalog = load_catalog([("m.sql", MYSQL_TABLE)], DIALECTS["mysql"])
    assert catalog.opaque == []
    jobs = catalog.table(None, "jobs")
    assert jobs is not None and jobs.partitioned
    assert [c.name for c in jobs.columns] == ["id", "note", "payload"]
    assert jobs.primary_key == ["id"]
    assert ("jobs_claim", ["id"]) in [(i.name, i.columns) for i in catalog.indexes_of(jobs)]
    plain = catalog.table(None, "plain")
    assert plain is not None and not plain.partitioned


def test_a_mysql_partitioned_table_builds_and_its_statements_are_the_plain_tables(
        tmp_path: Path) -> None:
    spec = ('dialect = "mysql"\ntable = "jobs"\n\n[columns]\n'
            'id = { role = "id", generated = true }\npayload = "payload"\n')
    plain_ddl = MYSQL_TABLE.split("PARTITION BY RANGE")[0].rstrip() + ";\n"
    modules = []
    for name, ddl in (("partitioned", MYSQL_TABLE), ("plain", plain_ddl)):
        project = make_project(tmp_path / name, spec, ddl)
        result = generate(project, [project.specs / "jobs.toml"])
        assert result.ok, result.diagnostics
        (text,) = result.outputs.values()
        modules.append(text)
    assert modules[0] == modules[1]
