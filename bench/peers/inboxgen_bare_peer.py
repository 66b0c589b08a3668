"""inboxgen in the peer benchmark: bare loop, row lock, batch 1 (inboxgen_bench.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from inboxgen_bench import BarePeer  # noqa: E402


class InboxgenBarePeer(BarePeer):
    pass


PEER = InboxgenBarePeer()
