"""The shop example (SQLite): a transactional checkout commits the order and its emails together,
and an urgent email goes before a routine one."""

from __future__ import annotations

import asyncio
import datetime as dt
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from dbcases import parse_sqlite_time, sqlite_rows, sqlite_time
from semantics_util import UTC, fake_clock, load_shop

from inboxgen import Job, Outcome, Worker
from inboxgen.testing import run_until_idle

pytestmark = pytest.mark.usefixtures("log_inboxgen")


def test_shop_checkout_order_and_emails_commit_together(sqlite_path: Path) -> None:
    shop = load_shop()
    db = sqlite3.connect(sqlite_path)
    shop.create_schema(db)
    shop.request_checkout(db, 1, "ada@example.com")
    shop.request_checkout(db, 2, "not-an-address")  # fails after writing its order
    shop.request_checkout(db, 1, "ada@example.net")  # the same order placed twice
    db.close()
    clock = fake_clock()
    sent: list[tuple[str, str, int]] = []

    def send(job: Job[Any]) -> Outcome:
        sent.append((job.payload["template"], job.payload["to"], job.payload["order"]))
        outcome: Outcome = shop.send_email(job)
        return outcome

    checkout = Worker(shop.shop_checkout.DESCRIPTOR, shop.place_order, database=sqlite_path,
                      transactional=True, clock=clock)
    emails = Worker(shop.shop_emails.DESCRIPTOR, send, database=sqlite_path, clock=clock)

    async def main() -> None:
        await run_until_idle(checkout, timeout=20)
        placed_at = dt.datetime.now(UTC)
        # Order 1 and its two emails committed with the checkout; order 2 left nothing behind.
        assert sqlite_rows(sqlite_path, "SELECT id, email FROM orders") == [
            (1, "ada@example.com")]
        queued = sqlite_rows(sqlite_path, "SELECT order_id, kind, priority, retry_after, "
                                          "processed_at FROM email_jobs ORDER BY id")
        assert [(o, k, p, done) for o, k, p, _, done in queued] == [
            (1, "confirmation", shop.URGENT, None), (1, "review", shop.ROUTINE, None)]
        review_due = parse_sqlite_time(queued[1][3])
        three_days = placed_at + dt.timedelta(days=3)
        assert three_days - dt.timedelta(minutes=1) < review_due <= three_days
        assert sqlite_rows(sqlite_path, "SELECT count(*) FROM checkout_jobs") == [(0,)]
        assert (checkout.stats.acked, checkout.stats.dropped) == (1, 2)

        # The confirmation is sent; the review request waits for its day.
        await run_until_idle(emails, timeout=20)
        assert sent == [("confirmation", "ada@example.com", 1)]
        rows = sqlite_rows(sqlite_path, "SELECT kind, processed_at, retry_after FROM email_jobs "
                                        "ORDER BY id")
        assert rows[0][:2] == ("confirmation", sqlite_time(clock.now()))
        assert rows[1] == ("review", None, queued[1][3])

        # Three days on, the review request goes too, and nothing for the second placement.
        clock.advance(3 * 24 * 3600)
        emails2 = Worker(shop.shop_emails.DESCRIPTOR, send, database=sqlite_path, clock=clock)
        await run_until_idle(emails2, timeout=20)

    asyncio.run(main())
    assert sent == [("confirmation", "ada@example.com", 1), ("review", "ada@example.com", 1)]
    assert sqlite_rows(sqlite_path, "SELECT count(*) FROM email_jobs "
                                    "WHERE processed_at IS NULL") == [(0,)]


def test_shop_urgent_email_goes_before_routine(sqlite_path: Path) -> None:
    shop = load_shop()
    emails_mod = shop.shop_emails
    db = sqlite3.connect(sqlite_path)
    shop.create_schema(db)
    clock = fake_clock()
    now = clock.now()
    with db:
        db.execute("INSERT INTO orders (id, email) VALUES (7, 'ada@example.com')")
        # The routine email is older and due earlier, and enqueued first: urgency still wins.
        emails_mod.insert(db, emails_mod.NewRow(
            priority=shop.ROUTINE, retry_after=now - dt.timedelta(hours=1), order_id=7,
            kind="newsletter", payload={"to": "ada@example.com", "template": "newsletter",
                                        "order": 7}))
        emails_mod.insert(db, emails_mod.NewRow(
            priority=shop.URGENT, retry_after=now, order_id=7, kind="password-reset",
            payload={"to": "ada@example.com", "template": "password-reset", "order": 7}))
    db.close()
    order: list[str] = []

    def send(job: Job[Any]) -> None:
        order.append(job.payload["template"])

    worker = Worker(emails_mod.DESCRIPTOR, send, database=sqlite_path, clock=clock)
    asyncio.run(run_until_idle(worker, timeout=20))
    assert order == ["password-reset", "newsletter"]
