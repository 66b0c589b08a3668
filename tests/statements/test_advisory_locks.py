"""Advisory locks on PostgreSQL and MySQL: a key is held by one session until unlocked (a long key
too, and apart for each database), jobs sharing a key run one at a time, and a take finds nothing
for a row settled or rescheduled meanwhile."""

from __future__ import annotations

import datetime as dt

import pytest
from dbcases import DIALECTS, LEDGERS, SERVERS, T0, Layout, MakeQueue, at, finish


@pytest.mark.parametrize("dialect", SERVERS)
def test_advisory_lock_excludes_other_sessions_until_unlocked(
        queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout(form="advisory"))
    m = q.mod
    first, second = q.connect(), q.connect()
    assert m.lock(first, key="account-1") is True
    assert m.lock(second, key="account-1") is False
    assert m.lock(second, key="account-2") is True
    first.commit()  # a session lock outlives the transaction
    assert m.lock(second, key="account-1") is False
    assert m.unlock(second, key="account-1") is False  # not second's to release
    assert m.unlock(first, key="account-1") is True
    assert m.lock(second, key="account-1") is True


# MySQL lock names end at 64 characters; the name is `<database>.<key>`, hashed when longer.
LONG_KEYS = ["account-" + "x" * 100, "ä" * 70, "k" * 50, "k" * 59, "k" * 60, "k" * 61]


@pytest.mark.parametrize("dialect", SERVERS)
def test_advisory_lock_takes_keys_longer_than_64_characters(
        queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout(form="advisory"))
    m = q.mod
    first, second = q.connect(), q.connect()
    for key in LONG_KEYS:
        assert m.lock(first, key=key) is True, key
        assert m.lock(first, key=key + "-2") is True, key  # differs past the 64th character
    for key in LONG_KEYS:
        assert m.lock(second, key=key) is False, key
        assert m.lock(second, key=key + "-2") is False, key
        assert m.unlock(first, key=key) is True, key
        assert m.lock(second, key=key) is True, key
        assert m.lock(second, key=key + "-2") is False, key


def test_advisory_locks_of_two_databases_on_one_server_do_not_collide(
        queue: MakeQueue) -> None:
    # GET_LOCK names are server-wide: the database prefix keeps two queues' keys apart.
    one = queue("mysql", Layout(form="advisory"))
    two = queue("mysql", Layout(form="advisory"))
    a, b, c = one.connect(), two.connect(), one.connect()
    for key in ("account-1", LONG_KEYS[0]):
        assert one.mod.lock(a, key=key) is True
        assert two.mod.lock(b, key=key) is True, key  # the same key in the other database
        assert one.mod.lock(c, key=key) is False, key  # but the same database excludes


@pytest.mark.parametrize("dialect", LEDGERS)
def test_advisory_jobs_sharing_a_key_run_one_at_a_time(queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, "ledger")
    m = q.mod
    # One connection per job in work, as the advisory form runs them.
    first, second, third = q.connect(), q.connect(), q.connect()
    m.insert_many(first, [m.NewRow(account_id=7, payload="a1"),
                          m.NewRow(account_id=7, payload="a2"),
                          m.NewRow(account_id=8, payload="b")])
    first.commit()
    now = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)
    (a1,) = q.claim(first, now=now)
    first.commit()
    assert m.decode_payload(a1.payload) == "a1"
    # a2 shares account 7 with a1, which is in work: the second worker gets b instead.
    assert [m.decode_payload(r.payload) for r in q.claim(second, now=now, limit=10)] == ["b"]
    second.commit()
    assert q.claim(third, now=now, limit=10) == []
    third.commit()
    finish(q, first, a1)
    assert [m.decode_payload(r.payload) for r in q.claim(third, now=now, limit=10)] == ["a2"]
    third.commit()


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("processed", [True, False], ids=["marked", "deleted"])
def test_advisory_take_returns_none_for_a_row_finished_meanwhile(
        queue: MakeQueue, dialect: str, processed: bool) -> None:
    q = queue(dialect, Layout(form="advisory", processed=processed))
    m = q.mod
    slow, fast = q.connect(), q.connect()
    job = q.add(slow)
    (cand,) = m.candidates(slow, now=T0)
    row = q.claim_one(fast)
    fast.commit()
    finish(q, fast, row)
    if q.locks:
        assert m.lock(slow, key=m.advisory_key(cand))
    assert m.take(slow, id=job, now=T0) is None
    slow.commit()


@pytest.mark.parametrize("dialect", DIALECTS)
def test_advisory_take_returns_none_for_a_row_rescheduled_meanwhile(
        queue: MakeQueue, dialect: str) -> None:
    q = queue(dialect, Layout(form="advisory"))
    m = q.mod
    slow, fast = q.connect(), q.connect()
    job = q.add(slow)
    (cand,) = m.candidates(slow, now=T0)
    row = q.claim_one(fast)
    assert m.retry_after(fast, id=job, retry_after=at(60))
    fast.commit()
    q.release(fast, row)
    if q.locks:
        assert m.lock(slow, key=m.advisory_key(cand))
    assert m.take(slow, id=job, now=T0) is None
    assert m.take(slow, id=job, now=at(60)) is not None
    slow.commit()
