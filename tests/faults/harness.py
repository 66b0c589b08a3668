"""Running a case from cases.py: where its database comes from, and the report table.

`Servers` hands out fresh databases: on the shared PostgreSQL and MariaDB servers (the pytest
session's, or the long profile's own), and on the private restartable ones, started on first use.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .cases import BY_ID, Case
from .checker import Report
from .restartable import RestartableMariaDB, RestartablePostgres
from .scenario import run_scenario
from .shapes import make_target

if TYPE_CHECKING:
    import pytest

_names = itertools.count(1)


class Servers:
    """Lazily started servers. Each getter returns a server object (the suite's PostgresServer,
    MariaDBServer, or the restartable variants)."""

    def __init__(self, *, pg: Callable[[], Any], mysql: Callable[[], Any],
                 pg_restart: Callable[[], Any], mysql_restart: Callable[[], Any]) -> None:
        self._factories = {"pg": pg, "mysql": mysql, "pg-restart": pg_restart,
                           "mysql-restart": mysql_restart}
        self._servers: dict[str, Any] = {}

    def server(self, kind: str) -> Any:
        if kind not in self._servers:
            self._servers[kind] = self._factories[kind]()
        return self._servers[kind]

    def database(self, kind: str, folder: Path) -> str:
        if kind == "sqlite":
            folder.mkdir(parents=True, exist_ok=True)
            return str(folder / "queue.sqlite3")
        name = f"fault_{next(_names)}"
        server = self.server(kind)
        return str(server.create_database(name))


def run_case(case: Case, servers: Servers, folder: Path, *, jobs: int | None = None,
             overrides: dict[str, Any] | None = None) -> Report:
    """Run one case in `folder` (module, database file, event logs all go there); `overrides`
    set attributes of its scenario."""
    sc = case.make(jobs)
    for key, value in (overrides or {}).items():
        if not hasattr(sc, key):
            raise AttributeError(f"a scenario has no setting {key!r}")
        setattr(sc, key, value)
    database = servers.database(case.server, folder / "db")
    target = make_target(folder / "module", case.shape, database)
    restartable = servers.server(case.server) if case.server.endswith("-restart") else None
    return run_scenario(sc, target, folder / "run",
                        pg_server=restartable if case.server == "pg-restart" else None,
                        mariadb=restartable if case.server == "mysql-restart" else None)


class FaultRuns:
    """Cases run in one pytest session, by id (each runs once)."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.reports: dict[str, Report] = {}
        self.errors: dict[str, BaseException] = {}
        self._private: dict[str, Any] = {}

    def _restartable(self, kind: str) -> Any:
        if kind not in self._private:
            self._private[kind] = RestartablePostgres() if kind == "pg" else RestartableMariaDB()
        return self._private[kind]

    def get(self, case: Case | str, request: pytest.FixtureRequest, *, run: int = 1,
            label: str = "", **overrides: Any) -> Report:
        """The report of `case` (run now unless it ran already); `run=2` asks for a second,
        separate run. `overrides` change the case's scenario (and make a run of its own);
        `label` says in the summary what such a run is for."""
        case = BY_ID[case] if isinstance(case, str) else case
        key = case.id + (repr(sorted(overrides.items())) if overrides else "")
        key += f"-run{run}" if run != 1 else ""
        if key in self.errors:
            raise self.errors[key]
        if key not in self.reports:
            servers = Servers(pg=lambda: request.getfixturevalue("pg_server"),
                              mysql=lambda: request.getfixturevalue("mariadb_server"),
                              pg_restart=lambda: self._restartable("pg"),
                              mysql_restart=lambda: self._restartable("mysql"))
            folder = self.base / key.replace("/", "_").replace(" ", "")[:80]
            try:
                self.reports[key] = run_case(case, servers, folder, overrides=overrides)
                self.reports[key].label = label
            except BaseException as err:
                self.errors[key] = err
                raise
        return self.reports[key]

    def close(self) -> None:
        for server in self._private.values():
            server.stop()
        self._private.clear()


def _num(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def markdown(reports: Iterable[Report]) -> str:
    """The report table: one row per scenario and form; labelled runs (the checker's
    self-test, whose problems are expected) last, named as such."""
    head = ("| scenario | form | fault | jobs | lost | duplicated | stranded | healthy dead "
            "(unexplained) | recovery ratio | recovered within s | clean rate /s | drain s | "
            "deliveries | processes | lease lost | in work: max/slots (mean) | verdict |")
    rule = "|" + "---|" * 17
    rows = [head, rule]
    for r in sorted(reports, key=lambda r: bool(r.label)):
        problems = r.problems()
        verdict = "ok" if not problems else "; ".join(p[:120] for p in problems)
        if r.label:  # a self-test must find the problems it was built to cause
            verdict = (f"expected of the self-test: {verdict}" if problems else
                       "the self-test found no problem: the checker missed those it caused")
        scenario = f"{r.scenario} ({r.label})" if r.label else r.scenario
        rows.append(
            f"| {scenario} | {r.shape} | {r.fault} | {r.jobs} | {r.lost} | {r.duplicated} | "
            f"{r.stranded} | {r.healthy_dead} ({r.healthy_dead_unexplained}) | "
            f"{_num(r.recovery_ratio)} | {_num(r.recovered_within_s, 1)} | "
            f"{_num(r.clean_rate, 0)} | {_num(r.drain_s, 1)} | {r.deliveries} | "
            f"{r.processes_started} | {r.lease_lost} | {r.max_concurrency}/{r.slots} "
            f"({_num(r.mean_concurrency, 1)}) | "
            f"{verdict.replace('|', '/')} |")
    return "\n".join(rows) + "\n"
