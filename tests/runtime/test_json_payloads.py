"""A PostgreSQL worker's own pool decodes json and jsonb columns with a faster decoder than
json.loads; a handler must see exactly what json.loads would give, for every value a server can
send, and a pool the caller passes keeps the decoder its owner chose."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from dbcases import MakeQueue, pg_rows, spec_toml
from psycopg.types.json import set_json_loads
from psycopg_pool import AsyncConnectionPool

from inboxgen import Job, Worker
from inboxgen.runtime.backends.postgres import json_loads

DDL = """
CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    name TEXT NOT NULL DEFAULT 'work',
    payload JSONB NOT NULL
);
"""
SPEC = spec_toml("jobs", {"id": "id generated", "name": "group", "payload": "payload"})

# jsonb keeps numbers as numeric: past a float's range (json.loads: inf), past 64 bits, and
# a fraction longer than a float holds; text with escapes and characters past ASCII.
PAYLOADS = ['{"big": 1e400, "small": -1e400, "tiny": 1e-400}',
            '{"n": 123456789012345678901234567890, "m": -9223372036854775809}',
            '{"f": 0.1000000000000000055511151231257827, "e": 2.5E3}',
            '{"s": "caf\\u00e9 \\"q\\" \\\\ \\n", "u": "\U0001F600", "l": [1, 2.5, null, true]}',
            '[]', '"text"', '7', 'null']


def _fill(queue: MakeQueue) -> Any:
    q = queue("postgres", spec=SPEC, ddl=DDL)
    for text in PAYLOADS:
        pg_rows(q.target, "INSERT INTO jobs (payload) VALUES (%s::jsonb) RETURNING id", (text,))
    return q


async def _drain(worker: Worker, seen: dict[int, Any]) -> None:
    await worker.start()
    try:
        deadline = time.monotonic() + 20
        while len(seen) < len(PAYLOADS) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
    finally:
        await worker.shutdown()


def test_a_handler_sees_what_json_loads_gives(queue: MakeQueue) -> None:
    q = _fill(queue)
    # What json.loads makes of the text the server sends for each row.
    expected = {id: json.loads(text) for id, text in
                pg_rows(q.target, "SELECT id, payload::text FROM jobs")}
    seen: dict[int, Any] = {}

    def handler(job: Job[Any]) -> None:
        seen[job.id] = job.payload

    asyncio.run(_drain(Worker(q.mod.DESCRIPTOR, handler, database=q.target, group="work",
                              poll_interval=0.05, listen=False), seen))
    assert seen == expected
    assert len(str(seen[min(seen)]["big"])) == 401  # jsonb sends 1e400 as its 401 digits


def test_a_json_column_number_past_a_float_reads_as_json_loads_reads_it() -> None:
    # A json (not jsonb) column keeps its text: msgspec refuses 1e400, json.loads reads inf.
    for text in (b"1e400", b'{"a": [-1e400]}', b'{"a": "\\ud800"}'):
        assert json_loads(text) == json.loads(text)


def test_a_callers_pool_keeps_its_own_json_decoder(queue: MakeQueue) -> None:
    q = _fill(queue)
    seen: dict[int, Any] = {}

    def handler(job: Job[Any]) -> None:
        seen[job.id] = job.payload

    def mine(data: str | bytes) -> Any:
        return {"decoded by": "the caller", "value": json.loads(data)}

    async def configure(conn: Any) -> None:
        set_json_loads(mine, conn)

    async def run() -> None:
        async with AsyncConnectionPool(q.target, min_size=1, max_size=3, open=False,
                                       configure=configure) as pool:
            await _drain(Worker(q.mod.DESCRIPTOR, handler, pool=pool, group="work",
                                poll_interval=0.05, listen=False), seen)

    asyncio.run(run())
    assert len(seen) == len(PAYLOADS)
    assert all(p["decoded by"] == "the caller" for p in seen.values())
