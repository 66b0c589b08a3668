"""The conformance matrix's fixture: its project, written and built once a session."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator

import pytest

from conformance.project import Project, build_project


@pytest.fixture(scope="session")
def conformance_project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Project]:
    root = tmp_path_factory.mktemp("conformance")
    sys.path.insert(0, str(root))  # the typed shapes' payload class
    try:
        yield build_project(root)
    finally:
        sys.path.remove(str(root))


@pytest.fixture(scope="session")
def conformance_databases(request: pytest.FixtureRequest,
                          tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], str]:
    """The database of each dialect every shape shares (each shape's tables have its name):
    a PostgreSQL database, a MariaDB one, a SQLite file; made at their first use."""
    made: dict[str, str] = {}

    def of(dialect: str) -> str:
        if dialect not in made:
            if dialect == "postgres":
                made[dialect] = request.getfixturevalue("pg_server").create_database(
                    "conformance")
            elif dialect == "mysql":
                made[dialect] = request.getfixturevalue("mariadb_server").create_database(
                    "conformance")
            else:
                made[dialect] = str(tmp_path_factory.mktemp("conformance_sqlite")
                                    / "queues.sqlite3")
        return made[dialect]

    return of
