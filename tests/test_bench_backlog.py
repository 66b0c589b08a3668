"""bench/backlog.py runs in its smallest configuration and prints its table: a row per backlog
size with each figure's ratio to the empty table, and the claim index it measured. No figure is
checked: they depend on the machine."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "backlog.py"
SMALLEST = ["--forms", "row_lock,lease", "--kinds", "finished", "--sizes", "0,300",
            "--jobs", "20", "--budget", "10"]


def run(*args: str) -> str:
    result = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True,
                            text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def rows(out: str, form: str) -> dict[int, list[str]]:
    """The cells of each backlog size's row of `form`."""
    found = {}
    for line in out.splitlines():
        parts = re.split(r"\s{2,}", line.strip())
        if parts[0] == form:
            found[int(parts[2].replace(",", ""))] = parts[3:]
    return found


def test_sqlite_table_has_ratios_to_the_empty_table() -> None:
    out = run("--dialects", "sqlite", *SMALLEST)
    assert "round p50 ms" in out and "drain jobs/s" in out
    table = rows(out, "lease")
    assert sorted(table) == [0, 300], out
    assert all(c == "-" or c.endswith("(1.00x)") for c in table[0]), out
    assert all(re.fullmatch(r"-|[\d,.]+ \([\d.]+x\)", c) for c in table[300][:4]), out
    assert "claim index (finished): CREATE INDEX" in out
    assert "row_lock" not in out.split("round p50 ms")[1]  # SQLite has no row lock


def test_postgres_table_and_continuous_drain(pg_dsn: str) -> None:
    out = run("--dialects", "postgres", "--postgres", pg_dsn, *SMALLEST)
    for form in ("row_lock", "lease"):
        table = rows(out, form)
        assert sorted(table) == [0, 300], out
        assert table[0][-1].endswith("(1.00x)"), out  # buffers per claim, from EXPLAIN
        assert re.fullmatch(r"[\d,.]+ \([\d.]+x\)", table[300][-1]), out

    out = run("--dialects", "postgres", "--postgres", pg_dsn, "--forms", "row_lock",
              "--kinds", "finished", "--continuous", "100")
    assert "100 jobs drained;" in out, out
    assert re.search(r"per tenth, jobs/s: [\d,]+ \(1\.00x\)(, [\d,]+ \([\d.]+x\)){9}$", out,
                     re.M), out
    for when in ("before:", "after the drain:", "after VACUUM:"):
        assert re.search(rf"{when}\s+total [\d.]+ MB .* dead [\d,]+; updates .*HOT", out), out
