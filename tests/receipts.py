"""The result class of the typed-result tests (a spec names it `receipts:Receipt`)."""

import msgspec


class Receipt(msgspec.Struct):
    to: str
    cents: int
    tags: list[str] = []
