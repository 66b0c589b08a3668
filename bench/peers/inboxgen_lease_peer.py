"""inboxgen in the peer benchmark: the runtime, lease, batch 1 (inboxgen_bench.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from inboxgen_bench import InboxgenPeer  # noqa: E402


class InboxgenLeasePeer(InboxgenPeer):
    form = 'lease'
    workloads = ('W3', 'W4')


PEER = InboxgenLeasePeer()
