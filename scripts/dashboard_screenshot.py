"""Remake docs/dashboard.png: the dashboard of the shop example's two queues on SQLite, while a
scripted backlog drains, taken in a headless Chromium (Debian's chromium and chromium-driver).

    python scripts/dashboard_screenshot.py [--out docs/dashboard.png]

The jobs are enqueued, claimed and settled by the generated functions (no worker runs), with a
few emails retried later and a few dead-lettered, so every count has something to show.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime as dt
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import uvicorn
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

import shop  # noqa: E402  (the shop's schema)

from generated_examples import shop_checkout, shop_emails  # noqa: E402
from inboxgen.ops import dashboard  # noqa: E402


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def backlog(conn: sqlite3.Connection) -> None:
    """Checkouts and their emails, some due later."""
    now = utcnow()
    with conn:
        shop_checkout.insert_many(conn, [shop_checkout.NewRow(
            payload={"order_id": i, "email": f"customer{i}@example.com"}) for i in range(1, 41)])
        shop_emails.insert_many(conn, [shop_emails.NewRow(
            priority=i % 2, retry_after=now - dt.timedelta(seconds=90 - i),
            order_id=i, kind="confirmation", payload={"to": f"customer{i}@example.com"})
            for i in range(1, 61)])
        shop_emails.insert_many(conn, [shop_emails.NewRow(
            priority=0, retry_after=now + dt.timedelta(hours=1), order_id=i, kind="review",
            payload={"to": f"customer{i}@example.com"}) for i in range(1, 9)])


def step(conn: sqlite3.Connection, n: int) -> None:
    """One round of work: a few checkouts done, a few emails sent, retried or dead-lettered;
    some claims are left in work under their lease."""
    now = utcnow()
    until = now + dt.timedelta(minutes=5)
    with conn:
        for row in shop_checkout.claim(conn, now=now, locked_until=until, limit=3):
            shop_checkout.finish(conn, id=row.id, locked_until=row.locked_until)
        for i, row in enumerate(shop_emails.claim(conn, now=now, locked_until=until, limit=5)):
            lease = {"id": row.id, "locked_until": row.locked_until, "attempt": row.attempt}
            if i == 4 and n % 3 == 0:
                shop_emails.dead_letter(conn, **lease)
            elif i == 3 and n % 2 == 0:
                shop_emails.retry_after(conn, **lease, retry_after=now + dt.timedelta(minutes=2))
            elif i < 3:
                shop_emails.finish(conn, **lease, now=now)
        if n % 2:
            shop_checkout.claim(conn, now=now, locked_until=until, limit=1)  # left in work


@contextlib.contextmanager
def serving(app: object, port: int) -> Iterator[str]:
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.should_exit = True
        thread.join()


def main(out: Path, port: int) -> None:
    out = out.resolve()
    with tempfile.TemporaryDirectory() as folder, contextlib.chdir(folder):
        database = Path("shop.db")  # the page names the database as it was given
        conn = sqlite3.connect(database)
        shop.create_schema(conn)
        backlog(conn)
        app = dashboard.app(str(database), [shop_checkout, shop_emails], sample_every=0.25,
                            refresh=0)
        options = webdriver.ChromeOptions()
        options.binary_location = "/usr/bin/chromium"
        for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", "--no-first-run", "--window-size=1000,1000",
                    f"--user-data-dir={Path(folder) / 'profile'}"):
            options.add_argument(arg)
        with serving(app, port) as url:
            browser = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
            try:
                browser.get(url)  # starts the sampler
                for n in range(9):
                    time.sleep(0.6)
                    step(conn, n)
                time.sleep(0.6)
                browser.get(url)
                # The whole page, below the window's fold too.
                height = browser.execute_script("return document.documentElement.scrollHeight")
                shot = browser.execute_cdp_cmd("Page.captureScreenshot", {
                    "format": "png", "captureBeyondViewport": True,
                    "clip": {"x": 0, "y": 0, "width": 1000, "height": height + 16, "scale": 1}})
                out.write_bytes(base64.b64decode(shot["data"]))
            finally:
                browser.quit()
                conn.close()
    print(f"wrote {out}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "dashboard.png")
    parser.add_argument("--port", type=int, default=8093)
    args = parser.parse_args()
    main(args.out, args.port)
