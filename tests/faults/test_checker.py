"""The suite's own instruments: a checker that passes everything would guard nothing.

A deliberately broken handler (child.py `--effects outside`: the effect commits on a connection
of its own, before and apart from the settlement; `--skip-every`: some jobs are acked without
their effect) under a stopped lease holder must show up as lost, duplicated and fenced effects.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .eventlog import EventLog, EventReader, read_events
from .harness import FaultRuns


def test_the_checker_sees_lost_duplicated_and_fenced_effects(
        fault_runs: FaultRuns, request: pytest.FixtureRequest) -> None:
    report = fault_runs.get("pg-lease-sigstop", request, jobs=400, effects="outside",
                            skip_every=50)
    assert report.fenced_checked >= 1, report.summary()
    assert report.lost == 400 // 50, report.summary()
    assert report.fenced >= 1, report.summary()
    assert report.duplicated >= 1, report.summary()
    problems = " ".join(report.problems())
    assert "lost" in problems and "duplicated" in problems and "fenced" in problems


def test_the_event_log_keeps_complete_lines_only(tmp_path: Path) -> None:
    path = tmp_path / "events.log"
    log = EventLog(path)
    log.write("claimed", 7, 1)
    log.write("settled", 7, 1, sync=True)
    reader = EventReader(path)
    assert [(e.kind, e.job, e.attempt) for e in reader.events()] == [
        ("claimed", 7, 1), ("settled", 7, 1)]
    with open(path, "ab") as f:  # a line not finished yet (or cut off)
        f.write(b"1700000000.000000 start")
    assert len(reader.events()) == 2
    assert len(read_events(path)) == 2
    with open(path, "ab") as f:  # the reader picks the line up once it is complete
        f.write(b"ed 8 1\n")
    assert [e.kind for e in reader.events()] == ["claimed", "settled", "started"]
    log.write("exit", '{"acked": 1}', sync=True)
    assert reader.events()[-1].fields == ('{"acked": 1}',)
