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

A slot keeps its seat of the queue across its rounds (SlotSeat), so a busy worker would keep
every seat it holds for as long as its claims come back full, and another process's slots,
which try again after their poll interval, would find them held each time. So a worker whose
slots find every seat held marks itself waiting: one of its slots takes a waiting mark, a
session lock (`inboxgen seat-wait:QUEUE#K`, K below MARK_LEVELS): the first free from the
number of seats its worker holds on, moving down as marks below come free. It tries for a
seat every SEAT_BEAT while it holds the mark. A slot that has held its seat for SEAT_TURN,
its claims full, looks for the marks of two seats fewer than its worker holds or less (a try
of each, and another CONFIRM later: a try holds a mark for a moment): where one is held, the
slot gives its seat up and its worker takes none for SIT_OUT, so the waiter takes it; where
none is, it keeps its seat for another SEAT_TURN. So seats move, one a second per busy slot,
from the workers holding most to those holding fewest, until no two differ by more than one.
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

# How long a slot keeps its seat across its rounds before it looks for a waiting worker.
SEAT_TURN = 1.0
# How often the slot that holds the queue's waiting mark tries for a seat, and how long a slot
# that gave its seat up to it takes none.
SEAT_BEAT = 0.1
SIT_OUT = 5 * SEAT_BEAT
# The waiting marks' levels: a worker holding this many seats or more does not mark itself.
MARK_LEVELS = 8
# How long a waiting mark must stay held before a slot gives its seat up to it.
CONFIRM = SEAT_BEAT / 2


class SeatHolder:
    """One worker's seats of a limited table."""

    def __init__(self, seats: Seats, queue: str) -> None:
        self.seats = seats
        self._queue = queue
        self._held: set[str] = set()  # seats this worker's slots hold (or are taking)
        # Where this worker starts trying the queue's seats: workers that start apart spend
        # fewer round trips on each other's.
        self._first = random.randrange(seats.concurrency or 1)
        # Until when (time.monotonic()) this worker's slots take no seat of the queue: one of
        # them gave its seat up to a waiting worker, which none of its other slots may take.
        self.sits_out = 0.0

    def key_of(self, row: Any) -> str | None:
        """The key value of claimed row `row` whose seats it needs, or None."""
        if self.seats.key is None or self.seats.key_concurrency is None:
            return None
        return str(getattr(row, self.seats.key))

    def queue_seats(self) -> list[str]:
        n = self.seats.concurrency or 0
        return [f"inboxgen seat:{self._queue}#{(self._first + i) % n}" for i in range(n)]

    def waiting_mark(self, level: int) -> str:
        """The waiting mark of `level`: a session lock that a worker holding that many of the
        queue's seats or fewer takes while its slots wait for another."""
        return f"inboxgen seat-wait:{self._queue}#{level}"

    def seats_here(self) -> int:
        """How many of the queue's seats this worker's slots hold (or are taking)."""
        return sum(name in self._held for name in self.queue_seats())

    async def take_mark(self, conn: Any, lock_all: LockAll, unlock_all: UnlockAll,
                        together: int, below: int | None = None) -> int | None:
        """Take a waiting mark: the first free from the level of the seats this worker holds
        on (a mark above says "this many or fewer", and draws seats from workers that hold
        two more than that). Returns its level, or None. Without `below`, only where no slot
        of this worker holds one; with it, the mark the caller holds is `below`, and only
        those under it are tried."""
        marks = [self.waiting_mark(k) for k in range(MARK_LEVELS)]
        if below is None and any(mark in self._held for mark in marks):
            return None
        tried = marks[self.seats_here():below]
        took = await self.take_first(conn, tried, lock_all, unlock_all, together)
        return None if took is None else marks.index(took)

    async def waited_for(self, conn: Any, lock_all: LockAll, unlock_all: UnlockAll) -> bool:
        """Whether a worker holding at least two seats fewer than this one waits for one: a
        try of the waiting marks of those levels, given back at once where it took them.
        (Not where a slot of this worker tries them: the other try tells.)"""
        marks = [self.waiting_mark(k) for k in range(min(self.seats_here() - 1, MARK_LEVELS))]
        if not marks or any(mark in self._held for mark in marks):
            return False
        self._held.update(marks)  # reserved before the round trip: one try of this worker's
        try:
            took = await lock_all(conn, marks)
            if any(took):
                await unlock_all(conn, [m for m, ok in zip(marks, took, strict=True) if ok])
            return not all(took)
        finally:
            self.forget(marks)

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
        """One of the queue's seats this worker does not hold, or None where every one is
        held (take_first)."""
        free_here = [name for name in self.queue_seats() if name not in self._held]
        return await self.take_first(conn, free_here, lock_all, unlock_all, together)

    async def take_first(self, conn: Any, names: list[str], lock_all: LockAll,
                         unlock_all: UnlockAll, together: int) -> str | None:
        """The first of `names` that can be taken, or None. They are tried one, then
        `together` at a time in one call of `lock_all` (one round trip where the driver
        sends statements together); where a call takes more than one, the first is kept and
        the others are given up again."""
        most = 1  # the first try is likely to take one: it takes no more
        while names:
            tried, names = names[:most], names[most:]
            most = together
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
    given up when a claim comes back short, when the slot stops, and after SEAT_TURN where
    another worker waits for a seat. `lock_all` and `unlock_all` take and give up several
    seats on the slot's session at once (`together` at a time: one round trip where the
    driver sends them together)."""

    def __init__(self, holder: SeatHolder, lock_all: LockAll, unlock_all: UnlockAll,
                 together: int = 1) -> None:
        self._holder = holder
        self._lock_all, self._unlock_all = lock_all, unlock_all
        self._together = together
        self.name: str | None = None
        self._since = 0.0  # when the slot took the seat it holds, or last looked for a waiter
        self._waits: int | None = None  # the level of the waiting mark the slot holds
        self.refused = False  # the last take found every seat held (or the slot sat out)
        self._streak = False  # the seat ended with the slot's last round, its turn goes on
        self._held_mark_at: float | None = None  # when `yields` first found the mark held

    async def take(self, conn: Any) -> bool:
        """Take a seat where the slot holds none; False where every one is held (or the slot
        sits out)."""
        if self.name is None and time.monotonic() >= self._holder.sits_out:
            self.name = await self._holder.take_queue(conn, self._lock_all, self._unlock_all,
                                                      self._together)
            if not self._streak:
                self._since = time.monotonic()
            self._streak = False
            if self.name is not None and self._waits is not None:
                await self._unmark(conn)
        self.refused = self.name is None
        return not self.refused

    async def wait_time(self, conn: Any, poll_interval: float) -> float:
        """A take found every seat held: how long the slot waits before it tries again.
        One slot of the worker takes the waiting mark of the seats its worker holds and tries
        every SEAT_BEAT while it holds it; the others wait `poll_interval`."""
        now = time.monotonic()
        if now < self._holder.sits_out:
            return min(poll_interval, self._holder.sits_out - now)
        level = self._holder.seats_here()
        if self._waits is not None and self._waits < level:
            await self._unmark(conn)  # another slot of this worker took one meanwhile
        if self._waits is None:
            self._waits = await self._holder.take_mark(conn, self._lock_all, self._unlock_all,
                                                       self._together)
        elif self._waits > level:
            # A mark above the seats held draws fewer workers' seats: move down where one of
            # those between is free (a worker that held it took a seat, or gave seats up).
            lower = await self._holder.take_mark(conn, self._lock_all, self._unlock_all,
                                                 self._together, below=self._waits)
            if lower is not None:
                await self._unmark(conn)
                self._waits = lower
        return poll_interval if self._waits is None else min(poll_interval, SEAT_BEAT)

    async def yields(self, conn: Any) -> bool:
        """After a full round: whether the slot gives its seat up. Once it has held it for
        SEAT_TURN, it tries the waiting marks of the workers holding two seats fewer than its
        own or less: one held at two tries CONFIRM apart (a worker trying a mark, as this one
        does, holds it for a moment), the slot gives its seat up to that worker, and none of
        this worker's slots takes a seat for SIT_OUT; none held, it gives them back and keeps
        its seat for another SEAT_TURN."""
        now = time.monotonic()
        if self.name is None or now - self._since < SEAT_TURN:
            return False
        self._since = now
        if not await self._holder.waited_for(conn, self._lock_all, self._unlock_all):
            self._held_mark_at = None
            return False
        if self._held_mark_at is None or now - self._held_mark_at < CONFIRM:
            # Held: try again once CONFIRM has passed, before the slot gives its seat up.
            self._held_mark_at = self._held_mark_at or now
            self._since = now - SEAT_TURN + CONFIRM
            return False
        self._held_mark_at = None
        self._holder.sits_out = now + SIT_OUT
        return True

    async def give(self, conn: Any) -> None:
        """Give the seat up, and the waiting mark; where that fails, the caller ends the
        session, which gives them up too."""
        given, self.name = self.name, None
        try:
            if given is not None:
                await self._unlock_all(conn, [given])
        finally:
            if given is not None:
                self._holder.forget([given])
        if self._waits is not None:
            await self._unmark(conn)

    async def _unmark(self, conn: Any) -> None:
        assert self._waits is not None
        mark, self._waits = self._holder.waiting_mark(self._waits), None
        try:
            await self._unlock_all(conn, [mark])
        finally:
            self._holder.forget([mark])

    def ended_with_round(self, turn_over: bool) -> None:
        """The round's end unlocked every session lock (MySQL's RELEASE_ALL_LOCKS()), the seat
        too: forget it. Unless its turn is over (`yields`), the seat the slot takes next
        goes on with its turn."""
        self.lost()
        self._streak = not turn_over

    def lost(self) -> bool:
        """The session ends (or its session locks did): forget the seat and the mark. Returns
        whether it held either."""
        given, self.name = self.name, None
        self._streak = False
        marked, self._waits = self._waits, None
        self._holder.forget([n for n in (given, None if marked is None
                                         else self._holder.waiting_mark(marked))
                             if n is not None])
        return given is not None or marked is not None
