"""An advisory worker remembers the rows it settled, to skip stale candidates without a round
trip; a new row that reuses a settled id (SQLite reuses the largest rowid) is still served."""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any

from dbcases import MakeQueue, spec_toml

from inboxgen import Job, Worker
from inboxgen.testing import FakeClock, run_until_idle

SPEC = spec_toml("jobs", {"id": "id", "attempt": "attempt generated", "payload": "payload text"},
                 dialect="sqlite", advisory_key="job-{id}")
DDL = """
CREATE TABLE jobs (
    id INTEGER PRIMARY KEY,
    attempt INTEGER NOT NULL DEFAULT 1,
    payload TEXT NOT NULL
);
"""


def test_a_new_row_reusing_a_settled_id_is_delivered(queue: MakeQueue) -> None:
    q = queue("sqlite", spec=SPEC, ddl=DDL)
    module: Any = q.mod
    path = q.target
    db = sqlite3.connect(path)
    seen: list[tuple[int, str]] = []

    def handle(job: Job[str]) -> None:
        seen.append((job.id, job.payload))

    worker = Worker(module.DESCRIPTOR, handle, database=path, workers=2, clock=FakeClock())

    async def main() -> None:
        await worker.start()
        try:
            module.insert(db, module.NewRow(id=7, payload="first"))
            db.commit()
            worker.wake()
            await run_until_idle(worker)
            module.insert(db, module.NewRow(id=7, payload="second"))  # the same id again
            db.commit()
            worker.wake()
            await run_until_idle(worker)
        finally:
            await worker.shutdown()

    asyncio.run(main())
    assert seen == [(7, "first"), (7, "second")]
