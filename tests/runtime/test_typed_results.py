"""A result column typed with a class of the service's own (`type = "module:Class"`): a
handler's result must fit the class (an instance, or a value whose JSON the class takes), else
its delivery fails, saying why, and is retried; state() gives instances back, and JSON the
class refuses (written before the class changed) as parsed JSON. On every claim form and
dialect; the module passes mypy --strict."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from dbcases import CLAIM_FORMS, Layout, MakeQueue
from receipts import Receipt
from semantics_util import fake_clock, serve_until

from inboxgen import Job, Worker
from runtime.test_results import enqueue, states_of

pytestmark = pytest.mark.usefixtures("log_inboxgen")

JSON = {"postgres": "JSONB", "mysql": "JSON", "sqlite": "TEXT"}
TYPED = "receipts:Receipt"


def _layout(dialect: str, form: str = "lease") -> Layout:
    return Layout(form=form, result=JSON[dialect], result_type=TYPED, error="TEXT")


@dataclasses.dataclass
class Letter:  # another class with the receipt's fields: its JSON fits
    to: str
    cents: int


@pytest.mark.parametrize("batch", [1, 16])
@pytest.mark.parametrize(("dialect", "form"), CLAIM_FORMS)
def test_results_come_back_as_instances_of_the_class(dialect: str, form: str, batch: int,
                                                    queue: MakeQueue) -> None:
    q = queue(dialect, _layout(dialect, form))
    ids = enqueue(q, ["instance", "dict", "letter", "nothing"])
    clock = fake_clock()

    def handle(job: Job[str]) -> Any:
        return {"instance": Receipt(to="ada", cents=5, tags=["é"]),
                "dict": {"to": "bob", "cents": 7},
                "letter": Letter(to="cy", cents=9),
                "nothing": None}[job.payload]

    worker = Worker(q.mod.DESCRIPTOR, handle, database=q.database, clock=clock, batch=batch)
    serve_until(worker, clock, lambda: worker.stats.acked == 4, max_seconds=60)
    states = states_of(q, ids, clock.now())
    assert [s.result for s in states] == [Receipt("ada", 5, ["é"]), Receipt("bob", 7),
                                          Receipt("cy", 9), None]
    assert worker.stats.retried == 0


@pytest.mark.parametrize("dialect", ["postgres", "mysql", "sqlite"])
def test_a_result_that_does_not_fit_fails_the_delivery_and_says_why(dialect: str,
                                                                     queue: MakeQueue) -> None:
    q = queue(dialect, _layout(dialect))
    (job_id,) = enqueue(q, ["ada"])
    clock = fake_clock()
    calls: list[int] = []

    def handle(job: Job[str]) -> Any:
        calls.append(1)
        return {"to": 1, "cents": 2} if len(calls) == 1 else Receipt(to="ada", cents=2)

    worker = Worker(q.mod.DESCRIPTOR, handle, database=q.database, clock=clock)
    serve_until(worker, clock, lambda: worker.stats.acked == 1, max_seconds=600)
    assert (worker.stats.retried, worker.stats.acked) == (1, 1)
    (done,) = states_of(q, [job_id], clock.now())
    assert (done.state, done.result) == ("finished", Receipt(to="ada", cents=2))
    assert done.error.splitlines()[0] == (
        "TypeError: the handler's result {'to': 1, 'cents': 2} does not fit the result type "
        "receipts.Receipt: Expected `str`, got `int` - at `$.to`")


@pytest.mark.parametrize("dialect", ["postgres", "mysql", "sqlite"])
def test_json_the_class_refuses_comes_back_parsed(dialect: str, queue: MakeQueue) -> None:
    q = queue(dialect, _layout(dialect))
    ids = enqueue(q, ["old", "new"])
    clock = fake_clock()
    worker = Worker(q.mod.DESCRIPTOR, lambda job: Receipt(to=job.payload, cents=1),
                    database=q.database, clock=clock)
    serve_until(worker, clock, lambda: worker.stats.acked == 2, max_seconds=60)
    # As a result written before the class gained a field, or by another release.
    with q.db.transaction() as conn:
        q.db.execute(conn, "UPDATE jobs SET result = '{\"sent\": true}' WHERE id = "
                     + str(ids[0]))
    old, new = states_of(q, ids, clock.now())
    assert (old.state, old.result) == ("finished", {"sent": True})
    assert new.result == Receipt(to="new", cents=1)


def test_the_module_passes_mypy_strict(queue: MakeQueue, tmp_path: Path) -> None:
    paths = []
    for dialect in ("postgres", "mysql", "sqlite"):
        path = tmp_path / f"{dialect}_receipts.py"
        path.write_text(Path(queue(dialect, _layout(dialect)).mod.__file__).read_text())
        paths.append(str(path))
    tests = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "MYPYPATH": tests}
    result = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental",
                             "--cache-dir", str(tmp_path / "cache"), *paths], env=env,
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
