"""inboxgen in the peer benchmark on SQLite: InboxgenSqlitePeer, batch 16 (inboxgen_sqlite.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from inboxgen_sqlite import InboxgenSqlitePeer  # noqa: E402


class Peer(InboxgenSqlitePeer):
    batch = 16
    workloads = ('W3', 'W4')


PEER = Peer()
