"""inboxgen in the peer benchmark: the runtime, row lock counting every claim (max_attempts = 5
and a dead-letter group), batch 1, every workload."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from inboxgen_bench import InboxgenPeer  # noqa: E402


class InboxgenCountedPeer(InboxgenPeer):
    form = "row_lock_counted"
    group = "jobs"

    @property
    def settings(self) -> str:  # type: ignore[override]
        return (f"Worker(workers=concurrency, batch={self.batch}, listen=True); max_attempts = 5 "
                f"with a dead-letter group, so each claim counts its attempt and commits it "
                f"before the row is locked again (count_crashes); async no-op handler; "
                f"finished rows kept (processed_at)")


PEER = InboxgenCountedPeer()
