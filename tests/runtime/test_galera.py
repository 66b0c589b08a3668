"""A MariaDB Galera cluster of three nodes on loopback: row locks and GET_LOCK hold on one node
only, so a worker refuses those forms there before claiming; a lease's claims conflict at COMMIT
instead, and workers on every node drain a queue with every job run once, also while one node is
SIGKILLed mid-drain and rejoins."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest
from dbcases import Layout, open_queue
from galera_cluster import GaleraCluster

from inboxgen import Job, Worker, WorkerConfigError, ack
from inboxgen.runtime.testing import run_until_idle

UTC = dt.UTC


@pytest.fixture(scope="module")
def cluster() -> Iterator[GaleraCluster]:
    galera = GaleraCluster(nodes=3)
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
        assert f"is a MariaDB Galera cluster of 3 nodes, where the {form} form cannot hold: " \
               in said
        assert said.endswith("; use the lease form there (worker jobs, table jobs)"), said
    finally:
        q.close()


def test_lease_workers_on_two_nodes_run_every_job_once(cluster: GaleraCluster, tmp_path: Path,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    """300 jobs, a worker of five slots on each node claiming batches of four: the nodes'
    claims of one row conflict at COMMIT (certification), the loser's claim fails before its
    handler runs, and every job runs exactly once. Each worker's claims start after the last
    row it claimed, so the two collide by timing alone: a round in which they did not is run
    again on a new table, up to three rounds, every round's ledger checked."""
    collided = False
    for round_ in range(3):
        before = cluster.rolled_back()
        _two_nodes_drain(cluster, tmp_path / f"round{round_}", caplog)
        if cluster.rolled_back() > before:
            collided = True
            break
    # The test is of the conflict path: the nodes' claims did collide.
    assert collided


def _two_nodes_drain(cluster: GaleraCluster, root: Path,
                     caplog: pytest.LogCaptureFixture) -> None:
    """One round of the test above: 300 jobs drained by a worker on node 0 and one on node 1,
    each job run once, both workers running jobs, nothing logged above DEBUG."""
    name = cluster.create_database()
    root.mkdir()
    q = open_queue(root, "mysql", Layout(form="lease", processed=False),
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
            async def handler(job: Job[Any]) -> None:
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

        caplog.clear()
        asyncio.run(drain())
        twice = [job for job, n in runs.items() if n > 1]
        assert (len(runs), twice) == (300, [])
        assert set(nodes) == {0, 1}, nodes  # both nodes' workers ran jobs
        # A claim that lost at COMMIT is a race, not an outage: nothing is logged above DEBUG.
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
        assert q.ids() == []  # every row settled (deleted), on the node that claimed it
    finally:
        q.close()


JOBS = 1500


def test_a_node_killed_mid_drain_and_rejoined_loses_nothing_and_runs_nothing_twice(
        cluster: GaleraCluster, tmp_path: Path) -> None:
    """A transactional lease worker on each of the three nodes (its handler's effect commits
    with the ack), 1,500 jobs of 0.1 s. Once node 2's (or node 1's) worker holds jobs, its
    node's server is SIGKILLed: the two others keep the cluster's quorum, and the jobs its worker
    held come back to them when their leases run out. The node then rejoins (a state transfer
    from a running node) and its worker, which kept trying to reconnect, serves again. The
    ledger: every job's effect committed exactly once, none lost, no row left in the queue."""
    name = cluster.create_database()
    q = open_queue(tmp_path, "mysql", Layout(form="lease", processed=False),
                   cluster.url(0, name), mysql_args=cluster.connect_args(0, name))
    try:
        conn = q.connect()
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE effects (id BIGINT AUTO_INCREMENT PRIMARY KEY, "
                        "job BIGINT NOT NULL, node INT NOT NULL)")
        due = dt.datetime.now(UTC) - dt.timedelta(seconds=5)
        for n in range(JOBS):
            q.mod.insert(conn, q.new(retry_after=due, account=f"a{n % 7}"))
        conn.commit()
        conn.close()

        in_work: dict[int, set[int]] = {n: set() for n in range(3)}
        started: dict[int, list[int]] = {n: [] for n in range(3)}
        effects = [0]

        def handler_on(node: int) -> Any:
            def write(job: Job[Any]) -> None:
                assert job.connection is not None  # transactional: the job's connection
                with job.connection.cursor() as cur:
                    cur.execute("INSERT INTO effects (job, node) VALUES (%s, %s)",
                                (job.id, node))

            async def handler(job: Job[Any]) -> None:
                in_work[node].add(job.id)
                started[node].append(job.id)
                try:
                    await asyncio.to_thread(write, job)
                    await asyncio.sleep(0.1)
                finally:
                    in_work[node].discard(job.id)
                effects[0] += 1

            return handler

        outage: dict[str, Any] = {}

        async def drain() -> None:
            loop = asyncio.get_running_loop()
            workers = [Worker(q.mod.DESCRIPTOR, handler_on(n), database=cluster.url(n, name),
                              workers=4, batch=2, lease=3, poll_interval=0.05, listen=False,
                              transactional=True)
                       for n in range(3)]
            for w in workers:
                await w.start()
            try:
                deadline = loop.time() + 240
                # Mid-drain, the first of nodes 2 and 1 whose worker has jobs in its handlers
                # (node 0, where the test reads the queue, stays up; a node's worker may lose
                # most claims to the others').
                while effects[0] < JOBS // 5 or not (in_work[2] or in_work[1]):
                    assert loop.time() < deadline, (effects, in_work)
                    await asyncio.sleep(0.005)
                victim = outage["victim"] = 2 if in_work[2] else 1
                outage["held"] = set(in_work[victim])
                outage["started_before"] = len(started[victim])
                await asyncio.to_thread(cluster.kill, victim)
                outage["killed_at_effects"] = effects[0]
                while cluster.cluster_size(0) == 3:  # until the others dropped it
                    assert loop.time() < deadline, effects
                    await asyncio.sleep(0.1)
                outage["rejoin_s"] = await asyncio.to_thread(cluster.rejoin, victim)
                outage["left_at_rejoin"] = JOBS - effects[0]
                outage["started_at_rejoin"] = len(started[victim])
                while q.ids():
                    assert loop.time() < deadline, len(q.ids())
                    await asyncio.sleep(0.1)
                await asyncio.gather(*(run_until_idle(w, timeout=60) for w in workers))
            finally:
                for w in workers:
                    await w.shutdown()

        asyncio.run(drain())
        check = pymysql.connect(**cluster.connect_args(1, name))
        try:
            with check.cursor() as cur:
                cur.execute("SELECT job, count(*) FROM effects GROUP BY job")
                runs = dict(cur.fetchall())
                cur.execute("SELECT node, count(*) FROM effects GROUP BY node")
                by_node = dict(cur.fetchall())
                cur.execute("SELECT job, node FROM effects")
                ran_on = dict(cur.fetchall())
        finally:
            check.close()
        twice = sorted(job for job, n in runs.items() if n > 1)
        assert (len(runs), twice) == (JOBS, []), outage
        assert q.ids() == []  # nothing stranded
        victim = outage["victim"]
        # The kill cut work off: jobs whose handlers ran on the victim when it died committed
        # no effect there, and ran again on another node once their leases ran out.
        assert [job for job in outage["held"] if ran_on[job] != victim], (outage, ran_on)
        # The victim's worker ran jobs before the kill and, once its node rejoined, again.
        assert outage["started_before"] > 0 and by_node.get(victim, 0) > 0, (outage, by_node)
        assert len(started[victim]) > outage["started_at_rejoin"], (outage, by_node)
        assert by_node.get(0, 0) > 0, by_node
        assert [cluster.cluster_size(n) for n in range(3)] == [3, 3, 3]
    finally:
        q.close()


# -- a renewal or a settlement that another node's write rolls back --------------------------------

# While `slow` says so for its kind of write, a settlement's DELETE or a renewal's UPDATE of a
# row sleeps under the row's lock on the worker's node, so another node's write of that row can
# certify first: the cluster then rolls the worker's transaction back (a brute-force abort,
# 1213 to the client), as when the two writes cross by timing alone.
SLOW_WRITES = [
    "CREATE TABLE slow (what VARCHAR(16) PRIMARY KEY, held INT NOT NULL)",
    "INSERT INTO slow VALUES ('settle', 0), ('renew', 0)",
    """CREATE TRIGGER jobs_slow_settle BEFORE DELETE ON jobs FOR EACH ROW
    BEGIN
        IF NOT (OLD.account <=> 'node 1') AND (SELECT held FROM slow WHERE what = 'settle') THEN
            SET @slept = SLEEP(20);
        END IF;
    END""",
    """CREATE TRIGGER jobs_slow_renew BEFORE UPDATE ON jobs FOR EACH ROW
    BEGIN
        IF OLD.locked_until IS NOT NULL AND NEW.locked_until > OLD.locked_until
           AND NOT (NEW.account <=> 'node 1') AND (SELECT held FROM slow WHERE what = 'renew') THEN
            SET @slept = SLEEP(20);
        END IF;
    END""",
]


@pytest.mark.parametrize("write", ["settle", "renew"])
@pytest.mark.parametrize("other", ["kept", "taken"])
def test_a_renewal_or_settlement_another_node_rolls_back_is_written_again_and_fenced(
        cluster: GaleraCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture, write: str,
        other: str) -> None:
    """A lease worker on node 0 runs one job. While its settlement (or its lease's renewal) is
    on its way, a session on node 1 writes the row and commits first, and the cluster rolls the
    worker's transaction back (1213). The worker writes it again at once: where node 1 changed
    another column (`kept`), the ack (the renewal) lands, quietly, as after a deadlock; where
    node 1 took the lease, as another worker's claim does (`taken`), the token fences the
    worker off: its ack changes nothing, the row stays with node 1's lease, and the lost lease
    is reported."""
    name = cluster.create_database()
    q = open_queue(tmp_path, "mysql", Layout(form="lease", processed=False),
                   cluster.url(0, name), mysql_args=cluster.connect_args(0, name))
    node0 = pymysql.connect(**cluster.connect_args(0, name), autocommit=True)
    node1 = pymysql.connect(**cluster.connect_args(1, name), autocommit=True)
    try:
        with node0.cursor() as cur:
            for sql in SLOW_WRITES:
                cur.execute(sql)
            cur.execute("UPDATE slow SET held = 1 WHERE what = %s", (write,))
        conn = q.connect()
        job_id = q.mod.insert(conn, q.new(retry_after=dt.datetime.now(UTC)
                                          - dt.timedelta(seconds=5)))
        conn.commit()
        conn.close()
        runs: Counter[int] = Counter()
        renewed = asyncio.Event()

        async def handler(job: Job[Any]) -> None:
            runs[job.id] += 1
            if write == "renew":  # until the renewal's second try has landed (or not)
                await asyncio.wait_for(renewed.wait(), 30)

        def locked_until() -> Any:
            with node1.cursor() as cur:
                cur.execute("SELECT locked_until FROM jobs WHERE id = %s", (job_id,))
                row = cur.fetchone()
            return None if row is None else row[0]

        def sleeping() -> bool:
            with node0.cursor() as cur:
                cur.execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST "
                            "WHERE DB = %s AND STATE = 'User sleep'", (name,))
                return bool(cur.fetchone()[0])

        def cross() -> Any:
            """Node 1 writes the row while node 0's write of it sleeps; its lease after. The
            row's new account stops the triggers, so node 0's second try does not sleep; node 1
            writes nothing else (a write of `slow` would roll node 0 back before node 1 took
            the row, and the second try would find its lease still there)."""
            token = locked_until()
            with node1.cursor() as cur:
                cur.execute("UPDATE jobs SET account = 'node 1' WHERE id = %s" if other == "kept"
                            else "UPDATE jobs SET account = 'node 1', "
                                 "locked_until = locked_until + INTERVAL 1 HOUR WHERE id = %s",
                            (job_id,))
            return token

        async def run() -> Any:
            worker = Worker(q.mod.DESCRIPTOR, handler, database=cluster.url(0, name), workers=1,
                            batch=1, lease=4, poll_interval=0.05, listen=False)
            await worker.start()
            loop = asyncio.get_running_loop()
            try:
                deadline = loop.time() + 60
                while not await asyncio.to_thread(sleeping):
                    assert loop.time() < deadline, "no write of node 0 slept"
                    await asyncio.sleep(0.02)
                token = await asyncio.to_thread(cross)
                if write == "renew":
                    while (await asyncio.to_thread(locked_until)) == token:
                        assert loop.time() < deadline, "the renewal never landed"
                        await asyncio.sleep(0.05)
                    renewed.set()
                while other == "kept" and await asyncio.to_thread(q.ids):
                    assert loop.time() < deadline, "the ack never landed"
                    await asyncio.sleep(0.05)
                await run_until_idle(worker, timeout=30)
                return token
            finally:
                await worker.shutdown()

        before = cluster.rolled_back()
        caplog.set_level(logging.DEBUG, logger="inboxgen")
        token = asyncio.run(run())
        assert cluster.rolled_back() > before  # node 0's write did lose to node 1's
        assert runs == {job_id: 1}
        warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        if other == "kept":
            assert q.ids() == []
            assert warned == []  # a race, not an outage
        else:
            # Fenced: the row stays, under node 1's lease; the lost lease was said.
            assert q.ids() == [job_id]
            assert locked_until() == token + dt.timedelta(hours=1)
            assert any("lease" in m and str(job_id) in m for m in warned), warned
    finally:
        node0.close()
        node1.close()
        q.close()


def test_a_transactional_job_another_node_rolls_back_runs_again(
        cluster: GaleraCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A transactional lease worker on node 0 runs a job whose handler adds 1 to an account.
    Before the job's transaction commits, a session on node 1 adds 10 to the same account and
    commits first, and the cluster rolls node 0's transaction back (1213), the handler's write
    and the ack with it. The worker records the delivery as failed, in a transaction of its
    own under the lease it still holds, and the job runs again: the account holds 11, the job
    acked once on its second attempt, one warning says why, and nothing is an outage."""
    name = cluster.create_database()
    q = open_queue(tmp_path, "mysql", Layout(form="lease", processed=False),
                   cluster.url(0, name), mysql_args=cluster.connect_args(0, name))
    node1 = pymysql.connect(**cluster.connect_args(1, name), autocommit=True)
    try:
        with node1.cursor() as cur:
            cur.execute("CREATE TABLE accounts (id INT PRIMARY KEY, n INT NOT NULL)")
            cur.execute("INSERT INTO accounts VALUES (1, 0)")
        conn = q.connect()
        job_id = q.mod.insert(conn, q.new(retry_after=dt.datetime.now(UTC)
                                          - dt.timedelta(seconds=5)))
        conn.commit()
        conn.close()
        runs: list[int] = []
        written, crossed = threading.Event(), threading.Event()

        def handler(job: Job[Any]) -> Any:  # PyMySQL: a sync handler, in a thread
            runs.append(job.attempt)
            with job.connection.cursor() as cur:
                cur.execute("UPDATE accounts SET n = n + 1 WHERE id = 1")
            if len(runs) == 1:
                written.set()
                assert crossed.wait(30)
            return ack()

        async def run() -> Any:
            worker = Worker(q.mod.DESCRIPTOR, handler, database=cluster.url(0, name), workers=1,
                            batch=1, transactional=True, poll_interval=0.05, listen=False)
            await worker.start()
            loop = asyncio.get_running_loop()
            try:
                assert await asyncio.to_thread(written.wait, 60), "the handler never wrote"
                with node1.cursor() as cur:
                    cur.execute("UPDATE accounts SET n = n + 10 WHERE id = 1")
                crossed.set()
                deadline = loop.time() + 60
                while await asyncio.to_thread(q.ids):
                    assert loop.time() < deadline, "the job never acked"
                    await asyncio.sleep(0.05)
            finally:
                crossed.set()
                await worker.shutdown()
            return worker.stats

        before = cluster.rolled_back()
        caplog.set_level(logging.INFO, logger="inboxgen")
        stats = asyncio.run(run())
        assert cluster.rolled_back() > before  # node 0's transaction did lose to node 1's write
        with node1.cursor() as cur:
            cur.execute("SELECT n FROM accounts WHERE id = 1")
            assert cur.fetchone() == (11,)
        assert runs == [1, 2]
        # The failure was recorded as a retry (not left for the lease to run out), the attempt
        # counted by the claim.
        assert (stats.retried, stats.acked, stats.failed_claims) == (1, 1, 0)
        warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warned) == 1, warned
        assert f"failed on row {job_id} (attempt 1): the server rolled back the job's " \
               f"transaction, the handler's writes with it: (1213, " in warned[0], warned
    finally:
        node1.close()
        q.close()
