"""The helpers users test with: FakeClock starts at the real time, so a row the database made
due "now" is due on it; the pytest fixtures come with the installed package."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
from dbcases import MakeQueue, spec_toml

from inboxgen import Job, Worker
from inboxgen.testing import FakeClock

DDL = """
CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    retry_after TIMESTAMPTZ NOT NULL DEFAULT now(),
    payload JSONB NOT NULL
);
"""
SPEC = spec_toml("jobs", {"id": "id generated", "retry_after": "retry_after generated",
                          "payload": "payload"})


def test_a_row_due_now_is_delivered_on_a_default_fake_clock(
        queue: MakeQueue, inboxgen_clock: FakeClock,
        inboxgen_drain: Callable[..., None]) -> None:
    q = queue("postgres", spec=SPEC, ddl=DDL)
    module, dsn = q.mod, q.target
    with psycopg.connect(dsn) as conn:
        module.insert(conn, module.NewRow(payload={"to": "ada"}))  # due at the server's now()
    seen: list[Any] = []

    def handler(job: Job[Any]) -> None:
        seen.append(job.payload)

    worker = Worker(module.DESCRIPTOR, handler, database=dsn, clock=inboxgen_clock,
                    listen=False)
    inboxgen_drain(worker, timeout=20)
    assert seen == [{"to": "ada"}]
