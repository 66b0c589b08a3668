"""[flow] limits of a row-lock or advisory table, held by seats.

A lease table's claim counts the jobs in work by their leases. A row lock or an advisory lock
leaves no mark in the table, so there a job in work holds a seat: one session lock among the
queue's `concurrency` (names `inboxgen seat:QUEUE#0` ..), and one among its key's
`key_concurrency` (`inboxgen seat:QUEUE:KEY#0` ..), taken without waiting before the job is
claimed and given up after it settles. A lock that is held elsewhere is a seat in use, so no
more than N jobs hold seats at once, across every worker of every process; a crash ends the
session, which gives its seats up at once. On SQLite the locks are the process's (the advisory
form serves a database file from one process).

A worker remembers the seats its own slots hold, and tries only the others: a slot never spends
a round trip on a seat of its own worker's.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from inboxgen.descriptor import Seats

Lock = Callable[[Any, str], Awaitable[bool]]  # take a session lock, without waiting
Unlock = Callable[[Any, str], Awaitable[None]]
LockAll = Callable[[Any, list[str]], Awaitable[list[bool]]]  # Lock of several, which it took
UnlockAll = Callable[[Any, list[str]], Awaitable[None]]

# The longest a row-lock slot keeps its seats across its rounds before it gives them up.
SEAT_TURN = 1.0


class SeatHolder:
    """One worker's seats of a limited table."""

    def __init__(self, seats: Seats, queue: str) -> None:
        self.seats = seats
        self._queue = queue
        self._held: set[str] = set()  # seats this worker's slots hold (or are taking)
        # Where this worker starts trying the queue's seats: workers that start apart spend
        # fewer round trips on each other's.
        self._first = random.randrange(seats.concurrency or 1)

    def key_of(self, row: Any) -> str | None:
        """The key value of claimed row `row` whose seats it needs, or None."""
        if self.seats.key is None or self.seats.key_concurrency is None:
            return None
        return str(getattr(row, self.seats.key))

    def queue_seats(self) -> list[str]:
        n = self.seats.concurrency or 0
        return [f"inboxgen seat:{self._queue}#{(self._first + i) % n}" for i in range(n)]

    def key_seats(self, key: str) -> list[str]:
        return [f"inboxgen seat:{self._queue}:{key}#{i}"
                for i in range(self.seats.key_concurrency or 0)]

    def key_full_here(self, key: str) -> bool:
        """Whether this worker's own slots hold every seat of `key` (no round trip tells
        more)."""
        return all(name in self._held for name in self.key_seats(key))

    async def take_one(self, conn: Any, names: list[str], lock: Lock) -> str | None:
        """The first of `names` this worker does not hold that `lock` takes, or None."""
        for name in names:
            if name in self._held:
                continue
            self._held.add(name)  # reserved before the round trip
            try:
                taken = await lock(conn, name)
            except BaseException:
                self._held.discard(name)
                raise
            if taken:
                return name
            self._held.discard(name)
        return None

    async def take_key_seat(self, conn: Any, key: str, lock: Lock) -> str | None:
        """One of `key`'s seats, or None where every one is held."""
        if self.key_full_here(key):
            return None  # this worker's slots hold them all: no round trip to learn so
        return await self.take_one(conn, self.key_seats(key), lock)

    async def take_queue(self, conn: Any, lock_all: LockAll, unlock_all: UnlockAll,
                         together: int) -> str | None:
        """One of the queue's seats, or None where every one is held. Seats this worker does
        not hold are tried `together` at a time in one call of `lock_all` (one round trip where
        the driver sends statements together); where a call takes more than one, the first is
        kept and the others are given up again."""
        free_here = [name for name in self.queue_seats() if name not in self._held]
        while free_here:
            tried, free_here = free_here[:together], free_here[together:]
            self._held.update(tried)  # reserved before the round trip
            try:
                took = await lock_all(conn, tried)
            except BaseException:
                self.forget(tried)  # the caller ends the session, which gives up any taken
                raise
            taken = [name for name, ok in zip(tried, took, strict=True) if ok]
            self.forget([name for name in tried if name not in taken[:1]])
            if taken[1:]:
                try:
                    await unlock_all(conn, taken[1:])
                except BaseException:
                    self.forget(taken[:1])
                    raise
            if taken:
                return taken[0]
        return None

    async def give(self, conn: Any, names: list[str], unlock: Unlock) -> None:
        """Give `names` up on `conn`'s session. Where that fails, the caller ends the session,
        which gives them up too: they are forgotten here either way."""
        try:
            for name in names:
                if name:
                    await unlock(conn, name)
        finally:
            self.forget(names)

    def forget(self, names: list[str]) -> None:
        """`names` are given up (or their session ended)."""
        for name in names:
            self._held.discard(name)


class SlotSeat:
    """The seat of the queue one slot holds across its rounds. A slot runs its rows one after
    another, so one seat serves a round however many rows it claims: taken before a claim,
    given up when a claim comes back short, after SEAT_TURN, and when the slot stops.
    `lock_all` and `unlock_all` take and give up several seats on the slot's session at once
    (`together` at a time: one round trip where the driver sends them together)."""

    def __init__(self, holder: SeatHolder, lock_all: LockAll, unlock_all: UnlockAll,
                 together: int = 1) -> None:
        self._holder = holder
        self._lock_all, self._unlock_all = lock_all, unlock_all
        self._together = together
        self.name: str | None = None
        self._since = 0.0  # when the slot took the seat it holds

    async def take(self, conn: Any) -> bool:
        """Take a seat where the slot holds none; False where every one is held."""
        if self.name is None:
            self.name = await self._holder.take_queue(conn, self._lock_all, self._unlock_all,
                                                      self._together)
            self._since = time.monotonic()
        return self.name is not None

    def turn_over(self) -> bool:
        return time.monotonic() - self._since >= SEAT_TURN

    async def give(self, conn: Any) -> None:
        """Give the seat up; where that fails, the caller ends the session, which gives it up
        too."""
        given, self.name = self.name, None
        if given is None:
            return
        try:
            await self._unlock_all(conn, [given])
        finally:
            self._holder.forget([given])

    def lost(self) -> bool:
        """The session ends (or its seat did): forget it. Returns whether it held one."""
        given, self.name = self.name, None
        if given is None:
            return False
        self._holder.forget([given])
        return True
