"""The per-process event log: one line per event, written with one write() on an O_APPEND
descriptor (so every line a process wrote survives its SIGKILL) and fsynced (see EventLog).

    <unix time> <event> <fields...>

The time is the suite's clock, also in a process whose own clock is off (child.py).

Events (a worker process writes them; see child.py):

    ready <pid> <skew>           the process imported everything and built its worker; its own
                                 clock is <skew> seconds ahead of the suite's
    claimed <id> <attempt>       a delivery reached the handler (the earliest moment user code sees)
    started <id> <attempt>       the handler began its work
    selfkill <id> <attempt>      the handler is about to SIGKILL its own process
    settled <id> <attempt>       the transaction holding the delivery's effect committed
    discarded <id> <attempt>     that transaction rolled back (the effect is gone)
    lease_lost <id>              the worker reported LeaseLost for the row
    dead <id> <note>             the worker moved the row to the dead letters
    exit <stats as JSON>         Worker.run() returned
"""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


class EventLog:
    """Each line goes to the kernel with one write() at once (so it survives the process's
    SIGKILL); a background thread fsyncs the file every `sync_every` seconds (so it also
    survives the machine), and `write(..., sync=True)` fsyncs before returning (the last line
    before a process kills itself). Handlers hold database locks while they log: an fsync per line
    would serialize them on the disk."""

    def __init__(self, path: str | Path, *, fsync: bool = True, sync_every: float = 0.05,
                 clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._fd = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._fsync = fsync
        self._lock = threading.Lock()  # handlers in threads share the descriptor
        self._dirty = threading.Event()
        if fsync:
            threading.Thread(target=self._syncer, args=(sync_every,), daemon=True,
                             name="eventlog-fsync").start()

    def write(self, event: str, *fields: object, sync: bool = False) -> None:
        line = " ".join([f"{self._clock():.6f}", event, *map(str, fields)]) + "\n"
        data = line.encode()
        with self._lock:
            os.write(self._fd, data)
        if self._fsync:
            if sync:
                os.fsync(self._fd)
            else:
                self._dirty.set()

    def sync(self) -> None:
        os.fsync(self._fd)

    def _syncer(self, every: float) -> None:
        while True:
            self._dirty.wait()
            self._dirty.clear()
            try:
                os.fsync(self._fd)
            except OSError:
                return
            select.select([], [], [], every)  # a relative wait (time.sleep fails under faketime)


@dataclass(frozen=True)
class Event:
    at: float
    kind: str
    fields: tuple[str, ...]

    @property
    def job(self) -> int:
        return int(self.fields[0])

    @property
    def attempt(self) -> int | None:
        if len(self.fields) < 2 or self.fields[1] == "None":
            return None
        return int(self.fields[1])


def parse_line(line: str) -> Event | None:
    parts = line.split(" ", 2)
    if len(parts) < 2:
        return None
    try:
        at = float(parts[0])
    except ValueError:
        return None
    kind = parts[1]
    rest = parts[2] if len(parts) > 2 else ""
    if kind == "exit":
        fields: tuple[str, ...] = (rest,)
    elif kind == "dead":
        first, _, note = rest.partition(" ")
        fields = (first, note)
    else:
        fields = tuple(rest.split())
    return Event(at, kind, fields)


class EventReader:
    """Reads a log as it grows: each call parses only the lines completed since the last one (a
    line cut by a crash is never complete, and is ignored)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._offset = 0
        self._partial = b""
        self._events: list[Event] = []

    def events(self) -> list[Event]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return self._events
        self._offset += len(data)
        data = self._partial + data
        *lines, self._partial = data.split(b"\n")
        for raw in lines:
            event = parse_line(raw.decode("utf-8", errors="replace"))
            if event is not None:
                self._events.append(event)
        return self._events


def read_events(path: str | Path) -> list[Event]:
    """Every complete line of a log."""
    return list(EventReader(path).events())
