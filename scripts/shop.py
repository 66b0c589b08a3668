"""The web shop example on SQLite: checkout jobs place orders, email jobs send them.

A checkout handler runs in transactional mode: the order row, an urgent confirmation email and a
review request due in three days are written on the handler's connection, so they commit with
the checkout's ack, or not at all. Run it with `python scripts/shop.py` after `inboxgen build`.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import sqlite3
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from generated_examples import shop_checkout, shop_emails  # noqa: E402
from inboxgen import Job, Outcome, Worker, ack, drop  # noqa: E402
from inboxgen.testing import run_until_idle  # noqa: E402

MIGRATIONS = REPO / "specs" / "migrations" / "shop"
URGENT, ROUTINE = 0, 10


def create_schema(conn: sqlite3.Connection) -> None:
    for migration in sorted(MIGRATIONS.glob("*.sql")):
        conn.executescript(migration.read_text(encoding="utf-8"))


def request_checkout(conn: sqlite3.Connection, order_id: int, email: str) -> None:
    """What the web request does: enqueue the checkout, in the request's transaction."""
    with conn:
        shop_checkout.insert(conn, shop_checkout.NewRow(
            payload={"order_id": order_id, "email": email}))


def place_order(job: Job[Any]) -> Outcome:
    """Write the order and its two emails on the job's connection: they commit with the ack."""
    conn: sqlite3.Connection = job.connection
    order = job.payload
    order_id = int(order["order_id"])
    if conn.execute("SELECT 1 FROM orders WHERE id = ?", (order_id,)).fetchone():
        print(f"checkout {job.id}: order {order_id} was placed already; nothing to do")
        return drop()
    conn.execute("INSERT INTO orders (id, email) VALUES (?, ?)", (order_id, order["email"]))
    if "@" not in order["email"]:
        # Anything but ack rolls back the handler's writes: no order, and no email.
        print(f"checkout {job.id}: order {order_id} failed: {order['email']!r} is no address")
        return drop()
    now = dt.datetime.now(dt.UTC)
    shop_emails.insert_unique(conn, shop_emails.NewRow(
        priority=URGENT, retry_after=now, order_id=order_id, kind="confirmation",
        payload={"to": order["email"], "template": "confirmation", "order": order_id}))
    shop_emails.insert_unique(conn, shop_emails.NewRow(
        priority=ROUTINE, retry_after=now + dt.timedelta(days=3), order_id=order_id,
        kind="review", payload={"to": order["email"], "template": "review", "order": order_id}))
    print(f"checkout {job.id}: placed order {order_id} for {order['email']}")
    return ack()


def send_email(job: Job[Any]) -> Outcome:
    email = job.payload
    print(f"email {job.id}: sent {email['template']} for order {email['order']} "
          f"to {email['to']}")
    return ack()


async def main(database: Path) -> None:
    conn = sqlite3.connect(database)
    create_schema(conn)
    request_checkout(conn, 1, "ada@example.com")
    request_checkout(conn, 2, "not-an-address")
    request_checkout(conn, 1, "ada@example.com")  # the same order twice
    checkout = Worker(shop_checkout.DESCRIPTOR, place_order, database=database,
                      transactional=True, poll_interval=0.05)
    emails = Worker(shop_emails.DESCRIPTOR, send_email, database=database, poll_interval=0.05)
    await run_until_idle(checkout, timeout=30)
    await run_until_idle(emails, timeout=30)
    waiting = conn.execute(
        "SELECT order_id, kind, retry_after FROM email_jobs WHERE processed_at IS NULL "
        "ORDER BY id").fetchall()
    for order_id, kind, due in waiting:
        print(f"waiting: {kind} email for order {order_id}, due {due} UTC")
    orders = conn.execute("SELECT count(*) FROM orders").fetchone()[0]
    print(f"done: {orders} order(s), {checkout.stats.acked} checkout(s) placed, "
          f"{emails.stats.acked} email(s) sent, {len(waiting)} waiting")
    conn.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", type=Path, default=Path("shop.db"),
                        help="SQLite file (created; default shop.db, replaced on each run)")
    args = parser.parse_args()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{args.database}{suffix}").unlink(missing_ok=True)
    asyncio.run(main(args.database))
