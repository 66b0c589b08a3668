"""The invariants of a scenario, computed from what the databases hold at the end (the queue,
the dead letters, the ledger) and what the processes wrote (their event logs, exit codes).

Kinds of job: ``ok`` (healthy), ``poison`` (its payload does not decode) and ``selfkill`` (its
handler SIGKILLs its own process on every delivery).

Invariants (each must be 0 or empty):

- lost: a job that left the queue without its end: a healthy job finished with no committed
  effect, a poison or self-killing job gone but not in the dead letters;
- duplicated: jobs with two or more committed effects;
- stranded: jobs still in the queue after the drain and its timeout;
- torn: a committed effect whose job is still queued or dead (effect and settlement apart);
- stale: where claims count, effects of a delivery that a later claim of the same job (a
  delivery with a later attempt) had superseded;
- fenced: the same for a stopped lease holder (SIGSTOP for 3 leases): its rows are claimed
  again while it sleeps, and once it wakes it must commit nothing for them;
- in at-least-once scenarios (handlers that are not transactional, `Scenario.plain`), a crash
  between a job's effect and its settlement runs the job again: duplicated, fenced and stale are
  reported there, not failed;
- healthy dead, unexplained: healthy jobs in the dead letters of which not every delivery died
  with its process (with zero deliveries when no process died at all). Healthy jobs whose every
  delivery died beside a self-killing job are reported, not failed: each crash spends an attempt;
- poison and self-killing jobs not (all) in the dead letters;
- attempts: deliveries that break the form's attempt rules (below);
- unexpected exits: a process that ended without being killed, SIGTERMed or killing itself, or
  that exited non-zero after SIGTERM;
- slow exits: processes still running `shutdown_timeout` + grace after SIGTERM;
- leftovers: sessions, sessions idle in transaction and advisory locks the server still holds
  for the workers once they are gone (after each SIGTERM under load, and at the end);
- early: a delivery that began before its job was due (`retry_after`, read from the database
  at enqueue), judged by the database's clock (the suite measures its offset to it; every
  process logs by the suite's clock, see child.py);
- overlapping, where the scenario lets every holder renew (`Scenario.exclusive`: no fault stops
  a holder or cuts its sessions): a delivery that began while an earlier delivery of the same
  job was still in work in a process that lived and was not stopped.

Attempt rules: no delivery runs with an attempt past `max_attempts` (it is dead-lettered
without running); a delivery's effect carries that delivery's attempt; under a row lock that
does not count crashes every delivery reads attempt 1 (a crash spends none, and these handlers
never retry); in every form that counts at the claim, no two deliveries of one job read the same
attempt.

Figures: drain time (from the start to the queue seen empty); the clean rate (effects per
second between 10 % of the jobs, and at least 1.5 s, and the first fault: the median of 0.5 s
bins, as other work on the machine comes and goes); the recovery rate (effects per second from
the end of the last fault for 5 s, cut where fewer jobs than slots were left) and the recovery
ratio (recovery rate / clean rate); how soon after the fault a 1 s window reached 95 % of the
clean rate (`recovered_within_s`; the CI target is at most 3 s). A fault ends when what it
broke is back: the replacement process ready, the server accepting connections, the stopped
process resumed.
"""

from __future__ import annotations

import bisect
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .eventlog import Event
from .injectors import StopHolder
from .shapes import MAX_ATTEMPTS

if TYPE_CHECKING:
    from .fleet import Incarnation
    from .scenario import Run

RECOVERY_WINDOW = 5.0  # seconds after the last fault
MIN_WINDOW = 1.0  # a shorter window (the queue ran dry) gives no ratio
TARGET = 0.95  # of the clean rate
WARMUP = 1.5  # seconds at the start left out of the clean rate
RECOVERY_HORIZON = 3.0  # "within a few seconds": how soon after the fault the target is due
# How far before its due time a delivery may seem to begin: the worker's offset to the database's
# clock and the suite's are each off by up to half a round trip (a skewed host would be seconds
# early).
EARLY_SLACK = 0.25


@dataclass
class Report:
    scenario: str
    shape: str
    fault: str
    jobs: int = 0
    healthy: int = 0
    poison: int = 0
    selfkill: int = 0
    lost: int = 0
    duplicated: int = 0
    stranded: int = 0
    torn: int = 0
    fenced: int = 0
    stale: int = 0  # committed effects of deliveries a later claim had superseded
    at_least_once: bool = False  # handlers not transactional: duplicates reported, not failed
    fenced_checked: int = 0  # deliveries of a stopped lease holder another process superseded
    healthy_dead: int = 0
    healthy_dead_unexplained: int = 0
    healthy_dead_zero_deliveries: int = 0
    poison_dead: int = 0
    selfkill_dead: int = 0
    deliveries: int = 0
    redelivered: int = 0  # healthy jobs delivered more than once
    lease_lost: int = 0
    dead_notes: Counter[str] = field(default_factory=Counter)
    attempt_violations: list[str] = field(default_factory=list)
    unexpected_exits: list[str] = field(default_factory=list)
    slow_exits: list[str] = field(default_factory=list)
    leftovers: dict[str, int] = field(default_factory=dict)
    # What a run that is no case of the suite is for ("checker self-test: ..."): the summary
    # names it, and its problems are expected.
    label: str = ""
    leftovers_mid: list[dict[str, int]] = field(default_factory=list)
    processes_started: int = 0
    deaths: int = 0
    drained: bool = False
    drain_s: float | None = None
    total_s: float = 0.0
    clean_rate: float | None = None
    recovery_rate: float | None = None
    recovery_ratio: float | None = None
    recovery_window_s: float | None = None
    recovered_within_s: float | None = None  # from the fault's end to a 1 s window at TARGET
    recovery_measurable: bool = False  # the queue held work for 2 s or more after the fault
    max_concurrency: int = 0
    mean_concurrency: float | None = None
    slots: int = 0
    max_gap_s: float | None = None
    exit_seconds: list[float | None] = field(default_factory=list)
    early: int = 0  # deliveries that began before their job was due (the database's clock)
    overlapping: int = 0  # deliveries that began while a live, running holder had the job
    exclusive: bool = False  # every holder can renew: overlapping deliveries are violations
    scheduled: int = 0  # jobs enqueued due later
    scheduled_runs: int = 0  # their deliveries
    scheduled_lead: float | None = None  # the earliest of them began this long after due, s
    process_deliveries: dict[str, int] = field(default_factory=dict)  # process -> deliveries
    outlived_lease: int = 0  # deliveries that settled more than a lease after their claim
    host_skews: dict[str, float] = field(default_factory=dict)  # process -> its clock's offset
    faults: list[str] = field(default_factory=list)
    examples: dict[str, list[Any]] = field(default_factory=dict)

    # -- verdicts -------------------------------------------------------------------------

    def problems(self) -> list[str]:
        """Every broken invariant, as one line each (empty when the scenario is clean)."""
        out = []
        exact = [] if self.at_least_once else ["duplicated", "fenced", "stale"]
        exact += ["overlapping"] if self.exclusive else []
        for name in ("lost", *exact, "stranded", "torn", "healthy_dead_unexplained", "early"):
            value = getattr(self, name)
            if value:
                out.append(f"{name} = {value} (e.g. {self.examples.get(name, [])[:5]})")
        if self.poison_dead != self.poison:
            out.append(f"poison jobs dead-lettered: {self.poison_dead} of {self.poison}")
        if self.selfkill_dead != self.selfkill:
            out.append(f"self-killing jobs dead-lettered: {self.selfkill_dead} of "
                       f"{self.selfkill}")
        if self.attempt_violations:
            out.append(f"attempt rules broken {len(self.attempt_violations)} time(s): "
                       f"{self.attempt_violations[:5]}")
        if self.unexpected_exits:
            out.append(f"unexpected exits: {self.unexpected_exits[:3]}")
        if self.slow_exits:
            out.append(f"slow exits after SIGTERM: {self.slow_exits[:5]}")
        for snapshot in [*self.leftovers_mid, self.leftovers]:
            left = {k: v for k, v in snapshot.items() if v}
            if left:
                out.append(f"left on the server after the workers were gone: {left}")
        return out

    def summary(self) -> str:
        ratio = "n/a" if self.recovery_ratio is None else f"{self.recovery_ratio:.2f}"
        drain = "not drained" if self.drain_s is None else f"{self.drain_s:.1f} s"
        return (f"{self.scenario}: {self.jobs} jobs, lost {self.lost}, duplicated "
                f"{self.duplicated}, stranded {self.stranded}, healthy dead {self.healthy_dead} "
                f"(unexplained {self.healthy_dead_unexplained}), recovery {ratio}, drain {drain}, "
                f"deliveries {self.deliveries}, processes {self.processes_started}, "
                f"concurrency max {self.max_concurrency}/{self.slots}"
                + ("" if self.mean_concurrency is None else
                   f" mean {self.mean_concurrency:.1f}")
                + ("" if self.max_gap_s is None else f", longest gap {self.max_gap_s:.1f} s"))


def check(run: Run) -> Report:
    target, fleet = run.target, run.fleet
    jobs = target.jobs
    kinds = Counter(jobs.values())
    rep = Report(run.name, target.name, run.fault_label, jobs=len(jobs), healthy=kinds["ok"],
                 poison=kinds["poison"], selfkill=kinds["selfkill"], slots=fleet.slots)
    rep.at_least_once = fleet.plain
    rep.faults = [what for f in run.faults for _, what in f.actions]
    queued, dead, ledger = _read_tables(run)
    effects: dict[int, list[tuple[int, int | None, float]]] = defaultdict(list)
    for job, pid, attempt, at in ledger:
        effects[job].append((pid, attempt, at))

    # -- the ledger against the tables ----------------------------------------------------
    examples: dict[str, list[Any]] = defaultdict(list)
    for job, kind in jobs.items():
        gone = job not in queued and job not in dead
        if kind == "ok":
            if gone and not effects.get(job):
                examples["lost"].append(job)
            if job in dead:
                rep.healthy_dead += 1
        else:
            if gone:
                examples["lost"].append(job)
            if job in dead:
                if kind == "poison":
                    rep.poison_dead += 1
                else:
                    rep.selfkill_dead += 1
            if effects.get(job):
                examples["torn"].append(job)
        if job in queued:
            examples["stranded"].append(job)
            if kind == "ok":
                examples["stranded_healthy"].append(job)
        if len(effects.get(job, ())) > 1:
            examples["duplicated"].append(job)
        if effects.get(job) and (job in queued or job in dead):
            examples["torn"].append(job)
    rep.lost = len(examples["lost"])
    rep.stranded = len(examples["stranded"])
    rep.duplicated = len(examples["duplicated"])
    rep.torn = len(set(examples["torn"]))

    # -- deliveries, from the event logs --------------------------------------------------
    logs: dict[int, list[Event]] = {}
    by_pid: dict[int, Incarnation] = {}
    for inc in fleet.incarnations:
        logs[inc.pid] = inc.events()
        by_pid[inc.pid] = inc
    deliveries: dict[int, list[tuple[float, int, int | None]]] = defaultdict(list)
    ended_open: dict[int, list[int]] = defaultdict(list)  # job -> pids that died holding it
    intervals: list[tuple[float, float]] = []
    for pid, events in logs.items():
        for e in events:
            if e.kind == "claimed":
                deliveries[e.job].append((e.at, pid, e.attempt))

    def deliveries_of(job: int) -> list[tuple[float, int, int | None]]:
        return deliveries.get(job, [])

    for pid, events in logs.items():
        inc = by_pid[pid]
        open_: dict[int, float] = {}
        for e in events:
            if e.kind == "started":
                open_[e.job] = e.at
            elif e.kind in ("settled", "discarded"):
                began = open_.pop(e.job, None)
                if began is not None:
                    intervals.append((began, e.at))
            elif e.kind == "lease_lost":
                rep.lease_lost += 1
            elif e.kind == "dead":
                note = e.fields[1] if len(e.fields) > 1 else ""
                rep.dead_notes[_note_kind(note)] += 1
        died = inc.returncode is not None and inc.returncode < 0
        end = inc.ended or run.finished_at
        claimed_open = {e.job for e in events if e.kind == "claimed"} - {
            e.job for e in events if e.kind in ("settled", "discarded")}
        for job, began in open_.items():
            # Never settled here: in work until the job was delivered again, or the process
            # ended (a broken connection may end the transaction without a rollback).
            again = [a for a, _, _ in deliveries_of(job) if a > began]
            intervals.append((began, min([end, *again])))
        if died:
            for job in claimed_open:
                ended_open[job].append(pid)
    rep.deliveries = sum(len(v) for v in deliveries.values())
    rep.redelivered = sum(1 for j, v in deliveries.items() if len(v) > 1 and jobs.get(j) == "ok")

    # -- process ends ---------------------------------------------------------------------
    rep.processes_started = len(fleet.incarnations)
    for inc in fleet.incarnations:
        events = logs[inc.pid]
        rc = inc.returncode
        who = f"{inc.slot}.{inc.generation} (pid {inc.pid})"
        if rc is not None and rc < 0:
            rep.deaths += 1
        if inc.expected == "sigkill" and rc == -9:
            continue
        if inc.selfkill() is not None:
            continue
        if inc.expected == "sigterm":
            if rc != 0 or not any(e.kind == "exit" for e in events):
                rep.unexpected_exits.append(f"{who} exited {rc} after SIGTERM: "
                                            f"{inc.stderr(600)!r}")
            continue
        if inc.expected in ("sigterm-overdue", "sigkill-at-end"):
            rep.slow_exits.append(f"{who}: still running "
                                  f"{run.fleet.shutdown_timeout:g} s + grace after SIGTERM")
            continue
        if rc is None:
            continue
        rep.unexpected_exits.append(f"{who} ended on its own with {rc}: {inc.stderr(800)!r}")

    # -- dead letters of healthy jobs -----------------------------------------------------
    for job in dead:
        if jobs.get(job) != "ok":
            continue
        seen = deliveries.get(job, [])
        if not seen:
            rep.healthy_dead_zero_deliveries += 1
        died_holding = len(ended_open.get(job, []))
        explained = rep.deaths > 0 and died_holding >= len(seen)
        if not explained:
            examples["healthy_dead_unexplained"].append(
                (job, dead[job], [(round(a, 3), p, n) for a, p, n in seen]))
    rep.healthy_dead_unexplained = len(examples["healthy_dead_unexplained"])

    # -- attempt rules --------------------------------------------------------------------
    for job, seen in deliveries.items():
        seen.sort()
        attempts = [a for _, _, a in seen]
        if any(a is not None and a > MAX_ATTEMPTS for a in attempts):
            rep.attempt_violations.append(f"job {job} ran with attempts {attempts} "
                                          f"(max_attempts {MAX_ATTEMPTS})")
        if not target.counts_crashes:
            if any(a != 1 for a in attempts):
                rep.attempt_violations.append(f"job {job}: uncounted row lock attempts "
                                              f"{attempts}")
        elif len(set(attempts)) != len(attempts):
            # Each claim counts once, so no two deliveries read the same attempt. (Handlers may
            # begin out of claim order: a SQLite transactional handler waits for the write lock.)
            rep.attempt_violations.append(f"job {job}: two deliveries read one attempt "
                                          f"{attempts}")
    for job, rows in effects.items():
        for pid, attempt, _ in rows:
            if not any(p == pid and a == attempt for _, p, a in deliveries.get(job, [])):
                rep.attempt_violations.append(
                    f"job {job}: effect of pid {pid} attempt {attempt} matches no delivery")

    # -- superseded deliveries and the stopped lease holder ---------------------------------
    # Where claims count, a claim of a job with a later attempt supersedes every earlier one: an
    # effect of a superseded delivery must never commit (its settlement is fenced by the token).
    victims = {stop.victim.pid for f in run.faults if isinstance(f, StopHolder)
               for stop in f.stops}
    if target.counts_crashes:
        for job, seen in deliveries.items():
            for _, pid, attempt in seen:
                if attempt is None or not any(a is not None and a > attempt
                                              for _, _, a in seen):
                    continue
                committed = any(p == pid and a == attempt for p, a, _ in effects.get(job, []))
                if committed:
                    examples["stale"].append((job, pid, attempt))
                if pid in victims and target.claim_form == "lease":
                    rep.fenced_checked += 1
                    if committed:
                        examples["fenced"].append(job)
    rep.stale = len(examples["stale"])
    rep.fenced = len(examples["fenced"])

    # -- due times and holders that live ------------------------------------------------
    if target.due:
        early = early_runs(deliveries, target.due, run.db_offset)
        rep.early = len(early)
        examples["early"] = early
        rep.scheduled = len(target.scheduled)
        rep.scheduled_runs = sum(len(deliveries_of(job)) for job in target.scheduled)
        leads = [at + run.db_offset - target.due[job] for job in target.scheduled
                 for at, _, _ in deliveries_of(job)]
        rep.scheduled_lead = min(leads) if leads else None
    stops: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for f in run.faults:
        if isinstance(f, StopHolder):
            for stop in f.stops:
                stops[stop.victim.pid].append((stop.stopped_at,
                                               stop.resumed_at or run.finished_at))
    ends = {pid: _process_end(inc, logs[pid], run) for pid, inc in by_pid.items()}
    overlaps = overlapping_deliveries(logs, ends, stops)
    rep.overlapping = len(overlaps)
    examples["overlapping"] = overlaps
    rep.exclusive = run.exclusive
    rep.outlived_lease = sum(1 for a, b in intervals if b - a > fleet.lease)
    for inc in fleet.incarnations:
        rep.process_deliveries[f"{inc.slot}.{inc.generation}"] = sum(
            1 for e in logs[inc.pid] if e.kind == "claimed")
        ready = [e for e in logs[inc.pid] if e.kind == "ready" and len(e.fields) > 1]
        if ready:
            rep.host_skews[f"{inc.slot}.{inc.generation}"] = float(ready[0].fields[1])

    # -- exits after SIGTERM, server leftovers -------------------------------------------
    for fault in run.faults:
        rep.exit_seconds += fault.observations.get("exit_seconds", [])
        rep.leftovers_mid += fault.observations.get("held_after_exit", [])
    rep.leftovers = run.leftovers
    rep.examples = dict(examples)

    # -- timing ---------------------------------------------------------------------------
    rep.drained = run.drained_at is not None
    rep.total_s = run.finished_at - run.go_at
    if run.drained_at is not None:
        rep.drain_s = run.drained_at - run.go_at
    first_effect = sorted(min(at for _, _, at in rows) for j, rows in effects.items()
                          if jobs.get(j) == "ok")
    _rates(run, rep, first_effect)
    _concurrency(rep, intervals, first_effect)
    if len(first_effect) > 1:
        rep.max_gap_s = max(b - a for a, b in zip(first_effect, first_effect[1:], strict=False))
    return rep


def early_runs(deliveries: dict[int, list[tuple[float, int, int | None]]],
               due: dict[int, float], offset: float,
               slack: float = EARLY_SLACK) -> list[tuple[int, int, float]]:
    """Deliveries that began before their job was due: (job, pid, seconds early).
    `deliveries`: job -> (claimed at, pid, attempt) by the suite's clock; `due`: job -> due time
    by the database's clock; `offset`: the database's clock minus the suite's."""
    out = []
    for job, seen in sorted(deliveries.items()):
        if job not in due:
            continue
        for at, pid, _ in seen:
            early = due[job] - (at + offset)
            if early > slack:
                out.append((job, pid, round(early, 3)))
    return out


def overlapping_deliveries(logs: dict[int, list[Event]], ends: dict[int, float],
                           stops: dict[int, list[tuple[float, float]]] | None = None,
                           ) -> list[tuple[int, int, int]]:
    """Deliveries of a job that began while an earlier delivery of it was in work, in a process
    that was alive and not stopped from that delivery's claim to the later one's: (job, pid of
    the earlier, pid of the later). A delivery is in work from its claim to its settlement (or
    rollback), or, never settled, until its process ended (`ends`: pid -> when)."""
    spans: dict[int, list[tuple[float, float, int]]] = defaultdict(list)
    for pid, events in logs.items():
        open_: dict[int, list[float]] = defaultdict(list)
        for e in events:
            if e.kind == "claimed":
                open_[e.job].append(e.at)
            elif e.kind in ("settled", "discarded") and open_.get(e.job):
                spans[e.job].append((open_[e.job].pop(0), e.at, pid))
        for job, begun in open_.items():
            spans[job] += [(at, ends[pid], pid) for at in begun]

    def stopped(pid: int, since: float, until: float) -> bool:
        return any(a <= until and b >= since for a, b in (stops or {}).get(pid, []))

    out = []
    for job, seen in sorted(spans.items()):
        seen.sort()
        for i, (at, _, pid) in enumerate(seen):
            for began, ended, holder in seen[:i]:
                if began < at < ended and not stopped(holder, began, at):
                    out.append((job, holder, pid))
                    break
    return out


def _process_end(inc: Incarnation, events: list[Event], run: Run) -> float:
    """When a worker process stopped holding anything: SIGKILLed by the suite, killed by its own
    job, or exited (as it logged, else as the suite saw)."""
    if inc.expected == "sigkill" and inc.signalled_at is not None:
        return inc.signalled_at
    killed = inc.selfkill()
    if killed is not None:
        return killed.at
    exits = [e.at for e in events if e.kind == "exit"]
    return exits[-1] if exits else inc.ended or run.finished_at


def _read_tables(run: Run) -> tuple[dict[int, int], dict[int, int],
                                    list[tuple[int, int, int | None, float]]]:
    """The queue, the dead letters and the ledger; a server just restarted gets 15 s to answer."""
    deadline = time.monotonic() + 15
    while True:
        try:
            t = run.target
            return t.queue_rows(), t.dead_rows(), t.ledger_rows()
        except Exception as err:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{run.name}: the tables cannot be read after the scenario: "
                                   f"{err}") from err
            time.sleep(0.5)


def _note_kind(note: str) -> str:
    if "past max_attempts" in note:
        return "attempts spent before it ran"
    if "decode" in note:
        return "payload does not decode"
    if "failed" in note:
        return "last attempt failed"
    return note[:60]


def fault_times(run: Run) -> tuple[float | None, float | None]:
    """(first, last): when the first fault began, and when the last one was over (an injector's
    `last_at`; for a job that killed its process, when the process replacing it was ready)."""
    times = [t for f in run.faults for t, _ in f.actions]
    ends = [f.last_at for f in run.faults if f.last_at is not None]
    incs = run.fleet.incarnations
    for i, inc in enumerate(incs):
        killed = inc.selfkill()
        if killed is not None:
            times.append(killed.at)
            after = [n for n in incs[i + 1:] if n.slot == inc.slot]
            ready = after[0].ready_at() if after else None
            ends.append(ready if ready is not None else killed.at)
    if not times:
        return None, None
    return min(times), max([*ends, *times])


def _rates(run: Run, rep: Report, effect_times: list[float]) -> None:
    n = len(effect_times)
    if n < 20:
        return
    first, last = fault_times(run)
    # The clean window leaves out the start: the first 10 % of the jobs and the first WARMUP s
    # (the lease form runs faster until its first renewals are due).
    start = effect_times[max(int(0.1 * rep.healthy) - 1, 0)] if rep.healthy else effect_times[0]
    start = max(start, effect_times[0] + WARMUP)
    clean_end = first if first is not None else effect_times[-1]
    if run.clean_rate is not None:
        rep.clean_rate = run.clean_rate
    else:
        rep.clean_rate = _steady_rate(effect_times, start, clean_end)
    if last is None or rep.clean_rate is None:
        return
    tail_index = rep.healthy - rep.slots - 1
    if tail_index <= 0 or tail_index >= n:
        tail = effect_times[-1]
    else:
        tail = effect_times[tail_index]
    end = min(last + RECOVERY_WINDOW, tail)
    window = end - last
    if window < MIN_WINDOW:
        return
    count = bisect.bisect_right(effect_times, end) - bisect.bisect_right(effect_times, last)
    rep.recovery_window_s = window
    rep.recovery_rate = count / window
    rep.recovery_ratio = rep.recovery_rate / rep.clean_rate
    # The first 1 s window, starting at most HORIZON s after the fault, at TARGET of the clean
    # rate (sliding by 50 ms).
    rep.recovery_measurable = tail - last >= 2.0
    start = last
    while start + 1.0 <= tail and start <= last + RECOVERY_HORIZON + 1e-9:
        got = bisect.bisect_right(effect_times, start + 1.0) - bisect.bisect_right(
            effect_times, start)
        if got >= TARGET * rep.clean_rate:
            rep.recovered_within_s = start - last
            break
        start += 0.05


def _steady_rate(times: list[float], start: float, end: float, step: float = 0.5) -> float | None:
    """Effects per second between `start` and `end`: the median over `step`-second bins, so a
    moment of load from elsewhere on the machine does not set the bar (the mean where the
    window holds fewer than three bins)."""
    window = end - start
    count = bisect.bisect_right(times, end) - bisect.bisect_left(times, start)
    if window < 0.3 or count < 10:
        return None
    bins = int(window / step)
    if bins < 3:
        return count / window
    rates = sorted((bisect.bisect_right(times, start + (i + 1) * step)
                    - bisect.bisect_right(times, start + i * step)) / step for i in range(bins))
    return rates[bins // 2] if bins % 2 else (rates[bins // 2 - 1] + rates[bins // 2]) / 2


def _concurrency(rep: Report, intervals: list[tuple[float, float]],
                 effect_times: list[float]) -> None:
    """Handlers in work at once (started to settled): the maximum, and the time-weighted mean
    while at least two slots' worth of healthy jobs were still waiting."""
    if not intervals:
        return
    points = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    level = peak = 0
    for _, step in points:
        level += step
        peak = max(peak, level)
    rep.max_concurrency = peak
    if not effect_times or rep.healthy <= 2 * rep.slots:
        return
    begin = min(a for a, _ in intervals)
    cut = rep.healthy - 2 * rep.slots - 1
    end = effect_times[cut] if 0 <= cut < len(effect_times) else effect_times[-1]
    if end - begin < 0.2:
        return
    area = 0.0
    level = 0
    prev = begin
    for at, step in points:
        at_c = min(max(at, begin), end)
        area += level * (at_c - prev)
        prev = at_c
        level += step
    rep.mean_concurrency = area / (end - begin)
