"""inboxgen in the peer benchmark: the runtime, row lock counting every claim (max_attempts = 5
and a dead-letter group), batch 16 (inboxgen_counted_peer.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from inboxgen_counted_peer import InboxgenCountedPeer  # noqa: E402


class InboxgenCountedB16Peer(InboxgenCountedPeer):
    batch = 16
    workloads = ('W3', 'W4')


PEER = InboxgenCountedB16Peer()
