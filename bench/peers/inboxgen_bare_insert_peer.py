"""inboxgen in the peer benchmark: the enqueue statement without the generated function, W1
(inboxgen_bench.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from inboxgen_bench import BareInsertPeer  # noqa: E402


class InboxgenBareInsertPeer(BareInsertPeer):
    pass


PEER = InboxgenBareInsertPeer()
