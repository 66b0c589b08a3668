"""Advisory: due rows are read without locks, and each is taken under a session lock on its
key, so rows of one key never run at once. TAKE counts the attempt and commits at once; the
settlement is a transaction of its own on the lock's session, and the key is released after
it. A crash releases the locks with the session: the rows return at once.

On PostgreSQL the round's session is in autocommit (AutocommitAdvisory): the read of
candidates, a lock, a take, a settlement and an unlock are one statement and one round trip
each, with no COMMIT of their own.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from inboxgen.errors import WorkerConfigError
from inboxgen.runtime.batching import one_statement
from inboxgen.runtime.claimstart import ClaimStart, claims_from_id
from inboxgen.runtime.forms.base import Form, Parts
from inboxgen.runtime.outcomes import DEAD_LETTER, FINISH, Settlement
from inboxgen.runtime.seats import SeatHolder, SlotSeat

if TYPE_CHECKING:
    from inboxgen.runtime.jobs import Held

# The most candidates one round reads while the rows ahead are held by others.
_MAX_REACH = 4096


def advisory(parts: Parts) -> Form:
    # In autocommit where the backend's sessions are (PostgreSQL's) and every settlement is
    # one statement (a module built before PostgreSQL's dead letters to a table were one
    # statement copies, then checks); a transactional handler's writes need the connection's
    # own transaction.
    alone = (parts.backend.autocommit_sessions and not parts.settings.transactional
             and one_statement(parts.descriptor, "dead_letter"))
    return AutocommitAdvisory(parts) if alone else Advisory(parts)


class Advisory(Form):
    unfinished = "their locks are released: the rows return at once"
    needs_one_session = True

    def __init__(self, parts: Parts) -> None:
        super().__init__(parts)
        self._keys_in_work: set[str] = set()  # keys this worker's slots hold
        # When this worker settled each id lately (a sequence number), so candidates read
        # before a settlement cost no round trip; an id settled before the read is a new row
        # (SQLite may reuse the largest rowid) and is tried as usual.
        self._settle_seq = 0
        self._settled_at: dict[Any, int] = {}
        self._settled_order: collections.deque[Any] = collections.deque()
        self._reach = 0  # how many candidates the next round reads, at least
        # Where the slots' next read of candidates starts (runtime/claimstart): after the last
        # row a round looked at, not at the head, which rows finished lately crowd.
        self._start = ClaimStart(self.d) if claims_from_id(self.d) else None
        # [flow] limits: the seats this worker's jobs hold (runtime/seats.py).
        self._seats = (SeatHolder(self.d.seats, self.d.qualified_name)
                       if self.d.seats is not None else None)

    def claim_resources(self) -> None:
        # The form is the owner of its locks: one worker's, and never another's.
        if not self.backend.claim_advisory_file(self):
            raise WorkerConfigError(
                f"another process serves advisory rows of the {self.backend.label}: SQLite "
                f"keeps advisory locks in one process, so run the advisory workers of a "
                f"database file in one process (or use the lease form)",
                worker=self.name, table=self.d.qualified_name)

    def release_resources(self) -> None:
        self.backend.release_advisory(self)

    async def round(self) -> bool:
        """Lock and take up to `batch` of the due rows. Rows whose key another slot or process
        holds are skipped; the round counts as drained only when fewer rows were due than it
        read."""
        async with self.round_connection() as conn, self.round_seat(conn) as queue_seat:
            return await self.round_on(conn, queue_seat)

    async def round_on(self, conn: Any, queue_seat: SlotSeat | None) -> bool:
        """A round on `conn`'s session; `queue_seat` holds the seat of the queue its rows run
        in ([flow] concurrency: taken at the first row where it holds none)."""
        d, settings = self.d, self.settings
        batch, group = settings.batch, settings.group
        got = 0
        held = 0  # candidates passed over: their keys are held here or elsewhere
        # Rows in work stay due (and first in claim order) until they settle: read past this
        # worker's own, and further still while whole pages turn out held by other processes.
        limit = max(batch + settings.workers + len(self._keys_in_work), self._reach)
        start = self._start.at() if self._start is not None else None
        looked = 0  # candidates looked at, in claim order: the next round starts after them
        full = False  # every seat of the queue was held
        read_at = self._settle_seq
        started = time.monotonic()
        now = self.clock.now()
        await self.priorities.choose(conn, now)
        if self.nothing_due(read_again=False):
            return True  # drained: no listed priority has due rows
        candidates = await self.candidates(conn, {
            "group": group, "now": now, "limit": limit,
            "by_priority": self.priorities.by_priority, **self.priorities.claim_values(),
            **(start or {})})
        # The claim's round trip, for observers, is the read of the due rows. (Not claim_came:
        # a read asks for more candidates than the round takes, and comes back short by design,
        # so its priorities are read again once a second only.)
        self.observed_claim(candidates, limit, started)
        if self._start is not None:
            self._start.timed(start, time.monotonic() - started)
        for row in candidates:
            if got >= batch:
                break
            looked += 1
            row_id = getattr(row, d.role_attrs["id"])
            if self._settled_at.get(row_id, -1) >= read_at:
                continue  # a slot of this worker settled it since the candidates were read
            key = d.advisory_key(row) if d.advisory_key else ""
            if key in self._keys_in_work:
                held += 1
                continue  # another slot of this worker holds it: no round trip to learn so
            # One seat of the queue serves the round's rows, which run one at a time.
            if queue_seat is not None and not await queue_seat.take(conn):
                full = True
                break
            self._keys_in_work.add(key)  # reserved before the lock's round trip
            try:
                locked, key_seat = await self.lock_row(conn, row, key)
            except BaseException:
                # A lost connection (a server restart): the reservation must not outlive
                # the round, or this worker would pass over the key's rows for good.
                self._keys_in_work.discard(key)
                raise
            if not locked:
                self._keys_in_work.discard(key)
                held += 1
                continue  # its lock, or every seat of its limit key, is held
            try:
                taken = await self.take(conn, {"id": row_id, "group": group,
                                               "now": self.clock.now()})
                if taken is None:
                    continue  # finished or rescheduled since the candidates were read
                got += 1
                self.slots.took(1)
                await self.delivery.deliver(self.held(taken, key=key), conn)
            finally:
                self._keys_in_work.discard(key)
                await self.unlock_row(conn, key, key_seat)
        if self._start is not None and looked:
            self._start.after(candidates[looked - 1])
        if full:
            return True  # every seat of the queue is held: wait as on a drained queue
        if len(candidates) < limit:
            self._reach = 0
            if start is not None and self._start is not None:
                # Short from a start: the next round reads from the head at once, where rows
                # passed over, or come back since, may be due.
                self._start.rewind()
                return False
            return got < batch
        # A full page: the next round reads past as many held rows as this one met (twice as
        # far when they left this round short), since the free rows lie further on.
        margin = batch + settings.workers
        self._reach = min(_MAX_REACH,
                          (2 * max(held, limit) if got < batch else held) + margin)
        if got == 0:
            # Every due row we read is held by others (a shared key, or other slots): look
            # again shortly rather than wait out the poll interval.
            await asyncio.sleep(0.01)
        return False

    @contextlib.asynccontextmanager
    async def round_seat(self, conn: Any) -> AsyncIterator[SlotSeat | None]:
        """[flow] concurrency: the round's seat of the queue (none yet: the round takes it at
        its first row), given up as the round ends."""
        seat = self.slot_seat()
        try:
            yield seat
        finally:
            await self.give_queue_seat(conn, seat)

    def slot_seat(self) -> SlotSeat | None:
        """[flow] concurrency: where a slot holds its seat of the queue (None: no such limit)."""
        if self._seats is None or self._seats.seats.concurrency is None:
            return None
        return SlotSeat(self._seats, self._lock_each, self._unlock_each)

    async def give_queue_seat(self, conn: Any, seat: SlotSeat | None) -> None:
        """Give the slot's seat of the queue up; where that fails, end the session, which gives
        it up too."""
        if seat is None:
            return
        try:
            await seat.give(conn)
        except BaseException:
            with contextlib.suppress(Exception):
                await self.backend.end_session(conn)
            raise

    async def _lock_each(self, conn: Any, names: list[str]) -> list[bool]:
        return [await self.lock(conn, name) for name in names]

    async def _unlock_each(self, conn: Any, names: list[str]) -> None:
        for name in names:
            await self.unlock(conn, name)

    async def lock_row(self, conn: Any, row: Any, key: str) -> tuple[bool, str]:
        """Take a seat of the row's limit key ([flow] key_concurrency: "" where the table has
        none) and the lock of its advisory key, or neither. Returns whether it took them, and
        the seat."""
        seat = await self.take_key_seat(conn, row)
        if seat is None:
            return False, ""
        try:
            locked = await self.lock(conn, key)
        except BaseException:
            if self._seats is not None:
                self._seats.forget([seat])  # the round fails, and its session ends
            raise
        if not locked:
            await self.give_seats(conn, [seat])
            return False, ""
        return True, seat

    async def unlock_row(self, conn: Any, key: str, seat: str) -> None:
        """Give up the lock of the row's key, then its seat (lock_row)."""
        try:
            await self.unlock(conn, key)
        finally:
            await self.give_seats(conn, [seat])

    async def take_key_seat(self, conn: Any, row: Any) -> str | None:
        """[flow] key_concurrency: a seat of `row`'s key, or None where every one is held
        ("" where the table has no such limit: a name that needs no lock)."""
        seats = self._seats
        key = seats.key_of(row) if seats is not None else None
        if seats is None or key is None:
            return ""
        return await seats.take_key_seat(conn, key, self.lock)

    async def give_seats(self, conn: Any, names: list[str]) -> None:
        """Give seats up after the row they held settled (or was not taken); where that fails,
        end the session, which gives them up too."""
        if not any(names) or self._seats is None:
            return
        try:
            await self._seats.give(conn, names, self.unlock)
        except BaseException:
            with contextlib.suppress(Exception):
                await self.backend.end_session(conn)
            raise

    def round_connection(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """The connection a round reads, locks and settles on (its session holds the keys)."""
        return self.backend.connection()

    async def candidates(self, conn: Any, values: dict[str, Any]) -> list[Any]:
        """The due rows, read without locks (CANDIDATES), in a transaction of their own."""
        rows: list[Any] = await self.calls(conn, "candidates", **values)
        await self.backend.commit(conn)
        return rows

    async def lock(self, conn: Any, key: str) -> bool:
        """Take `key`'s lock for the round's session, without waiting."""
        return await self.backend.lock_key(conn, key, self)

    async def take(self, conn: Any, values: dict[str, Any]) -> Any:
        """TAKE, committed at once: the row, its attempt counted, or None where it is no
        longer due."""
        async with self._on(conn):
            return await self.calls(conn, "take", **values)

    async def unlock(self, conn: Any, key: str) -> None:
        """Give `key`'s lock up (a broken session has given it up already)."""
        await self.backend.unlock_key(conn, key, self)

    @contextlib.asynccontextmanager
    async def _on(self, conn: Any) -> AsyncIterator[Any]:
        """A transaction on the lock's session."""
        backend = self.backend
        await backend.begin(conn)
        try:
            yield conn
        except BaseException:
            await backend.rollback(conn)
            raise
        await backend.commit(conn)

    async def deliver_in_transaction(self, h: Held, payload: Any, conn: Any | None) -> None:
        assert conn is not None
        backend, delivery = self.backend, self.delivery
        await backend.begin(conn)
        outcome = await delivery.run_handler(h, payload, conn)
        s = delivery.decide(h, outcome)
        if outcome.kind == "ack" and s.action == FINISH:
            await delivery.execute_settlement(conn, h, s)
            refused = await delivery.commit_job(conn)
            if refused is not None:
                # The handler's writes are undone, so the delivery failed; the key's lock
                # still holds the row.
                await delivery.settle(h, delivery.rolled_back(h, refused), conn)
                return
            delivery.count(s, h)
            return
        await backend.rollback(conn)
        await delivery.settle(h, s, conn)

    async def settle(self, h: Held, s: Settlement, conn: Any | None) -> None:
        assert conn is not None  # the lock's session
        async with self._on(conn):
            await self.delivery.execute_settlement(conn, h, s)
        if s.action in (FINISH, DEAD_LETTER):  # gone for good: retried rows come back
            self._remember_settled(h.id)

    def _remember_settled(self, row_id: Any) -> None:
        self._settled_at[row_id] = self._settle_seq
        self._settle_seq += 1
        self._settled_order.append(row_id)
        if len(self._settled_order) > 4096:
            old = self._settled_order.popleft()
            if self._settled_at.get(old, 0) < self._settle_seq - 4096:
                del self._settled_at[old]


class AutocommitAdvisory(Advisory):
    """The advisory form on a session in autocommit: the read of candidates, a lock, a take
    and a settlement (each one statement) are a round trip each, with no COMMIT of their own.
    A round that fails ends its session, which unlocks every key it held, rather than give it
    back to the pool.

    [flow] concurrency: a slot keeps its session, and its seat of the queue, across its rounds
    while they come back full, as a row lock's slot keeps its seat (runtime/seats.py: given up
    after SEAT_TURN where another worker waits for one): a lock and an unlock a round fewer."""

    async def serve(self, index: int, worked: Callable[[], None]) -> None:
        seat = self.slot_seat()
        if seat is None:
            await super().serve(index, worked)
            return
        slots = self.slots
        drained = False
        async with self.round_connection() as conn:
            try:
                while not slots.stopping:
                    seat.refused = False
                    drained = await self.round_on(conn, seat)
                    worked()
                    if drained and seat.refused:
                        # Every seat of the queue is held (runtime/seats.py): a slot that
                        # waits for one with a waiting mark, or sits out, waits on this
                        # session, which holds the mark.
                        wait = await seat.wait_time(conn, self.settings.poll_interval)
                        if wait < self.settings.poll_interval:
                            await slots.wait(index, wait)
                            continue
                    if drained or await seat.yields(conn):
                        await self.give_queue_seat(conn, seat)
                    if drained:
                        break
                    slots.wake_waiting_slot()  # a full round: more rows are likely due
            except BaseException:
                seat.lost()  # the round's failure ends the session
                raise
            await self.give_queue_seat(conn, seat)
        if drained:
            await slots.wait(index, self.settings.poll_interval)

    @contextlib.asynccontextmanager
    async def round_connection(self) -> AsyncIterator[Any]:
        backend = self.backend
        async with backend.session() as conn:
            try:
                yield conn
            except BaseException:
                with contextlib.suppress(Exception):
                    await backend.end_session(conn)
                raise

    async def candidates(self, conn: Any, values: dict[str, Any]) -> list[Any]:
        rows: list[Any]
        if not values.get("by_priority"):
            rows = await self.calls(conn, "candidates", **values)
            return rows
        # The read by priority runs its generic plan (autocommit sessions are PostgreSQL's),
        # the setting sent with it in one round trip: planned at each call, it cost more than
        # the read (runtime/priorities.py).
        rows = await self.backend.planned_once(conn, self.calls.step("candidates", values))
        return rows

    async def lock(self, conn: Any, key: str) -> bool:
        return bool(await self.calls(conn, "lock", key=key))

    async def take(self, conn: Any, values: dict[str, Any]) -> Any:
        return await self.calls(conn, "take", **values)  # one statement: atomic alone

    async def unlock(self, conn: Any, key: str) -> None:
        # A failure here fails the round, whose session then ends: the key is unlocked.
        await self.calls(conn, "unlock", key=key)

    async def settle(self, h: Held, s: Settlement, conn: Any | None) -> None:
        assert conn is not None  # the lock's session
        await self.delivery.execute_settlement(conn, h, s)  # one statement: atomic alone
        if s.action in (FINISH, DEAD_LETTER):  # gone for good: retried rows come back
            self._remember_settled(h.id)
