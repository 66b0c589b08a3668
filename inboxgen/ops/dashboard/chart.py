"""The chart of a table's counts over the samples kept: polylines scaled into an inline SVG,
drawn on the server (no JavaScript)."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from typing import Any

from inboxgen.ops import status
from inboxgen.ops.dashboard.board import Sample
from inboxgen.ops.dashboard.views import shown_time

# The counts charted, in the order of the table's columns, with their colours.
SERIES = (("ready", "#2b6cb0"), ("scheduled", "#805ad5"), ("in_work", "#dd6b20"),
          ("finished", "#38a169"), ("dead", "#e53e3e"))

# The chart's drawing area inside its SVG (user units).
_W, _H, _LEFT, _RIGHT, _TOP, _BOTTOM = 640, 170, 44, 630, 10, 146


def chart(history: Sequence[Sample], table: str) -> dict[str, Any]:
    """Polylines of the table's counts over the samples kept, scaled into the SVG."""
    samples = [s for s in history if table in s.counts]
    if not samples:
        return {"lines": [], "samples": 0}
    start, end = samples[0].at, samples[-1].at
    span = max((end - start).total_seconds(), 0.0)
    top = max([1] + [v for s in samples for v in s.counts[table].values() if v is not None])

    def x(at: _dt.datetime) -> float:
        if span == 0:
            return float(_RIGHT)
        return _LEFT + (at - start).total_seconds() / span * (_RIGHT - _LEFT)

    def y(value: int) -> float:
        return _BOTTOM - value / top * (_BOTTOM - _TOP)

    lines = []
    for name, colour in SERIES:
        points = [(x(s.at), y(v)) for s in samples if (v := s.counts[table].get(name)) is not None]
        if points:
            last = samples[-1].counts[table].get(name)
            lines.append({"name": name.replace("_", " "), "colour": colour, "last": last,
                          "points": " ".join(f"{px:.1f},{py:.1f}" for px, py in points),
                          "dot": points[-1]})
    return {"lines": lines, "samples": len(samples), "top": top, "width": _W, "height": _H,
            "left": _LEFT, "right": _RIGHT, "plot_top": _TOP, "bottom": _BOTTOM,
            "start": shown_time(start), "end": shown_time(end),
            "span": status._age(span) if span else ""}
