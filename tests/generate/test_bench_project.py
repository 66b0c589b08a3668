"""The benchmark's inboxgen project (bench/peers) builds from its specs: its committed modules are
what `inboxgen build` writes today."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "peers"


def test_bench_modules_are_up_to_date() -> None:
    result = subprocess.run([sys.executable, "-m", "inboxgen", "verify"], cwd=BENCH,
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "verified 4 module(s)" in result.stdout
