"""inboxgen in the peer benchmark: bare loop, lease, batch 16 (inboxgen_bench.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from inboxgen_bench import BarePeer  # noqa: E402


class InboxgenBareLeaseB16Peer(BarePeer):
    form = 'lease'
    batch = 16


PEER = InboxgenBareLeaseB16Peer()
