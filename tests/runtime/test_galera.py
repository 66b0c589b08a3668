"""A MariaDB Galera cluster of two nodes on loopback: row locks and GET_LOCK hold on one node
only, so a worker refuses those forms there before claiming; a lease's claims conflict at COMMIT
instead, and workers on both nodes drain a queue with every job run once."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dbcases import Layout, open_queue
from galera_cluster import GaleraCluster

from inboxgen import Job, Worker, WorkerConfigError, ack
from inboxgen.runtime.testing import run_until_idle

UTC = dt.UTC


@pytest.fixture(scope="module")
def cluster() -> Iterator[GaleraCluster]:
    galera = GaleraCluster(nodes=2)
    try:
        yield galera
    finally:
        galera.stop()


@pytest.mark.parametrize("form", ["row_lock", "advisory"])
def test_a_worker_refuses_row_locks_and_named_locks_on_a_cluster(cluster: GaleraCluster,
                                                                 tmp_path: Path,
                                                                 form: str) -> None:
    name = cluster.create_database()
    q = open_queue(tmp_path, "mysql", Layout(form=form), cluster.url(0, name),
                   mysql_args=cluster.connect_args(0, name))
    try:
        worker = Worker(q.mod.DESCRIPTOR, lambda job: ack(), database=cluster.url(1, name))
        with pytest.raises(WorkerConfigError) as err:
            asyncio.run(worker.start())
        said = str(err.value)
        assert f"is a MariaDB Galera cluster of 2 nodes, where the {form} form cannot hold: " \
               in said
        assert said.endswith("; use the lease form there (worker jobs, table jobs)"), said
    finally:
        q.close()


def test_lease_workers_on_both_nodes_run_every_job_once(cluster: GaleraCluster, tmp_path: Path,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    """300 jobs, a worker of five slots on each node claiming batches of four: the nodes'
    claims of one row conflict at COMMIT (certification), the loser's claim fails before its
    handler runs, and every job runs exactly once."""
    name = cluster.create_database()
    q = open_queue(tmp_path, "mysql", Layout(form="lease", processed=False),
                   cluster.url(0, name), mysql_args=cluster.connect_args(0, name))
    runs: Counter[int] = Counter()
    try:
        conn = q.connect()
        due = dt.datetime.now(UTC) - dt.timedelta(seconds=5)
        for n in range(300):
            q.mod.insert(conn, q.new(retry_after=due, account=f"a{n % 7}"))
        conn.commit()
        conn.close()

        nodes: Counter[int] = Counter()

        def handler_on(node: int) -> Any:
            async def handler(job: Job) -> None:
                runs[q.id_of(job.row)] += 1
                nodes[node] += 1
                await asyncio.sleep(0.005)

            return handler

        async def drain() -> None:
            workers = [Worker(q.mod.DESCRIPTOR, handler_on(n), database=cluster.url(n, name),
                              workers=5, batch=4, poll_interval=0.05, listen=False)
                       for n in (0, 1)]
            for w in workers:
                await w.start()
            try:
                deadline = asyncio.get_running_loop().time() + 120
                while sum(runs.values()) < 300:
                    assert asyncio.get_running_loop().time() < deadline, len(runs)
                    await asyncio.sleep(0.05)
                await asyncio.gather(*(run_until_idle(w) for w in workers))
            finally:
                for w in workers:
                    await w.shutdown()

        before = cluster.rolled_back()
        asyncio.run(drain())
        # The test is of the conflict path: the nodes' claims did collide.
        assert cluster.rolled_back() > before
        twice = [job for job, n in runs.items() if n > 1]
        assert (len(runs), twice) == (300, [])
        assert min(nodes.values()) > 0, nodes  # both nodes' workers ran jobs
        # A claim that lost at COMMIT is a race, not an outage: nothing is logged above DEBUG.
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
        assert q.ids() == []  # every row settled (deleted), on the node that claimed it
    finally:
        q.close()

