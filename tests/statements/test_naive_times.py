"""Time columns without a time zone (PostgreSQL TIMESTAMP) hold UTC whatever the session's zone;
a table mixing both kinds of time role is refused at build."""

from __future__ import annotations

import pytest
from dbcases import MakeQueue, at, leased_row, spec_toml

from inboxgen.errors import CheckFailed

# PostgreSQL: a TIMESTAMPTZ retry_after beside TIMESTAMP (without time zone) lease and processed
# columns, which hold UTC; the session runs in Europe/Berlin (UTC+1 in January).
MIXED_SPEC = spec_toml("jobs", {"id": "id generated", "retry_after": "retry_after",
                                "attempt": "attempt generated", "processed_at": "processed_at",
                                "locked_until": "locked_until", "payload": "payload text"})
MIXED_DDL = """
CREATE TABLE jobs (
    id BIGSERIAL PRIMARY KEY,
    retry_after TIMESTAMPTZ NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 1,
    processed_at TIMESTAMP,
    locked_until TIMESTAMP,
    payload TEXT NOT NULL
);
CREATE INDEX jobs_claim ON jobs (retry_after, id);
"""
NAIVE_DDL = MIXED_DDL.replace("TIMESTAMPTZ", "TIMESTAMP")


def test_naive_timestamp_lease_holds_in_a_non_utc_session(queue: MakeQueue) -> None:
    q = queue("postgres", spec=MIXED_SPEC, ddl=NAIVE_DDL)
    conn = q.connect(time_zone="Europe/Berlin")
    row = leased_row(q, conn)
    assert q.claim(conn, now=at(1), limit=10) == []
    conn.commit()
    assert q.settle("finish", conn, row, now=at(5))
    conn.commit()
    stored = q.row(q.id_of(row))
    assert stored is not None
    assert stored["processed_at"] == at(5).replace(tzinfo=None)  # UTC, as the column holds


def test_mixed_time_role_types_are_refused_at_build(queue: MakeQueue) -> None:
    # `now` is bound once per statement: a TIMESTAMPTZ beside TIMESTAMP time roles would be read
    # in the session's time zone, so the build refuses the mix.
    with pytest.raises(CheckFailed, match=r'"jobs.processed_at" is TIMESTAMP but '
                                          r'"jobs.retry_after" \(retry_after\) is TIMESTAMPTZ'):
        queue("postgres", spec=MIXED_SPEC, ddl=MIXED_DDL)
