"""inboxgen in the peer benchmark: the runtime, row lock, batch 1, every workload."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from inboxgen_bench import InboxgenPeer  # noqa: E402


class InboxgenPeer(InboxgenPeer):
    pass


PEER = InboxgenPeer()
