"""The catalog of scenarios: every fault on every form it applies to, sized for the short profile
(CI: a few hundred jobs) or the long one (`jobs` given, every fault repeated).

A case id reads `<dialect>-<form>-<fault>` (`-due`: the form's table with a due time).
Servers: `pg` is the session's PostgreSQL server (tests/conftest.py), `pg-restart` a private one
the scenario restarts; `mysql` the session's MariaDB, `mysql-restart` a private one with durable
commits; `sqlite` a file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .injectors import (
    Fault,
    KillStorm,
    MariaDBRestart,
    PgRestart,
    SigtermUnderLoad,
    StopHolder,
    TerminateBackends,
)
from .scenario import Scenario

JOB_MS = {"postgres": 20.0, "mysql": 20.0, "sqlite": 2.0}


@dataclass(frozen=True)
class Case:
    id: str
    shape: str
    server: str
    fault: str
    make: Callable[[int | None], Scenario]  # jobs (None: the short profile's size)
    recovery: bool = False  # the short profile sizes it to measure recovery, and asserts it

    @property
    def dialect(self) -> str:
        return {"pg": "postgres", "mysql": "mysql", "sqlite": "sqlite"}[self.shape.split("-")[0]]


def _faults(fault: str, long: bool) -> list[Fault]:
    if fault == "sigkill":
        return [KillStorm(kills=8 if long else 3, every=0.05 if long else 0.08,
                          every_s=1.0 if long else 0.7)]
    if fault == "terminate":
        return [TerminateBackends(duration=10.0 if long else 2.0)]
    if fault == "sigstop":
        return [StopHolder(leases=3, times=3 if long else 1, gap=2.0)]
    if fault == "sigterm":
        return [SigtermUnderLoad(times=3 if long else 1)]
    if fault == "restart":
        return [PgRestart(times=3 if long else 1, gap=3.0)]
    if fault == "mysql-restart":
        return [MariaDBRestart(times=3 if long else 1, gap=3.0)]
    if fault in ("bad", "clean", "concurrent", "slots", "skew"):
        return []
    raise ValueError(fault)


def _case(shape: str, fault: str, *, jobs: int = 300, recovery_jobs: int | None = None,
          processes: int = 2, server: str | None = None, tag: str = "",
          **options: object) -> Case:
    dialect = {"pg": "postgres", "mysql": "mysql", "sqlite": "sqlite"}[shape.split("-")[0]]
    if server is None:
        server = {"postgres": "pg", "mysql": "mysql", "sqlite": "sqlite"}[dialect]
    name = f"{shape}-{fault}" + (f"-{tag}" if tag else "")
    injector = "mysql-restart" if fault == "restart" and dialect == "mysql" else fault

    def make(n: int | None) -> Scenario:
        long = n is not None
        size = n if n is not None else (recovery_jobs or jobs)
        sc = Scenario(name, jobs=size, processes=processes, job_ms=JOB_MS[dialect],
                      faults=_faults(injector, long),
                      timeout=max(120.0, size / 15.0) if long else 40.0)
        if long or recovery_jobs is not None:
            for f in sc.faults:  # a clean stretch long enough to measure the clean rate
                f.start_at = 0.4
        if fault == "bad":
            sc.poison = max(size // 100, 1)
            sc.selfkill = max(size // 100, 1)
            sc.lease = 1
        if fault == "sigstop":
            sc.lease = 1
        for key, value in options.items():
            if key == "timeout" and long:
                continue  # a short profile's bound; the long one scales with the jobs
            setattr(sc, key, value() if callable(value) else value)  # faults: a fresh list
        return sc

    return Case(name, shape, server, fault, make, recovery=recovery_jobs is not None)


def _skew(shape: str) -> Case:
    """Three worker processes on one lease table with due times: one on time, one on a host 30 s
    fast and one 30 s slow (libfaketime, fleet.py). Jobs run 12 s under a 10 s lease (they
    renew), and some are due later. Sized by time, not by `jobs`. The short profile: 10 long
    jobs on 12 slots (every process holds some, two slots are free to claim a live lease), then
    8 jobs due 20 s after the enqueue, which every slot faces from the 12th second on (a fast
    host would run them early). The long one: 20 long jobs (a second round, four slots free from
    the 12th second) and 16 due 30 s after, each worker's offset measured again meanwhile."""
    dialect = {"pg": "postgres", "mysql": "mysql"}[shape.split("-")[0]]
    server = {"postgres": "pg", "mysql": "mysql"}[dialect]
    name = f"{shape}-skew"

    def make(n: int | None) -> Scenario:
        long_jobs, scheduled, due_in = (10, 8, 20.0) if n is None else (20, 16, 30.0)
        return Scenario(name, jobs=long_jobs + scheduled, processes=3, workers=4, lease=10,
                        job_ms=12000.0, scheduled=scheduled, scheduled_in=due_in,
                        scheduled_ms=200.0, skews=(None, "+30s", "-30s"), exclusive=True,
                        timeout=90.0 if n is None else 150.0)

    return Case(name, shape, server, "skew", make)


def _all() -> list[Case]:
    cases: list[Case] = []
    pg = ["pg-row_lock", "pg-counted", "pg-lease", "pg-advisory"]
    recovery = {"pg-row_lock-sigkill": 1500, "pg-lease-sigstop": 2000,
                "pg-advisory-terminate": 1500, "pg-lease-restart": 1500,
                "pg-counted-sigterm": 1500, "sqlite-lease-sigkill": 2000,
                "mysql-row_lock-restart": 3000}
    for shape in pg:
        for fault in ("sigkill", "terminate", "sigterm"):
            cases.append(_case(shape, fault, recovery_jobs=recovery.get(f"{shape}-{fault}")))
        cases.append(_case(shape, "restart", server="pg-restart",
                           recovery_jobs=recovery.get(f"{shape}-restart")))
        if shape != "pg-row_lock":  # the plain row lock's loop is a known defect (defects.py)
            cases.append(_case(shape, "bad"))
    cases.append(_case("pg-lease", "sigstop", recovery_jobs=recovery["pg-lease-sigstop"]))
    # SQLite: the advisory form's locks live in one process, so it runs one worker process.
    for shape, processes in (("sqlite-lease", 2), ("sqlite-advisory", 1)):
        for fault in ("sigkill", "bad", "sigterm"):
            # One process killed three times needs the time of three restarts, and its jobs
            # are short enough that a kill may wait for one in flight: 500 could drain first.
            jobs = 1000 if (processes, fault) == (1, "sigkill") else 300
            cases.append(_case(shape, fault, processes=processes, jobs=jobs,
                               recovery_jobs=recovery.get(f"{shape}-{fault}")))
    cases.append(_case("sqlite-lease", "sigstop"))
    # The row lock that does not count crashes (count_crashes = false): crashes spend no attempt.
    cases.append(_case("pg-plain", "sigkill"))  # pipelined rounds (test_row_lock_pipeline.py)
    cases.append(_case("pg-plain", "terminate"))
    # Handlers that are not transactional (at least once: checker.py), in batches of 8: the
    # pipelined row-lock rounds and the lease settler, killed, cut off and restarted mid-batch.
    # A kill storm gets 600 jobs: in batches of 8, 300 could drain before its third kill.
    for shape in ("pg-plain", "pg-lease"):
        for fault in ("sigkill", "terminate"):
            cases.append(_case(shape, fault, tag="plain-batch8", batch=8, plain=True,
                               jobs=600 if fault == "sigkill" else 300))
        cases.append(_case(shape, "restart", server="pg-restart", tag="plain-batch8", batch=8,
                           plain=True))
    cases.append(_case("pg-plain", "restart", server="pg-restart"))
    # The same on MySQL/MariaDB, whose workers then run on asyncmy (a round's settlements,
    # COMMIT and next claim one after another on the event loop; the lease's claimer and
    # settler), killed and cut off by a server restart, and SQLite (the lease's claimer and
    # settler, each one call in the process's write turn). The transactional MySQL cases below
    # run on PyMySQL.
    for shape in ("mysql-plain", "mysql-lease", "sqlite-lease"):
        cases.append(_case(shape, "sigkill", tag="plain-batch8", batch=8, plain=True, jobs=600))
    for shape in ("mysql-plain", "mysql-lease"):
        cases.append(_case(shape, "restart", server="mysql-restart", tag="plain-batch8",
                           batch=8, plain=True))
    for shape in ("mysql-row_lock", "mysql-lease", "mysql-advisory"):
        cases.append(_case(shape, "sigkill"))
        cases.append(_case(shape, "restart", server="mysql-restart",
                           recovery_jobs=recovery.get(f"{shape}-restart")))
    # Hosts whose clocks are off: due times and leases follow the database's clock.
    cases += [_skew("pg-lease-due"), _skew("mysql-lease-due")]
    return cases


def _defects() -> list[Case]:
    """Scenarios aimed at known defects of the runtime (test_defects.py says which)."""
    return [
        # 1. count_crashes under concurrency: every handler acks at once, two processes.
        _case("pg-counted", "concurrent", jobs=400, job_ms=0.0),
        _case("mysql-counted", "concurrent", jobs=400, job_ms=0.0),
        # 2. a job that SIGKILLs its worker under the plain row lock.
        _case("pg-row_lock", "bad", jobs=300, timeout=20.0),
        # 3. SQLite with many slots and a short lease, SIGTERMed under load.
        _case("sqlite-lease", "slots", jobs=400, workers=8, lease=1, shutdown_timeout=3.0,
              faults=lambda: [SigtermUnderLoad(start_at=0.5)], timeout=40.0, end_grace=10.0),
        # 6. two advisory workers of 8 slots: do free slots get rows while rows are due?
        _case("pg-advisory", "slots", jobs=320, processes=2, workers=8, job_ms=150.0,
              timeout=40.0),
    ]


CASES = _all()
DEFECTS = _defects()
BY_ID = {case.id: case for case in [*CASES, *DEFECTS]}
