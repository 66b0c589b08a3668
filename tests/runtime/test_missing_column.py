"""The mailer (PostgreSQL / MariaDB, row lock): a table missing a column stops the worker's start,
naming the worker, the table and the statement."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from dbcases import Db
from dbcases import example_module as example

import inboxgen
from inboxgen import Job, Worker
from inboxgen.testing import run_until_idle

pytestmark = pytest.mark.usefixtures("log_inboxgen")


MAILER = {"postgres": "mailer", "mysql": "mailer_mariadb"}
MAILER_WITHOUT_ATTEMPT = {  # the mailer's table (and claim index), its attempt column missing
    "postgres": "CREATE TABLE email_jobs (job_id BIGSERIAL PRIMARY KEY, name TEXT NOT NULL, "
                "payload BYTEA NOT NULL)",
    "mysql": "CREATE TABLE email_jobs (job_id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, "
             "name VARCHAR(191) NOT NULL, payload LONGBLOB NOT NULL, "
             "KEY email_jobs_claim (name, job_id))",
}


def test_mailer_missing_column_stops_startup_naming_worker_table_statement(db: Db) -> None:
    mailer = example(MAILER[db.dialect])
    db.exec(MAILER_WITHOUT_ATTEMPT[db.dialect])
    db.exec("INSERT INTO email_jobs (name, payload) VALUES ('emails', 'hi')")
    calls: list[Any] = []

    async def send(job: Job[bytes]) -> None:
        calls.append(job.id)

    worker = Worker(mailer.DESCRIPTOR, send, database=db.database, group="emails")
    with pytest.raises(inboxgen.SchemaError) as caught:
        asyncio.run(worker.start())
    err = caught.value
    assert isinstance(err, inboxgen.WorkerError) and isinstance(err, inboxgen.InboxgenError)
    assert (err.worker, err.table, err.statement) == ("email_jobs:emails", "email_jobs", "CLAIM")
    text = str(err)
    for part in ("email_jobs:emails", "email_jobs", "CLAIM", "attempt"):
        assert part in text
    assert not worker.started

    # run_until_idle stops the same way, and nothing was ever claimed.
    worker2 = Worker(mailer.DESCRIPTOR, send, database=db.database, group="emails")
    with pytest.raises(inboxgen.SchemaError, match="CLAIM"):
        asyncio.run(run_until_idle(worker2, timeout=20))
    assert calls == [] and worker2.stats.delivered == 0
    assert db.rows("SELECT job_id, name FROM email_jobs") == [(1, "emails")]
