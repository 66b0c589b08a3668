"""The faults. Each injector starts once the scenario's progress (the share of jobs no longer in
the queue) reaches `start_at`, is ticked by the scenario's loop (every ~100 ms) until it says it
is done, and is always ended. Every one is bounded: a count of actions or a duration, and the
scenario's own deadline over all of them. Everything stays on this machine: the suite's own
worker processes and its own servers on 127.0.0.1.

`actions` records (time, what was done); `last_at` is the end of the last fault (the start of
the recovery window).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import psycopg

if TYPE_CHECKING:
    from .fleet import Incarnation
    from .scenario import Run


@dataclass
class Fault:
    start_at: float = 0.3  # progress at which the fault begins
    actions: list[tuple[float, str]] = field(default_factory=list)
    last_at: float | None = None
    observations: dict[str, Any] = field(default_factory=dict)
    label = "fault"

    def begin(self, run: Run) -> None:
        pass

    def tick(self, run: Run) -> bool:
        """Advance; True when the fault is over."""
        return True

    def end(self, run: Run) -> None:
        pass

    def act(self, what: str) -> None:
        now = time.time()
        self.actions.append((now, what))
        self.last_at = now


@dataclass
class KillStorm(Fault):
    """SIGKILL a random serving worker process (one holding a delivery) every `every` of
    progress or `every_s` seconds, whichever comes first, `kills` times; the fleet restarts
    them. The fault ends when the last replacement is ready."""

    kills: int = 3
    every: float = 0.08
    every_s: float = 0.7
    label = "sigkill"
    _next: float = 0.0
    _next_t: float = 0.0
    _done_at: float | None = None

    def begin(self, run: Run) -> None:
        self._next = run.progress
        self._next_t = time.time()

    def tick(self, run: Run) -> bool:
        if self._done_at is not None:
            return _repaired(self, run, self._done_at)
        if run.progress >= self._next or time.time() >= self._next_t:
            victim = run.fleet.pick(run.rng)
            overdue = time.time() > self._next_t + 2.0
            if victim is not None and (overdue or victim.open_deliveries()):
                run.fleet.sigkill(victim)
                self.act(f"SIGKILL {victim.slot}.{victim.generation} (pid {victim.pid})")
                self._next = run.progress + self.every
                self._next_t = time.time() + self.every_s
        if len(self.actions) >= self.kills:
            self._done_at = time.time()
        return False


def _repaired(fault: Fault, run: Run, since: float, timeout: float = 30.0) -> bool:
    """True once every slot runs a ready process again (or `timeout` s passed); the fault's
    end is then when the last of them became ready."""
    current = [run.fleet.current(slot) for slot in range(run.fleet.processes)]
    ready = [inc.ready_at() if inc is not None and inc.alive() else None for inc in current]
    if all(t is not None for t in ready) or time.time() - since > timeout:
        fault.last_at = max([since, *(t for t in ready if t is not None)])
        return True
    return False


@dataclass
class SigtermUnderLoad(Fault):
    """SIGTERM every worker process at once (a deploy), wait for them to exit, look at what the
    server still holds for them, then start them again; `times` times."""

    times: int = 1
    grace: float = 5.0  # beyond the fleet's shutdown_timeout
    label = "sigterm"

    def tick(self, run: Run) -> bool:
        exits = run.fleet.sigterm_all(run.fleet.shutdown_timeout + self.grace)
        took = [t for _, t in exits]
        self.observations.setdefault("exit_seconds", []).extend(took)
        self.observations.setdefault("exit_codes", []).extend(
            inc.proc.poll() for inc, _ in exits)
        self.observations.setdefault("held_after_exit", []).append(run.server_leftovers())
        for inc, t in exits:
            if t is None:  # still running past the bound: the suite ends it
                run.fleet.sigkill(inc)
                inc.expected = "sigterm-overdue"
        self.act(f"SIGTERM {len(exits)} process(es), exits in {took}")
        run.fleet.resume()
        self.last_at = run.fleet.wait_ready()
        return len(self.actions) >= self.times


@dataclass
class Stop:
    victim: Incarnation
    held: set[int]
    stopped_at: float
    resumed_at: float | None = None


@dataclass
class StopHolder(Fault):
    """SIGSTOP a worker process while it holds a delivery, for `leases` leases, then SIGCONT;
    `times` times, `gap` s apart. Under a lease its rows are claimed again meanwhile: when it
    wakes it must commit nothing for them (it is fenced)."""

    leases: float = 3.0
    times: int = 1
    gap: float = 1.0
    label = "sigstop"
    stops: list[Stop] = field(default_factory=list)
    _next: float = 0.0

    def tick(self, run: Run) -> bool:
        now = time.time()
        current = self.stops[-1] if self.stops else None
        if current is not None and current.resumed_at is None:
            if now - current.stopped_at >= self.leases * run.fleet.lease:
                self._resume(run, current)
                self._next = time.time() + self.gap
                return len(self.stops) >= self.times
            return False
        if now < self._next:
            return False
        for inc in run.fleet.serving():
            # A delivery that has just started is in its handler, far from its commit: a stop
            # that lands between a commit and its "settled" line holds a row already done,
            # which nobody claims again, and tests no fencing.
            if not inc.open_deliveries(started_within=0.01):
                continue
            run.fleet.sigstop(inc)
            time.sleep(0.02)  # the signal has landed; what it wrote before is in the log
            # Read again once it is stopped: what it held may have settled between the read
            # and the signal (a loaded machine), and a stop holding nothing tests no fencing.
            held = inc.open_deliveries()
            if not held:
                self._resume_unheld(run, inc)
                continue
            self.stops.append(Stop(inc, held, time.time()))
            self.act(f"SIGSTOP {inc.slot}.{inc.generation} (pid {inc.pid}) holding "
                     f"{sorted(held)}")
            break
        return False

    def _resume_unheld(self, run: Run, inc: Any) -> None:
        run.fleet.sigcont(inc)
        self.act(f"SIGSTOP {inc.slot}.{inc.generation} found it holding nothing: resumed")

    def _resume(self, run: Run, stop: Stop) -> None:
        run.fleet.sigcont(stop.victim)
        stop.resumed_at = time.time()
        self.act(f"SIGCONT {stop.victim.slot}.{stop.victim.generation}")

    def end(self, run: Run) -> None:
        for stop in self.stops:
            if stop.resumed_at is None:
                self._resume(run, stop)


@dataclass
class TerminateBackends(Fault):
    """pg_terminate_backend of worker sessions twice a second for `duration` seconds: each time
    one session of a worker process (in a transaction when there is one)."""

    duration: float = 3.0
    interval: float = 0.5
    label = "terminate"
    _began: float = 0.0
    _next: float = 0.0

    def begin(self, run: Run) -> None:
        self._began = self._next = time.time()

    def tick(self, run: Run) -> bool:
        now = time.time()
        if now - self._began >= self.duration:
            return True
        if now < self._next:
            return False
        self._next = now + self.interval
        prefix = run.fleet.app_prefix + "-%"
        try:
            with psycopg.connect(run.target.database, autocommit=True, connect_timeout=5) as c:
                rows = c.execute(
                    "SELECT pid, application_name, state FROM pg_stat_activity "
                    "WHERE datname = current_database() AND application_name LIKE %s "
                    "AND pid <> pg_backend_pid()", [prefix]).fetchall()
                busy = [r for r in rows if r[2] in ("idle in transaction", "active")]
                pool = busy or rows
                if pool:
                    pid, app, state = run.rng.choice(pool)
                    c.execute("SELECT pg_terminate_backend(%s)", [pid])
                    self.act(f"pg_terminate_backend({pid}) {app} {state}")
        except psycopg.Error as err:
            self.observations.setdefault("errors", []).append(str(err)[:200])
        return False


@dataclass
class PgRestart(Fault):
    """`pg_ctl restart -m immediate` of the scenario's own PostgreSQL server, `times` times,
    `gap` seconds apart."""

    times: int = 1
    gap: float = 1.5
    label = "pg-restart"
    _next: float = 0.0

    def tick(self, run: Run) -> bool:
        if time.time() < self._next:
            return False
        assert run.pg_server is not None, "a restart scenario needs its own PostgreSQL server"
        began = time.time()
        run.pg_server.restart_immediate()
        self.act(f"pg_ctl restart -m immediate ({time.time() - began:.2f} s)")
        self._next = time.time() + self.gap
        return len(self.actions) >= self.times


@dataclass
class MariaDBRestart(Fault):
    """SIGKILL the scenario's own mariadbd and start it again on the same port and data."""

    times: int = 1
    gap: float = 1.5
    label = "mariadb-restart"
    _next: float = 0.0

    def tick(self, run: Run) -> bool:
        if time.time() < self._next:
            return False
        assert run.mariadb is not None, "a restart scenario needs its own MariaDB server"
        began = time.time()
        run.mariadb.kill_and_restart()
        self.act(f"mariadbd SIGKILL + start ({time.time() - began:.2f} s)")
        self._next = time.time() + self.gap
        return len(self.actions) >= self.times
