"""A failed delivery as the table's `error` column keeps it: the exception's type and message
first, so that a cut keeps them, then the frames nearest the raise, most recent last (as
Python prints them). The generated module cuts the text to what the column holds."""

from __future__ import annotations

import traceback

# The message's share of the text, and how many frames follow it: enough to say where, short
# enough that a job failing on every attempt rewrites little.
_MESSAGE_CHARS = 1000
_FRAMES = 8


def failure_text(err: BaseException) -> str:
    """`err` written down: "ValueError: bad address", then its last frames."""
    # NUL written out before the cut (PostgreSQL's text holds none; values.clipped would).
    head = "".join(traceback.format_exception_only(err)).strip().replace("\x00", "\\x00")
    if len(head) > _MESSAGE_CHARS:
        head = head[:_MESSAGE_CHARS - 3] + "..."
    if err.__traceback__ is None:
        return head
    frames = "".join(traceback.format_tb(err.__traceback__, limit=-_FRAMES)).rstrip()
    return f"{head}\n{frames}"
