"""Which engine a server is, from what it says of itself, and the claim forms it cannot hold.

Servers that speak PostgreSQL's or MySQL's protocol without being them accept the claims' SQL
and quietly hold less than it asks for: a lock that is not taken, or not seen by the other
nodes. A worker asks before its first claim (`check_server`) and refuses such a form in one
line; `inboxgen verify --database-url` says the same. The reasons are what each engine is known
to do; PostgreSQL, MariaDB and a Galera cluster run in the test suite, the rest are judged from
their recorded answers.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from inboxgen.errors import WorkerConfigError

log = logging.getLogger("inboxgen.worker")

ROW_LOCK, LEASE, ADVISORY = "row_lock", "lease", "advisory"
ALL_FORMS = (ROW_LOCK, LEASE, ADVISORY)


@attrs.frozen
class Engine:
    """A server as its answers show it: a name for messages, the forms it refuses (each with
    why) and whether LISTEN/NOTIFY reaches other sessions."""

    name: str
    refused: Mapping[str, str] = attrs.field(factory=dict)
    listens: bool = True

    def refusal(self, form: str, *, counted: bool = False) -> str | None:
        """Why this engine cannot hold `form` ("is X, where the F form cannot hold: ..."), to
        follow the server's name; None where it can. A counted row lock (`counted`) holds its
        jobs with session locks, advisory ones, once its claim has committed: it holds only
        where both the row lock and the advisory form do."""
        why = self.refused.get(form)
        if why is not None:
            others = [f for f in ALL_FORMS if f not in self.refused]
            hint = f"; use the {' or '.join(others)} form there" if others else ""
            return f"is {self.name}, where the {form} form cannot hold: {why}{hint}"
        if counted and form == ROW_LOCK and ADVISORY in self.refused:
            hint = ("; use the row lock with count_crashes = false, or the lease form, there"
                    if LEASE not in self.refused else
                    "; use the row lock with count_crashes = false there")
            return (f"is {self.name}, where the counted row lock cannot hold: it holds its jobs "
                    f"with session locks, as the advisory form does, and "
                    f"{self.refused[ADVISORY]}{hint}")
        return None

    def check(self, form: str, label: str, where: Mapping[str, str], listen: bool,
              worker: str, *, counted: bool = False) -> bool:
        """Raise WorkerConfigError, in one line, when this engine cannot hold `form` (counted:
        a row lock that counts crashes); else whether the worker listens (`listen`, unless the
        engine has no LISTEN)."""
        refusal = self.refusal(form, counted=counted)
        if refusal is not None:
            raise WorkerConfigError(f"{label} {refusal}", **where)
        if listen and not self.listens:
            log.warning("%s: %s has no LISTEN/NOTIFY: polling instead", worker, self.name)
        return listen and self.listens


# What a worker and `verify --database-url` ask a PostgreSQL-speaking server: its version, then
# (but of CockroachDB) whether it takes writes and at which isolation its sessions run.
POSTGRES_VERSION = "SELECT version()"
POSTGRES_STATE = ("SELECT pg_is_in_recovery(), current_setting('transaction_read_only'), "
                  "current_setting('transaction_isolation')")


def asks_state(version: str) -> bool:
    """Whether to ask POSTGRES_STATE of the server whose version() is `version`."""
    return "cockroachdb" not in version.lower()


def postgres_engine(version: str, state: Sequence[Any] | None) -> Engine:
    """PostgreSQL or what answers as it, from its answers to POSTGRES_VERSION and (where
    asks_state) POSTGRES_STATE."""
    if not asks_state(version):
        return Engine("CockroachDB", {
            ROW_LOCK: "a transaction held open for a job's whole run may be aborted at COMMIT "
                      "(40001) after the job ran, and its row claimed again",
            ADVISORY: "its advisory lock functions lock nothing"}, listens=False)
    in_recovery, read_only, isolation = state if state is not None else (False, "off", "")
    name = "YugabyteDB" if "-yb-" in version.lower() else "PostgreSQL"
    if in_recovery or str(read_only) == "on":
        why = ("it is a standby in recovery" if in_recovery else
               "its sessions are read-only (a writer demoted by failover, or "
               "default_transaction_read_only)")
        return Engine(f"a read-only {name}",
                      {form: f"every claim writes, and {why}" for form in ALL_FORMS})
    if name == "YugabyteDB":
        refused = {ADVISORY: "its advisory locks are missing or a preview (yugabyte-db#3642)"}
        if str(isolation) == "serializable":
            refused[ROW_LOCK] = ("under SERIALIZABLE it turns SKIP LOCKED into a lock that "
                                 "waits (yugabyte-db#11761), so each claim waits for another's "
                                 "whole job")
        return Engine(name, refused)
    return Engine(name)


# What a worker and `verify --database-url` ask a MySQL-speaking server, in this order.
MYSQL_ASKS = ("SELECT VERSION(), @@version_comment", "SHOW VARIABLES LIKE 'wsrep_on'",
              "SHOW STATUS LIKE 'wsrep_cluster_size'")


def mysql_engine(answers: Sequence[Sequence[Any] | None]) -> Engine:
    """MySQL, MariaDB or what answers as them, from the first rows of MYSQL_ASKS (None where
    one has none: a server without Galera has neither wsrep row)."""
    version_row, wsrep, size = answers
    version, comment = (str(x or "") for x in version_row or ("", ""))
    said = f"{version} {comment}".lower()
    if "tidb" in said:
        why = "it parses FOR UPDATE SKIP LOCKED and takes no lock, so two claims take one row"
        return Engine("TiDB", {form: why for form in ALL_FORMS})
    if "vitess" in said:
        return Engine("Vitess", {
            ADVISORY: "GET_LOCK holds on one shard's server session, which vtgate does not "
                      "keep for a worker's connection"})
    flavor = "MariaDB" if "mariadb" in said else "MySQL"
    nodes = int(size[1]) if size and str(size[1]).isdigit() else 1
    if wsrep and str(wsrep[1]).upper() == "ON" and nodes > 1:
        return Engine(f"a {flavor} Galera cluster of {nodes} nodes", {
            ROW_LOCK: "row locks are not replicated, so a session on each node can claim the "
                      "same row, and the loser learns it only at COMMIT, after its job ran",
            ADVISORY: "GET_LOCK holds on one node only"})
    return Engine(flavor)
