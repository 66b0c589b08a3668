"""A spent job whose dead letters go to a table leaves the queue in the statement that puts it
there, on every form and handler kind: under PostgreSQL's pipelined row lock the copy and the
delete once came apart (the delete never ran, the job was taken again and again, and each
round's other settlements were lost with it); a SMALLINT attempt column made the lease's move
fail to prepare, so the worker never started."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from dbcases import MakeQueue

from inboxgen import Job, Worker

pytestmark = pytest.mark.usefixtures("log_inboxgen")

_DDL = """
CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    attempt {attempt} NOT NULL DEFAULT 1,
    {lease}payload BYTEA NOT NULL
);
CREATE TABLE jobs_dead (
    id BIGINT PRIMARY KEY,
    attempt {attempt} NOT NULL,
    {lease}payload BYTEA NOT NULL
);
"""
_SPEC = """
table = "jobs"
dialect = "postgres"
{top}
[columns]
id = {{ role = "id", generated = true }}
attempt = {{ role = "attempt", generated = true }}
{lease_role}payload = "payload"

[runtime]
max_attempts = 2

[dead_letter]
table = "jobs_dead"
"""


def _queue(queue: MakeQueue, *, form: str, attempt: str = "INTEGER",
           count_crashes: bool | None = None) -> Any:
    lease = form == "lease"
    top = f'claim = "{form}"\n' + (f"count_crashes = {str(count_crashes).lower()}\n"
                                   if count_crashes is not None else "")
    return queue("postgres", spec=_SPEC.format(
        top=top, lease_role='locked_until = "locked_until"\n' if lease else ""),
        ddl=_DDL.format(attempt=attempt, lease="locked_until TIMESTAMPTZ NULL,\n    "
                        if lease else ""))


def _drain(q: Any, *, batch: int, transactional: bool = False) -> tuple[list[bytes], Worker]:
    with q.db.transaction() as conn:
        for payload in (b"ok-1", b"fail", b"ok-2", b"ok-3"):
            q.mod.insert(conn, q.mod.NewRow(payload=payload))
    ran: list[bytes] = []

    async def handler(job: Job[bytes]) -> None:
        ran.append(job.payload)
        if job.payload == b"fail":
            raise RuntimeError("the mail server said no")

    def sync_handler(job: Job[bytes]) -> None:
        ran.append(job.payload)
        if job.payload == b"fail":
            raise RuntimeError("the mail server said no")

    worker = Worker(q.mod.DESCRIPTOR, handler if not transactional else sync_handler,
                    database=q.db.database, batch=batch, lease=5, poll_interval=0.05,
                    transactional=transactional, listen=False)

    async def serve() -> None:
        # Until the spent job is dead and the others acked (a retry may wait for a poll).
        await worker.start()
        try:
            deadline = asyncio.get_running_loop().time() + 30
            while (worker.stats.dead_lettered, worker.stats.acked) < (1, 3):
                assert asyncio.get_running_loop().time() < deadline, worker.stats
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)  # a job taken again would show in `ran` meanwhile
        finally:
            await worker.shutdown()

    asyncio.run(serve())
    return ran, worker


@pytest.mark.parametrize("batch", [1, 16])
@pytest.mark.parametrize("count_crashes", [None, False])
def test_row_lock_moves_a_spent_job_to_the_table_once(queue: MakeQueue, batch: int,
                                                      count_crashes: bool | None) -> None:
    q = _queue(queue, form="row_lock", count_crashes=count_crashes)
    ran, worker = _drain(q, batch=batch)
    assert sorted(ran) == [b"fail", b"fail", b"ok-1", b"ok-2", b"ok-3"]
    assert q.db.rows("SELECT payload FROM jobs") == []
    assert q.db.rows("SELECT id, attempt, payload FROM jobs_dead") == [(2, 2, b"fail")] \
        if count_crashes is None else [r[0] for r in q.db.rows("SELECT id FROM jobs_dead")] == [2]
    assert worker.stats.dead_lettered == 1
    assert worker.stats.settlements_lost == 0


@pytest.mark.parametrize("attempt", ["SMALLINT", "INTEGER", "BIGINT"])
@pytest.mark.parametrize("form", ["lease", "advisory", "row_lock"])
def test_any_integer_attempt_column_starts_and_dead_letters(queue: MakeQueue, attempt: str,
                                                            form: str) -> None:
    spec_form = form
    q = _queue(queue, form=spec_form, attempt=attempt) if form != "advisory" else queue(
        "postgres", spec=_SPEC.format(top='claim = "advisory"\nadvisory_key = "job-{id}"\n',
                                      lease_role=""),
        ddl=_DDL.format(attempt=attempt, lease=""))
    ran, worker = _drain(q, batch=4)
    assert sorted(ran) == [b"fail", b"fail", b"ok-1", b"ok-2", b"ok-3"]
    assert q.db.rows("SELECT id, attempt, payload FROM jobs_dead") == [(2, 2, b"fail")]
    assert q.db.rows("SELECT payload FROM jobs") == []
