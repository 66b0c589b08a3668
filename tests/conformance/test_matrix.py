"""The conformance matrix: every shape of the covering array (axes.py) built by `inboxgen
build` and run through the exact-ledger scenario (scenario.py) on a real server; every refused
shape refused by the build with a located error.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from genutil import import_path

from conformance.axes import refusal
from conformance.project import PROBES, SHAPES, Project, located, shape_id
from conformance.scenario import Scenario


def test_the_build_refuses_exactly_the_refused_shapes(conformance_project: Project) -> None:
    for s in SHAPES:
        assert not conformance_project.errors_of(s), (s.name, conformance_project.build.stderr)
        assert conformance_project.module_path(s).exists(), s.name
    for s in PROBES:
        errors = conformance_project.errors_of(s)
        why = refusal(s)
        assert errors, f"{s.name} ({why}) was built; the build should refuse it"
        assert all(located(e) for e in errors), errors
        assert any(why in e for e in errors), errors
        assert not conformance_project.module_path(s).exists()


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_shape(shape: Any, conformance_project: Project,
               conformance_databases: Callable[[str], str], tmp_path: Path) -> None:
    path = conformance_project.module_path(shape)
    assert path.exists(), conformance_project.build.stderr
    module = import_path(path, f"conformance_{shape.name}")
    database = conformance_databases(shape.dialect)
    ddl = (conformance_project.root / "specs" / "migrations" / f"{shape.name}.sql").read_text()
    problems = Scenario(shape, module, path, conformance_project.root, database,
                        tmp_path / "logs").run(ddl)
    assert not problems, f"{shape.name}:\n  " + "\n  ".join(problems)
