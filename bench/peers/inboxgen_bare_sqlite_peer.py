"""inboxgen in the peer benchmark on SQLite: BareSqlitePeer, batch 1 (inboxgen_sqlite.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from inboxgen_sqlite import BareSqlitePeer  # noqa: E402


class Peer(BareSqlitePeer):
    batch = 1


PEER = Peer()
