"""The lease's batching without a database: settlements of many slots go as one statement per
kind (settler.py), renewals of every held row as one (renewer.py), and each row learns its own
result. The table is a dict standing in for the rows' lease tokens; the generated functions'
signatures and the batching are the real ones."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from generated_examples import reports
from inboxgen.runtime.batching import Calls, by_op, one_statement
from inboxgen.runtime.jobs import Held
from inboxgen.runtime.renewer import RENEW_AGAIN, LeaseRenewer
from inboxgen.runtime.settler import LeaseSettler
from inboxgen.runtime.testing import FakeClock

D = reports.DESCRIPTOR


class Deadlock(Exception):
    """What a server raises when it broke a deadlock by rolling a transaction back whole."""


class Tokens:
    """The queue table as far as leases go: row id -> the token its lease holds. Runs the
    steps `Backend.together` and `Backend.alone` are given, and records them."""

    busy = 0

    def __init__(self, **rows: dt.datetime) -> None:
        self.rows = {int(k.removeprefix("r")): v for k, v in rows.items()}
        self.sent: list[list[str]] = []

    async def alone(self, steps: list[Any]) -> list[Any]:
        return await self.together(None, steps)

    def race_lost(self, err: BaseException) -> bool:
        return isinstance(err, Deadlock)

    async def together(self, conn: Any, steps: list[Any]) -> list[Any]:
        self.sent.append([op for op, _ in steps])
        return [self._run(op, v) for op, v in steps]

    def _run(self, op: str, v: dict[str, Any]) -> Any:
        if op.endswith("_many"):
            held = [i for i, t in zip(v["id"], v["locked_until"], strict=True)
                    if self.rows.get(i) == t]
            for i in held:
                self._apply(op.removesuffix("_many"), i, v)
            return held
        if self.rows.get(v["id"]) != v["locked_until"]:
            return False
        self._apply(op, v["id"], v)
        return True

    def _apply(self, op: str, row_id: int, v: dict[str, Any]) -> None:
        if op == "renew":
            self.rows[row_id] = v["new_locked_until"]
        else:
            del self.rows[row_id]


T0 = dt.datetime(2026, 12, 2, 12, 0, tzinfo=dt.UTC)
LEASE = T0 + dt.timedelta(seconds=60)


def test_settlements_group_by_kind_in_the_order_each_came() -> None:
    pending = [("finish", 1), ("retry", 2), ("finish", 3)]
    assert by_op(pending) == {"finish": [1, 3], "retry": [2]}
    assert one_statement(D, "finish") and not one_statement(D, "insert")


def test_many_acks_are_one_statement_and_one_ack_its_own() -> None:
    calls = Calls(D, Tokens())  # type: ignore[arg-type]
    rows = [{"id": i, "locked_until": LEASE, "attempt": 1, "now": T0} for i in (1, 2)]
    steps, read = calls.plan("finish", rows)
    assert [op for op, _ in steps] == ["finish_many"]
    assert steps[0][1] == {"id": [1, 2], "locked_until": [LEASE, LEASE], "attempt": [1, 1]}
    assert read([[2]]) == [False, True]
    (single,), _ = calls.plan("finish", rows[:1])
    assert single == ("finish", {"id": 1, "locked_until": LEASE, "attempt": 1})


def test_a_flush_writes_every_slots_settlement_and_tells_each_its_own() -> None:
    table = Tokens(r1=LEASE, r2=LEASE, r3=LEASE + dt.timedelta(seconds=5))
    settler = LeaseSettler(Calls(D, table), table)  # type: ignore[arg-type]
    told: dict[int, bool | Exception] = {}

    async def main() -> None:
        settler.start()
        for row_id in (1, 2, 3):  # row 3's lease is another worker's now
            settler.submit("finish", {"id": row_id, "locked_until": LEASE, "attempt": 1,
                                      "now": T0},
                           lambda result, row_id=row_id: told.__setitem__(row_id, result))
        assert await settler.settle("retry", {"id": 9, "locked_until": LEASE, "attempt": 1,
                                              "now": T0}) is False
        await settler.stop()

    asyncio.run(main())
    assert told == {1: True, 2: True, 3: False}
    # One flush, one round trip: the three acks as one statement, the retry beside them.
    assert table.sent == [["finish_many", "retry"]]
    assert sorted(table.rows) == [3]


def test_a_flush_the_server_rolled_back_whole_is_written_again() -> None:
    class Deadlocked(Tokens):
        """The first flush loses a deadlock: the server rolls it back, nothing written."""

        async def alone(self, steps: list[Any]) -> list[Any]:
            if not self.sent:
                self.sent.append(["rolled back"])
                raise Deadlock("Deadlock found when trying to get lock")
            return await super().alone(steps)

    table = Deadlocked(r1=LEASE, r2=LEASE)
    settler = LeaseSettler(Calls(D, table), table)  # type: ignore[arg-type]
    told: dict[int, bool | Exception] = {}

    async def main() -> None:
        settler.start()
        for row_id in (1, 2):
            settler.submit("finish", {"id": row_id, "locked_until": LEASE, "attempt": 1,
                                      "now": T0},
                           lambda result, row_id=row_id: told.__setitem__(row_id, result))
        await settler.stop()

    asyncio.run(main())
    assert told == {1: True, 2: True}  # not reported lost: written by the second attempt
    assert table.sent == [["rolled back"], ["finish_many"]]
    assert table.rows == {}


def test_a_failed_flush_tells_every_owner_and_the_settler_goes_on() -> None:
    class Broken(Tokens):
        async def together(self, conn: Any, steps: list[Any]) -> list[Any]:
            raise ConnectionError("server closed the connection")

    settler = LeaseSettler(Calls(D, Broken()), Broken())  # type: ignore[arg-type]
    told: list[bool | Exception] = []

    async def main() -> None:
        settler.start()
        for row_id in (1, 2):
            settler.submit("finish", {"id": row_id, "locked_until": LEASE, "attempt": 1},
                           told.append)
        await settler.stop()

    asyncio.run(main())
    assert [type(t) for t in told] == [ConnectionError, ConnectionError]


def _renewer(table: Tokens, clock: FakeClock, renewed: Callable[[int], None]) -> LeaseRenewer:
    """A renewer of a 60 s lease over `table`, on `clock`; a transaction is nothing here."""

    @contextlib.asynccontextmanager
    async def transaction() -> AsyncIterator[None]:
        yield None

    async def gone(row_id: Any) -> bool:
        return row_id not in table.rows

    return LeaseRenewer(Calls(D, table), clock, 60, "reports",  # type: ignore[arg-type]
                        transaction, renewed, gone, lambda err, what: False, table.race_lost)


def test_leases_renew_together_at_half_time_and_a_taken_row_is_lost() -> None:
    clock = FakeClock(start=T0)
    table = Tokens(r1=LEASE, r2=LEASE, r3=LEASE)
    renewed: list[int] = []
    renewer = _renewer(table, clock, renewed.append)
    held = [Held(row=None, id=i, attempt=1, token=LEASE) for i in (1, 2, 3)]

    async def main() -> None:
        renewer.start()
        renewer.hold(held)
        table.rows[2] = LEASE + dt.timedelta(seconds=1)  # taken by another worker
        del table.rows[3]  # deleted while its job ran
        await asyncio.sleep(0.01)
        assert table.sent == []  # nothing is due before half the lease is left
        clock.advance(31)
        for _ in range(100):
            await asyncio.sleep(0.001)
            if table.sent:
                break
        await renewer.stop()

    asyncio.run(main())
    assert table.sent == [["renew_many"]]  # every held row in one statement
    assert renewed == [1]
    assert held[0].token == T0 + dt.timedelta(seconds=91) and not held[0].lost
    assert held[1].lost and not held[1].gone
    assert held[2].lost and held[2].gone


def test_a_renewal_the_server_rolled_back_is_tried_again_at_once_then_after_a_second(
        caplog: pytest.LogCaptureFixture) -> None:
    """A renewal the server rolled back whole (a deadlock, a Galera certification conflict)
    wrote nothing and tells nothing of the rows: it is sent again at once, quietly, up to
    RENEW_AGAIN times in a row; after that it is a failure as any other, said and tried again
    within a second."""

    class RolledBack(Tokens):
        losses = RENEW_AGAIN + 1

        async def together(self, conn: Any, steps: list[Any]) -> list[Any]:
            if self.losses:
                self.losses -= 1
                self.sent.append(["rolled back"])
                raise Deadlock("Deadlock found when trying to get lock")
            return await super().together(conn, steps)

    clock = FakeClock(start=T0)
    table = RolledBack(r1=LEASE)
    renewer = _renewer(table, clock, lambda n: None)
    held = [Held(row=None, id=1, attempt=1, token=LEASE)]

    async def settled(sent: int) -> None:
        for _ in range(200):
            await asyncio.sleep(0.001)
            if len(table.sent) >= sent:
                return

    async def main() -> None:
        renewer.start()
        renewer.hold(held)
        clock.advance(31)
        await settled(RENEW_AGAIN + 1)
        assert table.sent == [["rolled back"]] * (RENEW_AGAIN + 1)
        assert held[0].token == LEASE  # the fourth in a row waits for the clock's second
        clock.advance(1)
        await settled(RENEW_AGAIN + 2)
        await renewer.stop()

    with caplog.at_level(logging.DEBUG, logger="inboxgen"):
        asyncio.run(main())
    assert table.sent[-1] == ["renew"]  # one row: its own statement
    assert held[0].token == T0 + dt.timedelta(seconds=92) and not held[0].lost
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warned) == 1 and "trying again in 1 s" in warned[0], warned
