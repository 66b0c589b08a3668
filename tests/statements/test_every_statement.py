"""Every statement of a module runs: each example and each layout's module driven once, every
statement it holds executed."""

from __future__ import annotations

import pytest
from dbcases import Layout, MakeQueue, tour

TOURS = [
    pytest.param("sqlite", "reports", None, id="example-reports"),
    pytest.param("sqlite", "shop_emails", None, id="example-shop_emails"),
    pytest.param("sqlite", "shop_checkout", None, id="example-shop_checkout"),
    pytest.param("sqlite", "thumbnails", None, id="example-thumbnails"),
    pytest.param("postgres", "mailer", None, id="example-mailer"),
    pytest.param("postgres", "ledger", None, id="example-ledger"),
    pytest.param("postgres", "chat", None, id="example-chat"),
    pytest.param("postgres", None, Layout("row_lock", group=True, fifo=True, dead="group"),
                 id="postgres-row_lock-fifo-dead_group"),
    pytest.param("postgres", None, Layout("row_lock", dead="table", unique=True),
                 id="postgres-row_lock-dead_table-unique"),
    pytest.param("postgres", None, Layout("row_lock", group=True, count_crashes=True,
                                          dead="group"),
                 id="postgres-row_lock-count_crashes-dead_group"),
    pytest.param("postgres", None, Layout("row_lock", count_crashes=True, dead="table"),
                 id="postgres-row_lock-count_crashes-dead_table"),
    pytest.param("postgres", None, Layout("lease", group=True, fifo=True, dead="group"),
                 id="postgres-lease-fifo-dead_group"),
    pytest.param("postgres", None, Layout("lease", dead="table", unique=True),
                 id="postgres-lease-dead_table-unique"),
    pytest.param("sqlite", None, Layout("lease", group=True, fifo=True, dead="group"),
                 id="sqlite-lease-fifo-dead_group"),
    pytest.param("sqlite", None, Layout("lease", dead="table", unique=True, processed=False),
                 id="sqlite-lease-dead_table-unique"),
    pytest.param("postgres", None, Layout("advisory", group=True, dead="group"),
                 id="postgres-advisory-dead_group"),
    pytest.param("postgres", None, Layout("advisory", dead="table", processed=False),
                 id="postgres-advisory-dead_table"),
    pytest.param("sqlite", None, Layout("advisory", group=True, dead="group"),
                 id="sqlite-advisory-dead_group"),
    pytest.param("sqlite", None, Layout("advisory", dead="table", unique=True),
                 id="sqlite-advisory-dead_table-unique"),
    pytest.param("mysql", "mailer_mariadb", None, id="example-mailer_mariadb"),
    pytest.param("mysql", None, Layout("row_lock", group=True, fifo=True, dead="group"),
                 id="mysql-row_lock-fifo-dead_group"),
    pytest.param("mysql", None, Layout("row_lock", dead="table", unique=True),
                 id="mysql-row_lock-dead_table-unique"),
    pytest.param("mysql", None, Layout("row_lock", group=True, count_crashes=True,
                                       dead="group"),
                 id="mysql-row_lock-count_crashes-dead_group"),
    pytest.param("mysql", None, Layout("row_lock", count_crashes=True, dead="table"),
                 id="mysql-row_lock-count_crashes-dead_table"),
    pytest.param("mysql", None, Layout("lease", group=True, fifo=True, dead="group"),
                 id="mysql-lease-fifo-dead_group"),
    pytest.param("mysql", None, Layout("lease", dead="table", unique=True),
                 id="mysql-lease-dead_table-unique"),
    pytest.param("mysql", None, Layout("advisory", group=True, dead="group"),
                 id="mysql-advisory-dead_group"),
    pytest.param("mysql", None, Layout("advisory", dead="table", processed=False),
                 id="mysql-advisory-dead_table"),
]


@pytest.mark.parametrize(("dialect", "example", "layout"), TOURS)
def test_every_generated_statement_runs_on_the_database(
        queue: MakeQueue, dialect: str, example: str | None, layout: Layout | None) -> None:
    q = queue(dialect, example or layout)
    ran = set(tour(q))
    missing = [name for name, sql in q.mod.STATEMENTS.items() if sql not in ran]
    assert missing == []
