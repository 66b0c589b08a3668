"""Scenarios aimed at known defects of the runtime (cases.py, DEFECTS). Each asserts what the
runtime should do; where today's runtime fails it, the test is a strict xfail naming the
defect, so the suite stays green and the mark turns red once the defect is fixed.

1. `count_crashes = true` under concurrency: two processes of four slots, every handler acking
   at once. The counting claim commits before the relock, so a concurrent claim counts the queue
   head again; rows end "attempt N is past max_attempts 3: earlier deliveries never finished"
   in the dead letters without a single delivery.
2. Without count_crashes, a row-lock job that SIGKILLs its own worker comes back at once with
   the same attempt, for ever: it holds the queue, and healthy jobs are stranded.
3. SQLite with more than about 6 slots or a short lease: workers stall for the whole busy
   timeout, do not exit on SIGTERM within shutdown_timeout, may hang.
6. Advisory workers starve their own slots: a round reads only batch + workers candidates and
   rows in work stay at the queue head, so only a few of 16 slots run at once.
"""

from __future__ import annotations

import pytest

from .harness import FaultRuns

# Defects the runtime shows today (re-checked by running this file): id -> reason.
XFAIL: dict[str, str] = {}


def _xfail(case_id: str) -> list[pytest.MarkDecorator]:
    if case_id in XFAIL:
        return [pytest.mark.xfail(strict=True, reason=XFAIL[case_id])]
    return []


@pytest.mark.parametrize("case_id", [
    pytest.param(c, id=c, marks=_xfail(c))
    for c in ("pg-counted-concurrent", "mysql-counted-concurrent")])
def test_count_crashes_dead_letters_no_healthy_job_under_concurrency(
        case_id: str, fault_runs: FaultRuns, request: pytest.FixtureRequest) -> None:
    report = fault_runs.get(case_id, request)
    assert report.healthy_dead == 0, (
        f"{report.healthy_dead} healthy jobs dead-lettered, "
        f"{report.healthy_dead_zero_deliveries} of them never delivered "
        f"({dict(report.dead_notes)}): {report.summary()}")
    assert not report.problems(), report.summary() + "\n" + "\n".join(report.problems())


@pytest.mark.parametrize("case_id", [
    pytest.param("pg-row_lock-bad", id="pg-row_lock-bad", marks=_xfail("pg-row_lock-bad"))])
def test_a_self_killing_row_lock_job_does_not_hold_the_queue(
        case_id: str, fault_runs: FaultRuns, request: pytest.FixtureRequest) -> None:
    report = fault_runs.get(case_id, request)
    healthy_stranded = report.examples.get("stranded_healthy", [])
    assert report.stranded == 0, (
        f"{report.stranded} jobs stranded after {report.total_s:.0f} s "
        f"({len(healthy_stranded)} of them healthy); {report.deaths} worker processes died, "
        f"{report.selfkill_dead} of {report.selfkill} self-killing jobs dead-lettered: "
        f"{report.summary()}")
    assert not report.problems(), report.summary() + "\n" + "\n".join(report.problems())


@pytest.mark.parametrize("case_id", [
    pytest.param("sqlite-lease-slots", id="sqlite-lease-slots",
                 marks=_xfail("sqlite-lease-slots"))])
def test_sqlite_with_many_slots_and_a_short_lease_neither_stalls_nor_hangs_on_sigterm(
        case_id: str, fault_runs: FaultRuns, request: pytest.FixtureRequest) -> None:
    report = fault_runs.get(case_id, request)
    assert not report.slow_exits, f"{report.slow_exits}: {report.summary()}"
    assert report.max_gap_s is not None and report.max_gap_s < 5.0, (
        f"no job settled for {report.max_gap_s} s (busy timeout 30 s): {report.summary()}")
    assert not report.problems(), report.summary() + "\n" + "\n".join(report.problems())


@pytest.mark.parametrize("case_id", [
    pytest.param("pg-advisory-slots", id="pg-advisory-slots", marks=_xfail("pg-advisory-slots"))])
def test_advisory_slots_get_rows_while_rows_are_due(
        case_id: str, fault_runs: FaultRuns, request: pytest.FixtureRequest) -> None:
    report = fault_runs.get(case_id, request)
    assert not report.problems(), report.summary() + "\n" + "\n".join(report.problems())
    assert report.max_concurrency == report.slots, (
        f"at most {report.max_concurrency} of {report.slots} slots ran at once: "
        f"{report.summary()}")
    assert report.mean_concurrency is not None and \
        report.mean_concurrency >= 0.6 * report.slots, (
            f"{report.mean_concurrency} of {report.slots} slots busy on average while "
            f"{2 * report.slots}+ jobs were due: {report.summary()}")
