"""Fixtures of the fault suite: each case runs once per session (its invariant test and its
recovery test share the run), on the session's servers or on private restartable ones.

Set INBOXGEN_FAULT_REPORT=<file> to have the table of every case run written there as markdown;
it is printed in pytest's terminal summary either way.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .harness import FaultRuns, markdown

_RUNS: list[FaultRuns] = []


@pytest.fixture(scope="session")
def fault_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultRuns]:
    runs = FaultRuns(tmp_path_factory.mktemp("faults"))
    _RUNS.append(runs)
    try:
        yield runs
    finally:
        runs.close()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    reports = [r for runs in _RUNS for r in runs.reports.values()]
    if not reports:
        return
    table = markdown(reports)
    terminalreporter.section("fault suite")
    terminalreporter.write(table)
    target = os.environ.get("INBOXGEN_FAULT_REPORT")
    if target:
        Path(target).write_text(table, encoding="utf-8")
