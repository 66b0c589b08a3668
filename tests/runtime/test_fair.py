"""Fair shares ([flow] fair, lease form): claims take turns across the key's values, so one
account's backlog does not hold up another's jobs enqueued after it; a key with nothing due
costs the walk a step, not the claim its rows."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import pytest
from dbcases import Layout, MakeQueue
from limits_util import add, claim

from inboxgen import Job, Observer, Worker, values
from inboxgen.runtime.forms.lease import FAIR_WALKS_AHEAD

UTC = dt.UTC
DIALECTS = ["postgres", "mysql", "sqlite"]


@pytest.fixture(autouse=True)
def walks_from_the_first_key() -> None:
    """Each test's claims start their walk at the first key: a process keeps one place per
    claim statement, and every test here has the same."""
    values._KEY_TURNS.clear()


@pytest.mark.parametrize("dialect", DIALECTS)
def test_claims_take_turns_across_accounts(queue: MakeQueue, dialect: str) -> None:
    """Claims of one row walk the accounts in turn, each taking its account's next row in
    claim order; an account whose rows are all in work is passed over, and after the last
    account the walk starts again from the first."""
    q = queue(dialect, Layout(form="lease", processed=False, fair=True))
    ids = add(q, ["a"] * 4 + ["b"] * 2 + ["c"])
    a, b, c = ids[:4], ids[4:6], ids[6]
    conn = q.connect()
    try:
        taken = [[r.id for r in claim(q, conn, 1)] for _ in range(5)]
        assert taken == [[a[0]], [b[0]], [c], [a[1]], [b[1]]]
        # c's one row is in work: the walk passes c by, and the claim comes back empty;
        # the next starts over from a.
        assert claim(q, conn, 1) == []
        assert [r.id for r in claim(q, conn, 1)] == [a[2]]
    finally:
        conn.close()


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_batch_takes_the_first_row_of_every_account_before_the_second(
        queue: MakeQueue, dialect: str) -> None:
    """A claim of six over three accounts takes two of each, firsts first; over one account
    it takes six of it (a fair claim still fills its batch)."""
    q = queue(dialect, Layout(form="lease", processed=False, fair=True))
    ids = add(q, ["a"] * 5 + ["b"] * 5 + ["c"] * 5)
    conn = q.connect()
    try:
        got = [r.id for r in claim(q, conn, 6)]
        assert got == [ids[0], ids[5], ids[10], ids[1], ids[6], ids[11]]
        q.db.exec("DELETE FROM jobs WHERE account <> 'a'")
        assert [r.id for r in claim(q, conn, 6)] == ids[2:5]
    finally:
        conn.close()


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_late_account_does_not_wait_behind_a_backlog(queue: MakeQueue, dialect: str) -> None:
    """Account a has 3,000 ready jobs; b's 10, enqueued after them, all start before a's
    twentieth (10 x two accounts), under four slots claiming four at a time."""
    q = queue(dialect, Layout(form="lease", processed=False, fair=True))
    due = dt.datetime.now(UTC) - dt.timedelta(seconds=60)
    conn = q.connect()
    try:
        q.mod.insert_many(conn, [q.new(retry_after=due, account="a") for _ in range(3000)])
        conn.commit()
    finally:
        conn.close()
    backlog = set(q.ids())
    late = set(add(q, ["b"] * 10))
    started: list[int] = []

    async def handler(job: Job[Any]) -> None:
        started.append(job.id)
        await asyncio.sleep(0.002)

    worker = Worker(q.mod.DESCRIPTOR, handler, database=q.database, workers=4, batch=4,
                    listen=False, poll_interval=0.05)

    async def main() -> None:
        await worker.start()
        try:
            deadline = asyncio.get_running_loop().time() + 60
            while not late <= set(started):
                assert asyncio.get_running_loop().time() < deadline, started
                await asyncio.sleep(0.01)
        finally:
            await worker.shutdown()

    asyncio.run(main())
    last_late = max(started.index(i) for i in late)
    from_backlog = [i for i in started[:last_late] if i in backlog]
    assert len(from_backlog) < 20, (len(from_backlog), started[:40])


@pytest.mark.parametrize("dialect", DIALECTS)
def test_columns_named_like_the_walks_own_take_turns_as_well(queue: MakeQueue,
                                                            dialect: str) -> None:
    """An id column named k and a priority named r, as the walk's own columns would be
    without their inboxgen_ prefix: claims still take turns."""
    q = queue(dialect, Layout(form="lease", processed=False, fair=True,
                              names={"id": "k", "priority": "r"}))
    ids = add(q, ["a", "a", "b"])
    conn = q.connect()
    try:
        taken = [[q.id_of(r) for r in claim(q, conn, 1)] for _ in range(3)]
        assert taken == [[ids[0]], [ids[2]], [ids[1]]]
    finally:
        conn.close()


class ClaimCount(Observer):
    def __init__(self) -> None:
        self.claims = 0

    def claimed(self, queue: Any, rows: int, seconds: float) -> None:
        self.claims += 1


@pytest.mark.parametrize("dialect", DIALECTS)
def test_keys_with_nothing_due_cost_a_few_claims_a_poll(queue: MakeQueue, dialect: str) -> None:
    """Forty accounts whose jobs are due in an hour, and one due now behind them: claimed a row
    at a time, the due job runs within a few polls; then, with nothing due, the claimer makes a
    few claims each poll (FAIR_WALKS_AHEAD), not a walk over all forty keys each time."""
    q = queue(dialect, Layout(form="lease", processed=False, fair=True))
    later = dt.datetime.now(UTC) + dt.timedelta(hours=1)
    conn = q.connect()
    try:
        for n in range(40):
            q.add(conn, retry_after=later, account=f"acct-{n:02}")
    finally:
        conn.close()
    (due,) = add(q, ["zz"])
    ran: list[int] = []
    counter = ClaimCount()
    worker = Worker(q.mod.DESCRIPTOR, lambda job: ran.append(job.id), database=q.database,
                    workers=1, batch=1, listen=False, poll_interval=0.1, observers=[counter])

    async def main() -> int:
        await worker.start()
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            while not ran:
                assert loop.time() < deadline
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)
            before = counter.claims
            await asyncio.sleep(1.0)  # about ten polls with nothing due
            return counter.claims - before
        finally:
            await worker.shutdown()

    idle_claims = asyncio.run(main())
    assert ran == [due]
    assert idle_claims <= FAIR_WALKS_AHEAD * 14, idle_claims  # forty a poll without the bound


# -- weights ([flow] weights_table) ---------------------------------------------------------------

WEIGHTED = Layout(form="lease", processed=False, fair=True, weights=True)


def weigh(q: Any, **weights: int) -> None:
    """Give accounts their weights in jobs_weights (for this queue, "jobs")."""
    for account, weight in weights.items():
        q.db.exec(f"INSERT INTO jobs_weights (queue, fair_key, weight) "
                  f"VALUES ('jobs', '{account}', {weight})")


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_weighted_account_takes_its_turns_one_claim_at_a_time(queue: MakeQueue,
                                                                 dialect: str) -> None:
    """Claims of one row: account a (weight 3) takes three in a row, then b (weight 0, which
    counts as 1) one, then c (weight 2, given after the first round) ... and the walk starts
    over from a. Where a has fewer rows due than its turn, the next claim finds that out and
    comes back empty: the one after it goes on to b."""
    q = queue(dialect, WEIGHTED)
    weigh(q, a=3, b=0)
    ids = add(q, ["a"] * 7 + ["b"] * 3 + ["c"] * 5)
    a, b, c = ids[:7], ids[7:10], ids[10:]
    conn = q.connect()
    try:
        taken = [r.id for _ in range(5) for r in claim(q, conn, 1)]
        assert taken == [a[0], a[1], a[2], b[0], c[0]]
        weigh(q, c=2)  # read at each claim: c's next turn has two rows
        taken = [[r.id for r in claim(q, conn, 1)] for _ in range(9)]
        assert taken == [[a[3]], [a[4]], [a[5]], [b[1]], [c[1]], [c[2]], [a[6]], [], [b[2]]]
    finally:
        conn.close()


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_batch_takes_each_accounts_weight_in_rows(queue: MakeQueue, dialect: str) -> None:
    """A claim of six over a (weight 3), b (none: 1) and c (weight 2) takes three of a, one of
    b and two of c, in the walk's order; the next takes the next of each alike. A claim that
    stops inside a's turn leaves the rest of it to the next, before b's."""
    q = queue(dialect, WEIGHTED)
    weigh(q, a=3, c=2)
    ids = add(q, ["a"] * 9 + ["b"] * 3 + ["c"] * 6)
    a, b, c = ids[:9], ids[9:12], ids[12:]
    conn = q.connect()
    try:
        assert [r.id for r in claim(q, conn, 6)] == [a[0], a[1], a[2], b[0], c[0], c[1]]
        assert [r.id for r in claim(q, conn, 6)] == [a[3], a[4], a[5], b[1], c[2], c[3]]
        assert [r.id for r in claim(q, conn, 2)] == [a[6], a[7]]
        assert [r.id for r in claim(q, conn, 2)] == [a[8], b[2]]
    finally:
        conn.close()


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_worker_runs_accounts_in_proportion_to_their_weights(queue: MakeQueue,
                                                               dialect: str) -> None:
    """Accounts a (weight 3) and b (weight 1) with 200 ready jobs each: of the first 40 jobs
    a Worker of four slots starts, about three in four are a's."""
    q = queue(dialect, WEIGHTED)
    weigh(q, a=3)
    due = dt.datetime.now(UTC) - dt.timedelta(seconds=60)
    conn = q.connect()
    try:
        q.mod.insert_many(conn, [q.new(retry_after=due, account=x) for x in "ab" * 200])
        conn.commit()
    finally:
        conn.close()
    of = {i: x for i, x in zip(q.ids(), "ab" * 200, strict=True)}
    started: list[str] = []

    def handler(job: Job) -> None:
        started.append(of[job.id])

    worker = Worker(q.mod.DESCRIPTOR, handler, database=q.database, workers=4, batch=4,
                    listen=False, poll_interval=0.1)

    async def main() -> None:
        await worker.start()
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 60
            while len(started) < 40:
                assert loop.time() < deadline
                await asyncio.sleep(0.01)
        finally:
            await worker.shutdown()

    asyncio.run(main())
    share = started[:40].count("a")
    assert 27 <= share <= 33, started[:40]
