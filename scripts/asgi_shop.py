"""The web shop as an ASGI app (Starlette): the app's lifespan runs the shop's queues.

`POST /checkout` (JSON `{"order_id": 1, "email": "ada@example.com"}`) enqueues a checkout in the
request's own transaction; the checkout queue places the order and enqueues its emails, which
the email queue sends; `GET /orders/{id}` shows the order and its emails. The queues are one
inboxgen Service started and stopped by the app's lifespan, on the app's event loop: no second
process, and uvicorn's shutdown (Ctrl-C, SIGTERM) stops them gracefully.

    pip install starlette uvicorn
    inboxgen build specs/ && uvicorn scripts.asgi_shop:app     # from the repository's root

The database is shop.db (SHOP_DATABASE to choose another), created on the first start.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

import shop  # noqa: E402  (the handlers and the schema of scripts/shop.py)

from generated_examples import shop_checkout, shop_emails  # noqa: E402
from inboxgen import Service  # noqa: E402

DATABASE = Path(os.environ.get("SHOP_DATABASE", "shop.db"))

service = Service(DATABASE, name="shop")
service.queue(shop_checkout.DESCRIPTOR, shop.place_order, transactional=True, listen=True)
service.queue(shop_emails.DESCRIPTOR, shop.send_email, listen=True)


@service.on_startup
def migrate() -> None:
    """The tables exist before the queues check them."""
    with contextlib.closing(sqlite3.connect(DATABASE)) as conn:
        shop.create_schema(conn)


@contextlib.asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    await service.start()  # raises, and the app does not start, if a queue cannot
    try:
        yield
    finally:
        await service.shutdown()


async def checkout(request: Request) -> JSONResponse:
    body = await request.json()
    with contextlib.closing(sqlite3.connect(DATABASE)) as conn:
        shop.request_checkout(conn, int(body["order_id"]), str(body["email"]))
    return JSONResponse({"queued": True}, status_code=202)


async def order(request: Request) -> JSONResponse:
    order_id = int(request.path_params["order_id"])
    with contextlib.closing(sqlite3.connect(DATABASE)) as conn:
        placed = conn.execute("SELECT email FROM orders WHERE id = ?", (order_id,)).fetchone()
        emails = conn.execute("SELECT kind, processed_at IS NOT NULL FROM email_jobs "
                              "WHERE order_id = ? ORDER BY id", (order_id,)).fetchall()
    return JSONResponse({"placed": placed is not None,
                         "emails": {kind: "sent" if sent else "waiting" for kind, sent in emails}})


app = Starlette(routes=[Route("/checkout", checkout, methods=["POST"]),
                        Route("/orders/{order_id:int}", order)], lifespan=lifespan)
