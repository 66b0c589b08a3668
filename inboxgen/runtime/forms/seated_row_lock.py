"""Row lock with [flow] concurrency: each job in work holds a seat (runtime/seats.py), a session
lock of the queue's, which a crash gives up with its session at once.

A slot keeps one session for its rounds and takes up to a batch of seats on it, outside a
transaction, before it claims; it claims as many rows as it holds seats. It keeps its seats
across its rounds while they come back full, and gives them up when a claim comes back short,
at least every SEAT_TURN seconds (so a busy worker leaves other processes their turn at the
seats), and when it stops: taking and giving up seats costs a round trip each, which a busy
slot then spends about once a second rather than at every job. A seat a slot holds between two
of its rounds holds no job, so the queue never has more than `concurrency` jobs in work; it may
have fewer for that moment.

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

import attrs

from inboxgen.runtime.forms.base import Form, Parts, Pending
from inboxgen.runtime.forms.row_lock import (
    CountedRowLock,
    PipelinedCountedRowLock,
    PipelinedRowLock,
    RowLock,
    pipelined,
)
from inboxgen.runtime.seats import SeatHolder

if TYPE_CHECKING:
    from inboxgen.runtime.jobs import Held

# The longest a slot keeps its seats across its rounds before it gives them up.
SEAT_TURN = 1.0


def seated_row_lock(parts: Parts) -> Form:
    d = parts.descriptor
    together = pipelined(parts)
    if d.count_crashes:
        # A RELEASE that names no rows unlocks every lock of the session (MySQL's).
        keeps_seats = "id" in d.statement_params.get("RELEASE", ())
        return (SeatedPipelinedCountedRowLock(parts) if together and keeps_seats else
                SeatedCountedRowLock(parts))
    return SeatedPipelinedRowLock(parts) if together else SeatedRowLock(parts)


@attrs.define
class SlotSeats:
    """The seats one slot of a pipelined seated row lock holds across its rounds."""

    names: list[str] = attrs.Factory(list)
    since: float = 0.0  # when the slot took them


class PipelinedSeats(PipelinedRowLock):
    """The pipelined rounds' seats (PipelinedRowLock's hooks): before a claim the slot tops its
    seats up to a batch, in the claim's session, and claims as many rows as it holds; after
    SEAT_TURN, or a claim that came back short, its round commits and it gives them up."""
    needs_one_session = True  # a seat is a session lock

    def __init__(self, parts: Parts) -> None:
        super().__init__(parts)
        assert self.d.seats is not None
        self.seats = SeatHolder(self.d.seats, self.d.qualified_name)

    def slot_seats(self) -> SlotSeats:
        return SlotSeats()

    async def claim_limit(self, conn: Any, seats: SlotSeats) -> int:
        batch = self.settings.batch
        if len(seats.names) < batch:
            # A session lock taken inside the open transaction outlives its COMMIT.
            more = await self.seats.take_queue_together(conn, batch - len(seats.names),
                                                        self.backend.lock_keys)
            if more and not seats.names:
                seats.since = time.monotonic()
            seats.names += more
        return len(seats.names)

    def seats_turn_over(self, seats: SlotSeats) -> bool:
        return time.monotonic() - seats.since >= SEAT_TURN

    async def give_seats(self, conn: Any, seats: SlotSeats) -> None:
        given, seats.names = seats.names, []
        try:
            if given:
                await self.backend.unlock_keys(conn, given)  # together: one round trip
        except BaseException:
            with contextlib.suppress(Exception):
                await self.backend.end_session(conn)  # which gives them up
            raise
        finally:
            self.seats.forget(given)

    async def drop_seats(self, conn: Any, seats: SlotSeats) -> None:
        if not seats.names:
            return
        self.seats.forget(seats.names)
        seats.names = []
        with contextlib.suppress(Exception):
            await self.backend.end_session(conn)



class SeatedPipelinedRowLock(PipelinedSeats):
    pass


class SeatedPipelinedCountedRowLock(PipelinedSeats, PipelinedCountedRowLock):
    pass


class SeatedRowLock(RowLock):
    needs_one_session = True  # a seat is a session lock
    # Whether the seats a slot holds outlive its round (a counted round's RELEASE may end them).
    seats_outlive_round = True

    def __init__(self, parts: Parts) -> None:
        super().__init__(parts)
        assert self.d.seats is not None
        self.seats = SeatHolder(self.d.seats, self.d.qualified_name)

    async def serve(self, index: int, worked: Callable[[], None]) -> None:
        """Rounds on one session until the worker stops, each with as many seats as the slot
        holds (up to a batch)."""
        backend, slots, batch = self.backend, self.slots, self.settings.batch
        async with backend.connection() as conn:  # a transaction at a time, not autocommit
            seats: list[str] = []
            since = 0.0  # when the slot took the seats it holds
            try:
                while not slots.stopping:
                    if len(seats) < batch:
                        more = await self.seats.take_queue(conn, batch - len(seats),
                                                           self._lock_seat)
                        if more and not seats:
                            since = time.monotonic()
                        seats += more
                    if not seats:  # every seat of the queue is held: wait as when drained
                        worked()
                        await slots.wait(index, self.settings.poll_interval)
                        continue
                    full, again = await self.seated_round(conn, len(seats))
                    worked()
                    if not self.seats_outlive_round:
                        self.seats.forget(seats)
                        seats = []
                    if not full or time.monotonic() - since >= SEAT_TURN:
                        given, seats = seats, []
                        await self.seats.give(conn, given, self._unlock_seat)
                    if full or again:
                        slots.wake_waiting_slot()  # a full claim: more rows are likely due
                    else:
                        await slots.wait(index, self.settings.poll_interval)
            except BaseException:
                # Ending the session gives its seats up (and rolls back, and unlocks a counted
                # round's keys).
                self.seats.forget(seats)
                with contextlib.suppress(Exception):
                    await backend.end_session(conn)
                raise
            await self.seats.give(conn, seats, self._unlock_seat)

    async def _lock_seat(self, conn: Any, name: str) -> bool:
        return await self.backend.lock_key(conn, name, self)

    async def _unlock_seat(self, conn: Any, name: str) -> None:
        await self.calls(conn, "unlock", key=name)
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
                start = self.claim_start()
                rows = await self.claim(conn, self.clock.now(), limit, start=start)
                again = self.claimed_from(start, rows, limit)
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
        self.seats_outlive_round = "id" in self.d.statement_params.get("RELEASE", ())

    async def seated_round(self, conn: Any, limit: int) -> tuple[bool, bool]:
        backend = self.backend
        await backend.begin(conn)
        start = self.claim_start()
        counted = await self.claim(conn, self.clock.now(), limit, start=start)
        again = self.claimed_from(start, counted, limit)
        await backend.commit(conn)
        pending: Pending = []
        held = [self.held(row, deferred=self._defer(pending)) for row in counted]
        try:
            await backend.begin(conn)
            await self.deliver_all(held, conn)
            await self.settle_deferred(conn, pending)
            await backend.commit(conn)
        except BaseException as err:
            if isinstance(err, Exception):
                self.report_lost(held, err)
            with contextlib.suppress(Exception):
                await backend.rollback(conn)
            raise
        finally:
            await self._release(conn, held)
        return len(counted) >= limit, again
