"""inboxgen in the peer benchmark: bare loop, row lock, batch 1, pipelined (inboxgen_bench.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from inboxgen_bench import BarePeer  # noqa: E402


class InboxgenBarePipelinedPeer(BarePeer):
    pipelined = True


PEER = InboxgenBarePipelinedPeer()
