"""Async handlers run on the event loop, sync handlers in a thread."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
from dbcases import example_module as example
from dbcases import sqlite_db, sqlite_rows
from semantics_util import fake_clock, migration_sql

from inboxgen import Job, Outcome, Worker, ack
from inboxgen.testing import run_until_idle

pytestmark = pytest.mark.usefixtures("log_inboxgen")


def test_async_handler_runs_on_the_event_loop(sqlite_path: Path) -> None:
    reports = example("reports")
    db = sqlite_db(sqlite_path, migration_sql("reports"))
    reports.insert_many(db, [reports.NewRow(payload=b"a"), reports.NewRow(payload=b"b")])
    seen: list[tuple[bytes, bool]] = []

    async def render(job: Job[bytes]) -> Outcome:
        await asyncio.sleep(0)
        seen.append((job.payload, threading.current_thread() is threading.main_thread()))
        return ack()

    worker = Worker(reports.DESCRIPTOR, render, database=sqlite_path, clock=fake_clock())
    asyncio.run(run_until_idle(worker, timeout=20))
    assert seen == [(b"a", True), (b"b", True)]
    assert worker.stats.acked == 2
    assert sqlite_rows(sqlite_path, "SELECT count(*) FROM report_jobs") == [(0,)]


def test_sync_handler_runs_in_a_thread(sqlite_path: Path) -> None:
    reports = example("reports")
    db = sqlite_db(sqlite_path, migration_sql("reports"))
    reports.insert_many(db, [reports.NewRow(payload=b"a"), reports.NewRow(payload=b"b")])
    seen: list[tuple[bytes, bool]] = []

    def render(job: Job[bytes]) -> Outcome | None:
        assert job.connection is None  # not transactional: no connection handed over
        time.sleep(0.01)  # blocking work does not stall the event loop
        seen.append((job.payload, threading.current_thread() is threading.main_thread()))
        return None if job.payload == b"a" else ack()  # None means ack

    worker = Worker(reports.DESCRIPTOR, render, database=sqlite_path, clock=fake_clock())
    asyncio.run(run_until_idle(worker, timeout=20))
    assert seen == [(b"a", False), (b"b", False)]
    assert worker.stats.acked == 2
    assert sqlite_rows(sqlite_path, "SELECT count(*) FROM report_jobs") == [(0,)]
