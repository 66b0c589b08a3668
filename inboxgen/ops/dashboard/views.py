"""What a page shows of a reading: a table's lines as `inboxgen status` prints them, its notes,
where its dead letters are kept, and times and payloads, each shown one way on every page."""

from __future__ import annotations

import datetime as _dt
import json
from types import ModuleType
from typing import Any

import attrs
import msgspec
from markupsafe import Markup

from inboxgen.ops import status
from inboxgen.ops.status import TableStatus

# The columns of a table's lines, in order.
COLUMNS = ("ready", "scheduled", "in_work", "finished", "dead", "oldest_ready")
PAYLOAD_SHOWN = 4000  # characters of a payload on the page
_HEX_LINE = 16  # bytes per line of a payload shown in hex


def rows(t: TableStatus) -> list[dict[str, Any]]:
    """The table's lines as `inboxgen status` prints them, each cell as (column, text): a
    dead-letter group's rows are all dead; the dead-letter table has a line of its own. `waited`
    is the oldest ready job's wait in seconds, unrounded for scripts (data-seconds)."""
    out = []
    for g in t.groups:
        dead = bool(g["dead"])
        texts = (["-", "-", _n(g["in_work"]), _n(g["finished"]), str(g["ready"] + g["scheduled"]),
                  ""] if dead else
                 [str(g["ready"]), str(g["scheduled"]), _n(g["in_work"]), _n(g["finished"]), "",
                  status._age(g["oldest_ready_waited_s"])])
        out.append({"group": "" if g["group"] is None else str(g["group"]), "is_dead": dead,
                    "cells": list(zip(COLUMNS, texts, strict=True)),
                    "waited": None if dead else g["oldest_ready_waited_s"],
                    "paused": bool(g.get("paused")) and not dead})
    if not t.groups:
        out.append({"group": "", "is_dead": False, "waited": None, "paused": False,
                    "cells": list(zip(COLUMNS, ["0", "0", "0", "", "", ""], strict=True))})
    if t.dead_table is not None:
        out.append({"group": "(dead-letter table)", "is_dead": True, "waited": None,
                    "paused": False,
                    "cells": list(zip(COLUMNS, ["", "", "", "", str(t.dead_table), ""],
                                      strict=True))})
    return out


def _n(value: int | None) -> str:
    return "?" if value is None else str(value)  # the database cannot tell


def notes(t: TableStatus, now: _dt.datetime) -> list[str]:
    out = []
    if t.limits:
        out.append(status.limits_words(t.limits))
    if t.advisory_locks is not None:
        out.append(f"{t.advisory_locks} advisory lock(s) held in the database (every table's)")
    if t.oldest_transaction_s is not None:
        out.append(f"oldest open transaction in the database: "
                   f"{status._age(t.oldest_transaction_s)}")
    if t.dead_tuples is not None:
        out.append(status._health(t, now).removeprefix(f"{t.table}: "))
    return out


def pause_state(t: TableStatus) -> str | None:
    """What the table's pause table says, as a page says it; None: it has none."""
    if t.paused is None:
        return None
    if not t.paused:
        return "running"
    return f"{status.paused_words(t.paused)}: no worker claims those jobs"


def dead_kept(module: ModuleType) -> str | None:
    """Where the table's dead letters are kept, as a page says it; None: nowhere."""
    d = module.DESCRIPTOR
    if d.dead_letter_group is not None:
        return f"in group {d.dead_letter_group}"
    if d.dead_letter_table is not None:
        return f"in table {d.dead_letter_table}"
    return None


# -- times ---------------------------------------------------------------------------------------


def shown_time(value: _dt.datetime) -> str:
    """A time as every page shows it: `2026-12-03 08:32:53 UTC` (a time without a zone is the
    database's UTC)."""
    if value.tzinfo is not None:
        value = value.astimezone(_dt.UTC)
    return value.strftime("%Y-%m-%d %H:%M:%S UTC")


def when(value: _dt.datetime | None) -> Markup:
    """The template filter: a <time> element showing `value` as `shown_time` does, its exact
    value (ISO 8601) in its datetime attribute; nothing for None."""
    if value is None:
        return Markup("")
    exact = value if value.tzinfo is None else value.astimezone(_dt.UTC)
    return Markup('<time datetime="{}">{}</time>').format(exact.isoformat(), shown_time(value))


# -- payloads ------------------------------------------------------------------------------------


@attrs.frozen
class Payload:
    """A payload as a page shows it: its text, how it was made (`kind`: json, text, utf-8, hex,
    repr or none) and a few words saying so."""

    text: str
    kind: str
    note: str


def shown_payload(payload: Any, *, codec: str | None, as_stored: bool) -> Payload:
    """JSON as indented JSON, text as it is, bytes as their UTF-8 text where they are that, else
    in hex (16 bytes a line); a Python repr only for a value none of these can show.
    `as_stored`: the payload did not decode, so it is the value the driver returned (text in a
    JSON column is shown as the text it is, not as a JSON string)."""
    if payload is None:
        return Payload("", "none", "no payload")
    if isinstance(payload, bytes | bytearray | memoryview):
        data = bytes(payload)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is not None and all(c.isprintable() or c in "\n\r\t" for c in text):
            return Payload(_cut(text), "utf-8", "bytes, shown as their UTF-8 text")
        lines = [data[i:i + _HEX_LINE].hex(" ") for i in range(0, len(data), _HEX_LINE)]
        return Payload(_cut("\n".join(lines)), "hex", "bytes, not UTF-8 text: shown in hex")
    if isinstance(payload, str) and (codec != "json" or as_stored):
        return Payload(_cut(payload), "text", "text")
    try:
        text = json.dumps(msgspec.to_builtins(payload), indent=2, ensure_ascii=False)
    except (TypeError, ValueError):
        return Payload(_cut(repr(payload)), "repr", "shown as Python shows it")
    return Payload(_cut(text), "json", "JSON")


def shown_progress(progress: Any) -> str | None:
    """A job's last reported progress as a page says it: "40%: resizing 3 of 8" (JobState.progress,
    as job.progress() writes it; anything else as it is)."""
    if progress is None:
        return None
    if isinstance(progress, dict) and isinstance(progress.get("fraction"), int | float):
        note = str(progress.get("note") or "")
        return f"{progress['fraction'] * 100:.0f}%" + (f": {note}" if note else "")
    return _cut(str(progress))


def shown_error(error: str | None) -> str | None:
    """Why a payload does not decode (JobState.payload_error), cut as a payload is."""
    return None if error is None else _cut(error)


def _cut(text: str) -> str:
    if len(text) > PAYLOAD_SHOWN:
        return text[:PAYLOAD_SHOWN] + f"… ({len(text) - PAYLOAD_SHOWN} more characters)"
    return text


__all__ = ["COLUMNS", "Payload", "dead_kept", "notes", "rows", "shown_error", "shown_progress",
           "shown_payload", "shown_time", "when"]
