"""The worker processes of one scenario: started, restarted when they die, stopped at the end.

Each process slot runs one process at a time; every process (an incarnation) has an event log
of its own, `<slot>.<generation>.log`, and a stderr file beside it. The fleet remembers why each
process ended: killed by an injector, asked to stop (SIGTERM), or on its own.

`skews` runs chosen slots on a host whose clock is off: libfaketime (Debian's faketime package,
which scripts/test.sh installs) is preloaded into the worker process itself with FAKETIME
(e.g. "+30s") and FAKETIME_DONT_FAKE_MONOTONIC=1, so its wall clock is off and its monotonic
clock is not. Every process logs by the suite's clock (`--wall-anchor`, child.py).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from psycopg.conninfo import make_conninfo

from .eventlog import Event, EventReader
from .shapes import Target

REPO = Path(__file__).resolve().parents[2]


@cache
def faketime_library() -> str:
    """libfaketime's multi-threaded library; a clear error when it is not installed."""
    found = sorted(Path("/usr").glob("lib/*/faketime/libfaketimeMT.so.1"))
    if not found:
        raise RuntimeError("libfaketimeMT.so.1 is not under /usr/lib/*/faketime/: install the "
                           "Debian package faketime (scripts/test.sh does) to run workers whose "
                           "clocks are off")
    return str(found[0])


@dataclass
class Incarnation:
    slot: int
    generation: int
    log: Path
    err: Path
    proc: subprocess.Popen[bytes]
    application_name: str
    started: float
    expected: str | None = None  # "sigkill" or "sigterm" when the suite ended it
    signalled_at: float | None = None  # when that signal was sent
    ended: float | None = None
    returncode: int | None = None
    stopped: bool = False  # SIGSTOPped right now
    reader: EventReader = field(init=False)
    _open: dict[int, float] = field(default_factory=dict)  # job -> when it started
    _seen: int = 0

    def __post_init__(self) -> None:
        self.reader = EventReader(self.log)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def events(self) -> list[Event]:
        """The events so far (the list grows as the log does: do not keep it)."""
        return list(self.reader.events())

    def open_deliveries(self, *, started_within: float | None = None) -> set[int]:
        """Jobs this process started and has not settled (or discarded) yet; with
        `started_within`, only those started that many seconds ago or less."""
        events = self.reader.events()
        for e in events[self._seen:]:
            if e.kind == "started":
                self._open[e.job] = e.at
            elif e.kind in ("settled", "discarded"):
                self._open.pop(e.job, None)
        self._seen = len(events)
        if started_within is None:
            return set(self._open)
        since = time.time() - started_within
        return {job for job, at in self._open.items() if at >= since}

    def selfkill(self) -> Event | None:
        """The job's event, when this process was killed by a job of its own: SIGKILLed, not by
        the suite, with a selfkill among its last lines (other slots may log after it)."""
        if self.returncode != -9 or self.expected is not None:
            return None
        for e in reversed(self.reader.events()[-5:]):
            if e.kind == "selfkill":
                return e
        return None

    def ready_at(self) -> float | None:
        for e in self.reader.events():
            if e.kind == "ready":
                return e.at
        return None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stderr(self, chars: int = 3000) -> str:
        try:
            return self.err.read_text(encoding="utf-8", errors="replace")[-chars:]
        except OSError:
            return ""


@dataclass
class Fleet:
    target: Target
    folder: Path
    processes: int = 2
    workers: int = 4
    lease: int = 2
    job_ms: float = 5.0
    shutdown_timeout: float = 5.0
    poll_interval: float = 0.05
    batch: int = 1
    fsync: bool = True
    effects: str = "transaction"
    skip_every: int = 0
    plain: bool = False  # handlers not transactional (effects on a connection of their own)
    skews: tuple[str | None, ...] = ()  # FAKETIME of slot 0, 1, ... (None: the host's clock)
    own_clock: bool = False  # workers judge time by their host's clock (child.py --own-clock)
    app_prefix: str = "fault"
    restart: bool = True  # start a new process in a slot whose process died
    restart_delay: float = 0.1
    max_restarts: int = 200
    max_seconds: float = 900.0  # a worker process stops itself after this long
    incarnations: list[Incarnation] = field(default_factory=list)
    go: Path = field(init=False)
    _generation: dict[int, int] = field(default_factory=dict)
    _dead_since: dict[int, float] = field(default_factory=dict)
    _holding: bool = False  # no restarts while the suite stops the fleet on purpose

    def __post_init__(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.go = self.folder / "go"

    @property
    def slots(self) -> int:
        """Handler slots when every process runs."""
        return self.processes * self.workers

    # -- starting -------------------------------------------------------------------------

    def spawn(self, slot: int) -> Incarnation:
        gen = self._generation.get(slot, 0)
        self._generation[slot] = gen + 1
        name = f"{slot}.{gen}"
        log = self.folder / f"{name}.log"
        err = self.folder / f"{name}.err"
        app = f"{self.app_prefix}-{name}"
        database = self.target.database
        if self.target.dialect == "postgres":
            database = make_conninfo(database, application_name=app)
        cmd = [sys.executable, "-m", "tests.faults.child", str(self.target.module_path),
               database, "--dialect", self.target.dialect, "--log", str(log),
               "--go", str(self.go), "--workers", str(self.workers), "--batch", str(self.batch),
               "--lease", str(self.lease), "--poll-interval", str(self.poll_interval),
               "--shutdown-timeout", str(self.shutdown_timeout), "--job-ms", str(self.job_ms),
               "--max-seconds", str(self.max_seconds)]
        if not self.fsync:
            cmd.append("--no-fsync")
        if self.effects != "transaction":
            cmd += ["--effects", self.effects]
        if self.skip_every:
            cmd += ["--skip-every", str(self.skip_every)]
        if self.plain:
            cmd += ["--plain"]
        if self.own_clock:
            cmd += ["--own-clock"]
        # The suite's wall clock minus the monotonic clock all processes share (the child logs
        # by this anchor, whatever its own wall clock says).
        cmd += ["--wall-anchor", repr(time.time() - time.monotonic())]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
        skew = self.skews[slot] if slot < len(self.skews) else None
        if skew is not None:
            preload = [faketime_library(), *filter(None, [env.get("LD_PRELOAD")])]
            env.update(LD_PRELOAD=":".join(preload), FAKETIME=skew,
                       FAKETIME_DONT_FAKE_MONOTONIC="1")
        with open(err, "wb") as errfile:
            proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                                    stdout=errfile, stderr=errfile, start_new_session=True)
        inc = Incarnation(slot, gen, log, err, proc, app, time.time())
        self.incarnations.append(inc)
        return inc

    def start(self, ready_timeout: float = 60.0) -> None:
        """Start every slot, wait until all are ready, then let them claim together."""
        if any(self.skews):
            faketime_library()  # missing: an error before any process starts
        started = [self.spawn(slot) for slot in range(self.processes)]
        deadline = time.monotonic() + ready_timeout
        for inc in started:
            while inc.ready_at() is None:
                if not inc.alive():
                    raise RuntimeError(f"worker process {inc.slot}.{inc.generation} exited "
                                       f"({inc.proc.returncode}) before it was ready:\n"
                                       f"{inc.stderr()}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"worker process {inc.slot}.{inc.generation} not ready "
                                       f"after {ready_timeout} s:\n{inc.stderr()}")
                time.sleep(0.01)
        self.go.touch()

    def current(self, slot: int) -> Incarnation | None:
        for inc in reversed(self.incarnations):
            if inc.slot == slot:
                return inc
        return None

    def live(self) -> list[Incarnation]:
        """The processes running now (stopped ones included)."""
        out = []
        for slot in range(self.processes):
            inc = self.current(slot)
            if inc is not None and inc.alive():
                out.append(inc)
        return out

    def serving(self) -> list[Incarnation]:
        """Running, not stopped, and past their imports."""
        return [inc for inc in self.live() if not inc.stopped and inc.ready_at() is not None]

    def wait_ready(self, timeout: float = 30.0) -> float:
        """Wait (at most `timeout` s) until every slot runs a process that is ready; the time
        the last of them became ready."""
        deadline = time.monotonic() + timeout
        while True:
            self.reap()
            current = [self.current(slot) for slot in range(self.processes)]
            times = [inc.ready_at() if inc is not None and inc.alive() else None
                     for inc in current]
            if all(t is not None for t in times):
                return max(t for t in times if t is not None)
            if time.monotonic() > deadline:
                return time.time()
            time.sleep(0.02)

    # -- watching -------------------------------------------------------------------------

    def reap(self) -> list[Incarnation]:
        """Note the processes that ended; restart their slots (after restart_delay)."""
        ended = []
        now = time.time()
        for slot in range(self.processes):
            inc = self.current(slot)
            if inc is None:
                continue
            if inc.ended is None and inc.proc.poll() is not None:
                inc.ended = now
                inc.returncode = inc.proc.returncode
                ended.append(inc)
                self._dead_since[slot] = now
            if inc.ended is not None and self.restart and not self._holding:
                if now - self._dead_since.get(slot, now) >= self.restart_delay \
                        and len(self.incarnations) - self.processes < self.max_restarts:
                    self.spawn(slot)
        return ended

    # -- faults ---------------------------------------------------------------------------

    def pick(self, rng: random.Random) -> Incarnation | None:
        choices = self.serving()
        return rng.choice(choices) if choices else None

    def sigkill(self, inc: Incarnation) -> None:
        if inc.alive():
            inc.expected = "sigkill"
            inc.signalled_at = time.time()
            if inc.stopped:
                inc.stopped = False
            inc.proc.send_signal(signal.SIGKILL)
            inc.proc.wait(10)

    def sigstop(self, inc: Incarnation) -> None:
        inc.proc.send_signal(signal.SIGSTOP)
        inc.stopped = True

    def sigcont(self, inc: Incarnation) -> None:
        if inc.alive():
            inc.proc.send_signal(signal.SIGCONT)
        inc.stopped = False

    def sigterm_all(self, timeout: float) -> list[tuple[Incarnation, float | None]]:
        """SIGTERM every running process and wait (at most `timeout` s) for them to exit;
        (process, seconds it took or None when it was still running). No restarts meanwhile."""
        self._holding = True
        asked = []
        # A process still importing has no handler for SIGTERM yet: let it get ready first.
        deadline = time.monotonic() + 15
        while any(inc.ready_at() is None and inc.alive() for inc in self.live()) \
                and time.monotonic() < deadline:
            time.sleep(0.01)
        for inc in self.live():
            self.sigcont(inc)
            inc.expected = "sigterm"
            inc.signalled_at = time.time()
            inc.proc.send_signal(signal.SIGTERM)
            asked.append(inc)
        deadline = time.monotonic() + timeout
        for inc in asked:
            left = max(deadline - time.monotonic(), 0.0)
            try:
                inc.proc.wait(left)
            except subprocess.TimeoutExpired:
                pass
        out: list[tuple[Incarnation, float | None]] = []
        for inc in asked:
            if inc.proc.poll() is not None:
                inc.ended = inc.ended or time.time()
                inc.returncode = inc.proc.returncode
                exits = [e for e in inc.events() if e.kind == "exit"]
                end = exits[-1].at if exits else inc.ended
                assert inc.signalled_at is not None
                took = max(end - inc.signalled_at, 0.0)
                out.append((inc, took))
            else:
                out.append((inc, None))
        return out

    def resume(self) -> None:
        """Allow restarts again and start every empty slot now."""
        self._holding = False
        for slot in range(self.processes):
            inc = self.current(slot)
            if inc is None or not inc.alive():
                if inc is not None and inc.ended is None:
                    inc.ended = time.time()
                    inc.returncode = inc.proc.returncode
                self.spawn(slot)

    def kill_all(self) -> None:
        """SIGKILL whatever still runs (the end of every scenario, whatever happened)."""
        self._holding = True
        for inc in self.incarnations:
            if inc.alive():
                if inc.expected is None:
                    inc.expected = "sigkill-at-end"
                try:
                    os.killpg(inc.pid, signal.SIGKILL)
                except OSError:
                    inc.proc.kill()
                try:
                    inc.proc.wait(10)
                except subprocess.TimeoutExpired:
                    pass
            if inc.ended is None:
                inc.ended = time.time()
                inc.returncode = inc.proc.poll()
