"""The async twins of the generated functions on psycopg's async connections."""

from __future__ import annotations

import asyncio

from dbcases import T0, Layout, MakeQueue, at, executed


def test_async_twins_insert_claim_and_finish_under_a_lease(queue: MakeQueue) -> None:
    q = queue("postgres", Layout(form="lease", group=True))
    m = q.mod

    async def run() -> list[str]:
        conn = await q.connect_async()
        try:
            await m.insert_async(conn, q.new(payload="one"))
            await m.insert_many_async(conn, [q.new(payload="two")])
            await conn.commit()
            rows = await m.claim_async(conn, group="g", now=T0, locked_until=at(30), limit=10)
            await conn.commit()
            assert [(r.payload, r.attempt) for r in rows] == [("one", 1), ("two", 1)]
            assert await m.renew_async(conn, id=rows[0].id, locked_until=at(30), attempt=1,
                                       new_locked_until=at(60))
            assert await m.finish_async(conn, id=rows[0].id, now=at(5), locked_until=at(60),
                                        attempt=1)
            assert not await m.finish_async(conn, id=rows[1].id, now=at(5),
                                            locked_until=at(31), attempt=1)
            await conn.commit()
            return executed(conn)
        finally:
            await conn.close()

    ran = asyncio.run(run())
    assert m.CLAIM in ran and m.FINISH in ran
    assert [(r["payload"], r["processed_at"], r["locked_until"]) for r in q.rows()] == [
        ("one", at(5), None), ("two", None, at(30))]


def test_async_twins_row_lock_claim_holds_the_row_until_commit(queue: MakeQueue) -> None:
    q = queue("postgres", Layout(form="row_lock", group=True))
    m = q.mod
    conn = q.connect()
    job = q.add(conn)

    async def run() -> None:
        first, second = await q.connect_async(), await q.connect_async()
        try:
            (row,) = await m.claim_async(first, group="g", now=T0)
            assert await m.claim_async(second, group="g", now=T0) == []
            await second.rollback()
            assert await m.finish_async(first, id=row.id, now=at(1))
            await first.commit()
        finally:
            await first.close()
            await second.close()

    asyncio.run(run())
    stored = q.row(job)
    assert stored is not None and stored["processed_at"] == at(1)
