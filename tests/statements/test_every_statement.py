"""Every statement of a module runs: each example and each layout's module driven once, every
statement it holds executed."""

from __future__ import annotations

import pytest
from dbcases import Layout, MakeQueue, tour

EXAMPLES = [("sqlite", "reports"), ("sqlite", "shop_emails"), ("sqlite", "shop_checkout"),
            ("sqlite", "thumbnails"), ("postgres", "mailer"), ("postgres", "ledger"),
            ("postgres", "chat"), ("mysql", "mailer_mariadb")]
# Every claim form with each dead-letter destination, FIFO groups, unique keys and counted
# crashes where the form has them: on PostgreSQL and MySQL, and on SQLite.
SERVER_LAYOUTS = {
    "row_lock-fifo-dead_group": Layout("row_lock", group=True, fifo=True, dead="group"),
    "row_lock-dead_table-unique": Layout("row_lock", dead="table", unique=True),
    "row_lock-count_crashes-dead_group": Layout("row_lock", group=True, count_crashes=True,
                                                dead="group"),
    "row_lock-count_crashes-dead_table": Layout("row_lock", count_crashes=True, dead="table"),
    "lease-fifo-dead_group": Layout("lease", group=True, fifo=True, dead="group"),
    "lease-dead_table-unique": Layout("lease", dead="table", unique=True),
    "advisory-dead_group": Layout("advisory", group=True, dead="group"),
    "advisory-dead_table": Layout("advisory", dead="table", processed=False),
}
SQLITE_LAYOUTS = {
    "lease-fifo-dead_group": Layout("lease", group=True, fifo=True, dead="group"),
    "lease-dead_table-unique": Layout("lease", dead="table", unique=True, processed=False),
    "advisory-dead_group": Layout("advisory", group=True, dead="group"),
    "advisory-dead_table-unique": Layout("advisory", dead="table", unique=True),
}
TOURS = [
    *(pytest.param(dialect, name, None, id=f"example-{name}") for dialect, name in EXAMPLES),
    *(pytest.param(dialect, None, layout, id=f"{dialect}-{name}")
      for dialect, layouts in (("postgres", SERVER_LAYOUTS), ("sqlite", SQLITE_LAYOUTS),
                               ("mysql", SERVER_LAYOUTS))
      for name, layout in layouts.items()),
]


@pytest.mark.parametrize(("dialect", "example", "layout"), TOURS)
def test_every_generated_statement_runs_on_the_database(
        queue: MakeQueue, dialect: str, example: str | None, layout: Layout | None) -> None:
    q = queue(dialect, example or layout)
    ran = set(tour(q))
    missing = [name for name, sql in q.mod.STATEMENTS.items() if sql not in ran]
    assert missing == []
