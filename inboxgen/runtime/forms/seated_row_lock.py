"""Row lock with [flow] concurrency: each job in work holds a seat (runtime/seats.py), a session
lock of the queue's, which a crash gives up with its session at once.

A slot keeps one session for its rounds and takes one seat on it, outside a transaction,
before it claims a batch: a round's rows run one after another, so one seat serves them all
(and a slot holding a batch's seats would keep all but one idle). It keeps its seat across its
rounds while they come back full, and gives it up when a claim comes back short, when it stops,
and after SEAT_TURN where a worker holding fewer seats waits (runtime/seats.py): taking and
giving up a seat costs a round trip each, which a busy slot then spends rarely rather than at
every job. A seat a slot holds between two of its rounds holds no job, so the queue never has
more than `concurrency` jobs in work; it may have fewer for that moment.

Where the plain row lock sends a batch's settlements with the next claim (pipelined), so does
the seated one: a slot's seats are session locks, taken and given up outside the round's steps,
and a round that gives them up commits first. (Not a counted row lock whose RELEASE unlocks
every lock of the session, MySQL's: its seats end with each round, and it takes them again.)
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from inboxgen.runtime.forms.base import Form, Parts, Pending
from inboxgen.runtime.forms.row_lock import (
    CountedRowLock,
    PipelinedCountedRowLock,
    PipelinedRowLock,
    RowLock,
    pipelined,
    release_unlocks_session,
)
from inboxgen.runtime.seats import SeatHolder, SlotSeat

if TYPE_CHECKING:
    from inboxgen.runtime.jobs import Held

def seated_row_lock(parts: Parts) -> Form:
    if parts.descriptor.count_crashes:
        # A RELEASE that unlocks every lock of the session would end the seats of a pipelined
        # slot between its rounds.
        return (SeatedPipelinedCountedRowLock(parts) if pipelined(parts)
                and not release_unlocks_session(parts.descriptor) else
                SeatedCountedRowLock(parts))
    return SeatedPipelinedRowLock(parts) if pipelined(parts) else SeatedRowLock(parts)


class PipelinedSeats(PipelinedRowLock):
    """The pipelined rounds' seats (PipelinedRowLock's hooks): before a claim the slot takes a
    seat where it holds none, in the claim's session, and claims a batch; where it yields its
    seat (SlotSeat.yields), or a claim came back short, its round commits and it gives the
    seat up."""
    needs_one_session = True  # a seat is a session lock

    def __init__(self, parts: Parts) -> None:
        super().__init__(parts)
        assert self.d.seats is not None
        self.seats = SeatHolder(self.d.seats, self.d.qualified_name)

    def slot_seats(self) -> SlotSeat:
        # A session lock taken inside the open transaction outlives its COMMIT: no COMMIT of
        # its own (Backend.lock_keys: one round trip on PostgreSQL).
        return SlotSeat(self.seats, self.backend.lock_keys, self.backend.unlock_keys,
                        self.backend.keys_together)

    async def claim_limit(self, conn: Any, seats: SlotSeat) -> int:
        return self.settings.batch if await seats.take(conn) else 0

    async def seat_wait(self, conn: Any, seats: SlotSeat) -> float:
        return await seats.wait_time(conn, self.settings.poll_interval)

    async def seats_turn_over(self, conn: Any, seats: SlotSeat) -> bool:
        return await seats.yields(conn)

    async def give_seats(self, conn: Any, seats: SlotSeat) -> None:
        try:
            await seats.give(conn)
        except BaseException:
            with contextlib.suppress(Exception):
                await self.backend.end_session(conn)  # which gives them up
            raise

    async def drop_seats(self, conn: Any, seats: SlotSeat) -> None:
        if seats.lost():
            with contextlib.suppress(Exception):
                await self.backend.end_session(conn)


class SeatedPipelinedRowLock(PipelinedSeats):
    pass


class SeatedPipelinedCountedRowLock(PipelinedSeats, PipelinedCountedRowLock):
    pass


class SeatedRowLock(RowLock):
    """A slot's rounds on one connection of its own, a transaction at a time (transactional
    handlers; MySQL's counted row lock): seats outside the round's transactions."""
    needs_one_session = True  # a seat is a session lock

    def __init__(self, parts: Parts) -> None:
        super().__init__(parts)
        assert self.d.seats is not None
        self.seats = SeatHolder(self.d.seats, self.d.qualified_name)

    async def serve(self, index: int, worked: Callable[[], None]) -> None:
        """Rounds on one session until the worker stops, each under the slot's seat."""
        backend, slots = self.backend, self.slots
        async with backend.connection() as conn:  # a transaction at a time, not autocommit
            seats = SlotSeat(self.seats, self._lock_seats, self._unlock_seats,
                             backend.keys_together)
            try:
                while not slots.stopping:
                    if not await seats.take(conn):
                        # Every seat of the queue is held: wait as when drained.
                        worked()
                        await slots.wait(index, await seats.wait_time(
                            conn, self.settings.poll_interval))
                        continue
                    full, again = await self.seated_round(conn, self.settings.batch)
                    worked()
                    turn_over = full and await seats.yields(conn)
                    if self.seats_end_with_round:
                        seats.ended_with_round(turn_over)  # its RELEASE unlocked the seat
                    elif not full or turn_over:
                        await seats.give(conn)
                    if full or again:
                        slots.wake_waiting_slot()  # a full claim: more rows are likely due
                    else:
                        await slots.wait(index, self.settings.poll_interval)
                await seats.give(conn)
            except BaseException:
                # Ending the session gives its seats up (and rolls back, and unlocks a counted
                # round's keys).
                seats.lost()
                with contextlib.suppress(Exception):
                    await backend.end_session(conn)
                raise

    # Whether a round's end gives the slot's seats up (a counted round's RELEASE may).
    seats_end_with_round = False

    async def _lock_seats(self, conn: Any, names: list[str]) -> list[bool]:
        took = await self.backend.lock_keys(conn, names)
        await self.backend.commit(conn)
        return took

    async def _unlock_seats(self, conn: Any, names: list[str]) -> None:
        await self.backend.unlock_keys(conn, names)
        await self.backend.commit(conn)

    async def seated_round(self, conn: Any, limit: int) -> tuple[bool, bool]:
        """Claim up to `limit` rows and work them in the claim's transaction. Returns whether
        the claim came back full, and whether the slot claims again at once anyway
        (RowLock.claimed_from)."""
        backend = self.backend
        held: list[Held] = []
        try:
            await backend.begin(conn)
            try:
                start, started = self.claim_start(), time.monotonic()
                rows = await self.claim(conn, self.clock.now(), limit, start=start)
                again = self.claimed_from(start, rows, limit, started)
                pending: Pending = []
                held = [self.held(r, deferred=self._defer(pending)) for r in rows]
                await self.deliver_all(held, conn)
                await self.settle_deferred(conn, pending)
            except BaseException:
                with contextlib.suppress(Exception):
                    await backend.rollback(conn)
                raise
            await backend.commit(conn)
        except Exception as err:
            self.report_lost(held, err)
            raise
        self.delivery.committed(held)
        return len(rows) >= limit, again


class SeatedCountedRowLock(SeatedRowLock, CountedRowLock):
    """count_crashes with seats: the claim counts the attempt and commits at once, its rows'
    keys locked for the session (CountedRowLock); they are worked and settled in a transaction
    of their own, and RELEASE unlocks their keys."""

    def __init__(self, parts: Parts) -> None:
        super().__init__(parts)
        # A RELEASE that names no rows unlocks every lock of the session (MySQL's
        # RELEASE_ALL_LOCKS()), the slot's seats with its rows' keys: it takes them again for
        # its next round.
        self.seats_end_with_round = release_unlocks_session(self.d)

    async def seated_round(self, conn: Any, limit: int) -> tuple[bool, bool]:
        backend = self.backend
        await backend.begin(conn)
        start, started = self.claim_start(), time.monotonic()
        counted = await self.claim(conn, self.clock.now(), limit, start=start)
        again = self.claimed_from(start, counted, limit, started)
        await backend.commit(conn)
        pending: Pending = []
        held = [self.held(row, deferred=self._defer(pending)) for row in counted]
        try:
            await backend.begin(conn)
            await self.deliver_all(held, conn)
            await self.settle_deferred(conn, pending)
            await backend.commit(conn)
            self.delivery.committed(held)
        except BaseException as err:
            if isinstance(err, Exception):
                self.report_lost(held, err)
            with contextlib.suppress(Exception):
                await backend.rollback(conn)
            raise
        finally:
            await self._release(conn, held)
        return len(counted) >= limit, again
