"""The fault suite: worker processes on real servers under crashes, restarts and stops, with an
exact ledger of what every delivery committed.

- ``shapes``: the queue tables (one per dialect and claim form), their dead-letter table and the
  ledger table, built into a generated module with ``tests/genutil.py``; ``Target`` enqueues and
  reads the tables back.
- ``child``: a worker process (``python -m tests.faults.child``): a transactional handler writes
  one ledger row per delivery it settles, in the settlement's transaction, and the process appends
  every event (claimed, started, settled, lease lost, exit) to a log of its own, fsynced.
- ``fleet``: the worker processes of a scenario, restarted when they die.
- ``injectors``: the faults (SIGKILL storms, server restarts, terminated sessions, a stopped lease
  holder, SIGTERM under load); every loop is bounded and stops by itself.
- ``checker``: the invariants and the figures of a scenario (lost, duplicated, stranded, ...).
- ``scenario``: runs one scenario end to end and returns its report.
- ``long_profile``: every scenario and form with tens of thousands of jobs, written as markdown.

The short profile (``test_*.py`` here) runs inside the normal ``python3 -m pytest`` run.
"""

from __future__ import annotations

import sys
from pathlib import Path

# genutil, servers and mariadb_server live in tests/ as top-level modules (pytest puts tests/ on
# sys.path); the long profile and the worker processes import this package directly.
_TESTS = str(Path(__file__).resolve().parent.parent)
if _TESTS not in sys.path:
    sys.path.append(_TESTS)
