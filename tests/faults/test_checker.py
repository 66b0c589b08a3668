"""The suite's own instruments: a checker that passes everything would guard nothing.

A deliberately broken handler (child.py `--effects outside`: the effect commits on a connection
of its own, before and apart from the settlement; `--skip-every`: some jobs are acked without
their effect) under a stopped lease holder must show up as lost, duplicated and fenced effects.
The rules judged from the event logs alone (a job delivered again while its holder lives and
runs, a job run before it was due) are checked on logs written here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .checker import EARLY_SLACK, Report, early_runs, overlapping_deliveries
from .eventlog import Event, EventLog, EventReader, parse_line, read_events
from .harness import FaultRuns, markdown

SELF_TEST = "checker self-test: a handler broken on purpose"


def test_the_checker_sees_lost_duplicated_and_fenced_effects(
        fault_runs: FaultRuns, request: pytest.FixtureRequest) -> None:
    # Enough jobs that the drain outlasts the wait for a holder to stop in the middle of a job
    # (400 drained in 1.5 s on tables with the build's settings, sometimes before any stop).
    jobs = 800
    report = fault_runs.get("pg-lease-sigstop", request, jobs=jobs, effects="outside",
                            skip_every=50, label=SELF_TEST)
    assert report.fenced_checked >= 1, report.summary()
    assert report.lost == jobs // 50, report.summary()
    assert report.fenced >= 1, report.summary()
    assert report.duplicated >= 1, report.summary()
    problems = " ".join(report.problems())
    assert "lost" in problems and "duplicated" in problems and "fenced" in problems


def test_the_summary_labels_the_checkers_self_test_and_lists_it_last() -> None:
    """The self-test's row shows lost and duplicated effects, as it must: it says what it is,
    so a reader of the summary does not take it for a case that failed."""
    broken = Report("pg-lease-sigstop", "pg-lease", "sigstop", jobs=800, lost=16, duplicated=4,
                    label=SELF_TEST)
    clean = Report("pg-lease-sigstop", "pg-lease", "sigstop", jobs=400)
    head, rule, *rows = markdown([broken, clean]).splitlines()
    assert rows[0].startswith("| pg-lease-sigstop | pg-lease | sigstop | 400 | 0 | 0 |")
    assert rows[1].startswith(f"| pg-lease-sigstop ({SELF_TEST}) | pg-lease | sigstop | 800 | "
                              f"16 | 4 |"), rows[1]
    assert rows[1].endswith(" | expected of the self-test: lost = 16 (e.g. []); duplicated = 4 "
                            "(e.g. []) |"), rows[1]


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


def _log(*lines: str) -> list[Event]:
    return [e for e in map(parse_line, lines) if e is not None]


def test_a_job_claimed_again_while_its_holder_lives_is_an_overlapping_delivery() -> None:
    # Process 1 holds job 7 from 100 s until it settles at 112 s; process 2 claims it at 105 s.
    logs = {1: _log("100.0 claimed 7 1", "100.0 started 7 1", "112.0 settled 7 1"),
            2: _log("105.0 claimed 7 2", "105.0 started 7 2", "106.0 settled 7 2")}
    ends = {1: 200.0, 2: 200.0}
    assert overlapping_deliveries(logs, ends) == [(7, 1, 2)]
    # Its holder was killed at 104 s (the row was up for grabs) or stopped in between (it could
    # not renew): no overlap.
    assert overlapping_deliveries({1: _log("100.0 claimed 7 1"), 2: logs[2]},
                                  {1: 104.0, 2: 200.0}) == []
    assert overlapping_deliveries(logs, ends, stops={1: [(101.0, 104.0)]}) == []
    # A stop after the second claim does not excuse it.
    assert overlapping_deliveries(logs, ends, stops={1: [(106.0, 108.0)]}) == [(7, 1, 2)]
    # Claimed again once the first delivery was over (rolled back for a retry): no overlap, in
    # the same process either; a holder that never settles holds the job while it lives.
    again = {1: _log("100.0 claimed 7 1", "101.0 discarded 7 1", "103.0 claimed 7 2",
                     "104.0 settled 7 2"),
             2: _log("100.5 claimed 8 1"), 3: _log("150.0 claimed 8 2", "151.0 settled 8 2")}
    assert overlapping_deliveries(again, {1: 200.0, 2: 160.0, 3: 200.0}) == [(8, 2, 3)]
    assert overlapping_deliveries(again, {1: 200.0, 2: 140.0, 3: 200.0}) == []


def test_a_delivery_before_its_due_time_by_the_databases_clock_is_early() -> None:
    due = {7: 120.0, 8: 120.0}  # by the database's clock; job 9 has none and is not judged
    deliveries: dict[int, list[tuple[float, int, int | None]]] = {
        7: [(100.0, 1, 1)], 8: [(120.2, 2, 1)], 9: [(99.0, 3, 1)]}
    assert early_runs(deliveries, due, offset=0.0) == [(7, 1, 20.0)]
    # 119 s by the suite's clock is 120.5 s by a database clock 1.5 s ahead of it.
    assert early_runs({7: [(119.0, 1, 1)]}, due, offset=1.5) == []
    assert early_runs({7: [(119.0, 1, 1)]}, due, offset=0.0) == [(7, 1, 1.0)]
    # Within the precision of comparing the clocks (EARLY_SLACK), a run is on time.
    assert early_runs({7: [(120.0 - EARLY_SLACK / 2, 1, 1)]}, due, offset=0.0) == []


def test_early_runs_and_overlaps_where_every_holder_can_renew_are_problems() -> None:
    assert any("early" in p for p in Report("s", "pg-lease", "skew", early=1).problems())
    # Where a fault may keep a live holder from renewing, a second delivery is no violation.
    assert Report("s", "pg-lease", "terminate", overlapping=2).problems() == []
    assert any("overlapping" in p for p in Report("s", "pg-lease", "skew", overlapping=2,
                                                  exclusive=True).problems())
