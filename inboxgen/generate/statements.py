"""Every SQL statement the runtime may run for a queue table, rendered once, at build time.

Each statement is fixed text with identifiers quoted for the dialect and values as named
placeholders; nothing is assembled at run time. The shapes, per claim form:

- row lock: CLAIM (SELECT ... FOR UPDATE SKIP LOCKED; the claim's transaction holds the job),
  settlements in the same transaction; a crash rolls back, so the claim does not count the
  attempt and RETRY / RETRY_AFTER do.
- lease: CLAIM (UPDATE ... WHERE id IN (SELECT ...) RETURNING, committed at once) writes the
  expiry, which is the ownership token: RENEW and every settlement are guarded by
  `locked_until = <held expiry>` (and the attempt, where there is one).
- advisory: CANDIDATES lists due rows, LOCK takes the session lock on a row's key, TAKE confirms
  the row is still claimable (counting the attempt), UNLOCK releases it after settlement.

Claims report the attempt as it stood before the claim (`attempt - 1` where the claim counted it).
"""

from __future__ import annotations

import re

import attrs

from inboxgen.generate.dialects import ADVISORY, LEASE, ROW_LOCK
from inboxgen.generate.model import Field, Queue, TableRef

_PG_SERIAL_ARRAY = {"SERIAL": "INT", "SMALLSERIAL": "SMALLINT", "BIGSERIAL": "BIGINT"}


@attrs.frozen
class Statement:
    name: str
    sql: str
    params: tuple[str, ...]
    doc: str


class _Builder:
    def __init__(self, q: Queue) -> None:
        self.q = q
        self.d = q.dialect
        self.out: list[Statement] = []

    # -- small pieces ---------------------------------------------------------------------------

    def c(self, f: Field) -> str:
        return self.d.quote(f.name)

    def t(self, ref: TableRef | None = None) -> str:
        ref = ref or self.q.table
        return self.d.qualified(ref.schema, ref.name)

    def p(self, name: str) -> str:
        return self.d.param(name)

    def add(self, name: str, sql: str, doc: str) -> None:
        sql = "\n".join(_wrap(line) for line in sql.strip("\n").splitlines())
        self.out.append(Statement(name, sql, tuple(self.d.params_in(sql)), doc))

    def role(self, role: str) -> Field | None:
        return self.q.role(role)

    def select_list(self, returning_claim: bool = False) -> str:
        cols: list[str] = []
        attempt = self.role("attempt")
        for f in self.q.fields:
            if returning_claim and f is attempt:
                cols.append(f"{self.c(f)} - 1 AS {self.c(f)}")
            else:
                cols.append(self.c(f))
        return ", ".join(cols)

    def filters(self, with_group: bool = True) -> list[str]:
        out: list[str] = []
        g, pa, ra, lu = (self.role(r) for r in ("group", "processed_at", "retry_after",
                                                  "locked_until"))
        if g is not None and with_group:
            out.append(f"{self.c(g)} = {self.p('group')}")
        if pa is not None:
            out.append(f"{self.c(pa)} IS NULL")
        if ra is not None:
            out.append(f"{self.c(ra)} <= {self.p('now')}")
        if lu is not None:
            out.append(f"({self.c(lu)} IS NULL OR {self.c(lu)} <= {self.p('now')})")
        return out

    def order(self) -> str:
        return ", ".join(self.c(f) for f in (self.role(r) for r in
                                             ("priority", "retry_after", "id")) if f)

    def where(self, conds: list[str], indent: str = "") -> str:
        if not conds:
            return ""
        return f"{indent}WHERE " + f"\n{indent}  AND ".join(conds)

    def guard(self) -> list[str]:
        """The conditions that say this worker still holds the row."""
        conds = [f"{self.c(self.q.id)} = {self.p('id')}"]
        if self.q.lease:
            lu = self.role("locked_until")
            assert lu is not None
            conds.append(f"{self.c(lu)} = {self.p('locked_until')}")
            attempt = self.role("attempt")
            if attempt is not None:
                conds.append(f"{self.c(attempt)} = {self.p('attempt')} + 1")
        return conds

    def clear_lease(self) -> list[str]:
        lu = self.role("locked_until")
        return [f"{self.c(lu)} = NULL"] if lu is not None and self.q.lease else []

    def update(self, name: str, sets: list[str], doc: str) -> None:
        self.add(name, f"UPDATE {self.t()}\nSET " + ",\n    ".join(sets) + "\n"
                 + self.where(self.guard()), doc)

    def held_batch(self) -> str:
        """The condition that a row is one of a batch this worker holds: `guard()` for many
        rows at once, with one array per guard parameter (one entry per row; SQLite: one JSON
        array, `held`, of the rows' guard values)."""
        idc = self.c(self.q.id)
        if not self.q.lease and self.d.name == "postgres":
            return f"{idc} = ANY({self.p('id')}::{_pg_array_type(self.q.id)})"
        held = [("id", self.q.id)]
        lu, attempt = self.role("locked_until"), self.role("attempt")
        assert lu is not None
        held.append(("locked_until", lu))
        if attempt is not None:
            held.append(("attempt", attempt))
        plus = {"attempt": " + 1"}  # the claim counted the attempt the worker holds
        cols = ", ".join(self.c(f) for _, f in held)
        if self.d.name == "postgres":
            picked = ", ".join(f"held.{p}{plus.get(p, '')}" for p, _ in held)
            arrays = ", ".join(f"{self.p(p)}::{_pg_array_type(f)}" for p, f in held)
            source = (f"    FROM unnest({arrays})\n"
                      f"        AS held({', '.join(p for p, _ in held)})")
        else:
            # One JSON array of [id, locked_until, attempt] entries: joining one json_each per
            # column on its key would scan each array once per row.
            picked = ", ".join(f"json_extract(held.value, '$[{i}]'){plus.get(p, '')}"
                               for i, (p, _) in enumerate(held))
            source = f"    FROM json_each({self.p('held')}) AS held"
        return f"({cols}) IN (\n    SELECT {picked}\n{source}\n)"

    def many(self, name: str, sets: list[str] | None, doc: str) -> None:
        """The batch twin of a guarded settlement (UPDATE with `sets`, or DELETE with None).
        A lease's batch returns the ids it changed: the others are no longer held."""
        head = (f"DELETE FROM {self.t()}\n" if sets is None else
                f"UPDATE {self.t()}\nSET " + ",\n    ".join(sets) + "\n")
        returning = f"\nRETURNING {self.c(self.q.id)}" if self.q.lease else ""
        self.add(name, f"{head}WHERE {self.held_batch()}{returning}", doc)

    @property
    def batches(self) -> bool:
        """Whether the table gets batch settlements: row lock and lease on PostgreSQL and SQLite.
        MySQL/MariaDB has no UPDATE ... RETURNING to say which rows a lease's batch changed, and
        a row lock's multi-row DELETE ... IN (...) deadlocks against concurrent SKIP LOCKED
        claims where one row at a time does not: there each row settles alone."""
        return (self.q.form == ROW_LOCK or self.q.lease) and not self.mysql

    # -- statements -----------------------------------------------------------------------------

    @property
    def mysql(self) -> bool:
        return self.d.name == "mysql"

    def select_claimable(self, name: str, doc: str, *, lock: str = "FOR UPDATE SKIP LOCKED"
                         ) -> None:
        """SELECT the rows due for a claim, in claim order, locked as `lock` says."""
        self.add(name, "\n".join(x for x in (
            f"SELECT {self.select_list()}",
            f"FROM {self.t()}{self.force_index() if lock else ''}",
            self.where(self.filters()),
            f"ORDER BY {self.order()}",
            f"LIMIT {self.p('limit')}",
            lock,
        ) if x), doc)

    def force_index(self) -> str:
        """MySQL: read the claim-order index in order. A locking read that sorts instead locks
        every due row it examines, and then one claim holds the whole queue."""
        if not self.mysql or not self.q.claim_index:
            return ""
        return f" FORCE INDEX ({self.d.quote(self.q.claim_index)})"

    def mark(self, name: str, sets: list[str], doc: str) -> None:
        """UPDATE the rows a MySQL claim selected (MySQL has no UPDATE ... RETURNING); `ids`
        is a list, which PyMySQL writes as a parenthesised list."""
        self.add(name, f"UPDATE {self.t()}\nSET " + ",\n    ".join(sets)
                 + f"\nWHERE {self.c(self.q.id)} IN {self.p('ids')}", doc)

    def build(self) -> list[Statement]:
        form = self.q.form
        if self.mysql:
            self.claim_mysql()
        elif form == ROW_LOCK and self.q.count_crashes:
            self.claim_row_lock_counted()
        elif form == ROW_LOCK:
            self.claim_row_lock()
        elif form == LEASE:
            self.claim_lease()
        elif form == ADVISORY:
            self.claim_advisory()
        if self.q.fifo:
            self.fifo_mysql() if self.mysql else self.fifo()
        if form == LEASE:
            lu = self.role("locked_until")
            assert lu is not None
            self.update("RENEW", [f"{self.c(lu)} = {self.p('new_locked_until')}"],
                        "Extend a held lease; the held expiry is the token.")
            if self.batches:
                self.many("RENEW_MANY", [f"{self.c(lu)} = {self.p('new_locked_until')}"],
                          "Extend many held leases to `new_locked_until`; returns the ids "
                          "renewed.")
        self.settlements()
        self.inserts()
        self.operations()
        if self.d.name == "postgres":
            self.add("NOTIFY", "SELECT pg_notify(%(channel)s, %(payload)s)",
                     "Wake workers listening on the table's channel; the payload is the group.")
            self.insert_notify()
        return self.out

    def insert_notify(self) -> None:
        """INSERT and its notification as one statement: one round trip less per enqueue."""
        insert = next(st for st in self.out if st.name == "INSERT")
        if {"notify_channel", "notify_group"} & set(insert.params):
            return  # a column's attribute has one of the names: insert() sends NOTIFY after
        idc = self.c(self.q.id)
        body = "\n".join("    " + line for line in insert.sql.splitlines())
        self.add("INSERT_NOTIFY", f"WITH new AS (\n{body}\n)\n"
                                  f"SELECT {idc}, pg_notify(%(notify_channel)s, %(notify_group)s)"
                                  f"\nFROM new",
                 "Enqueue one row and wake the workers listening on the table's channel when "
                 "the transaction commits; returns its id.")

    def claim_row_lock(self) -> None:
        self.select_claimable("CLAIM", "Claim up to `limit` rows; the claim's open transaction "
                                       "holds them.")

    def claim_mysql(self) -> None:
        form = self.q.form
        attempt = self.role("attempt")
        if form == ROW_LOCK:
            self.claim_row_lock()
            if self.q.count_crashes:
                assert attempt is not None
                self.mark("CLAIM_COUNT", [f"{self.c(attempt)} = {self.c(attempt)} + 1"],
                          "Count the next delivery of the claimed rows (committed at once, so a "
                          "crash still spends the attempt).")
                self.relock()
        elif form == LEASE:
            self.select_claimable("CLAIM", "Select up to `limit` due rows and lock them until "
                                           "CLAIM_MARK, in the same transaction.")
            self.mark("CLAIM_MARK", self.claim_set(),
                      "Write the lease (the ownership token) on the rows CLAIM selected.")
        else:
            self.claim_advisory_candidates()
            take_where = [f"{self.c(self.q.id)} = {self.p('id')}"] + self.filters()
            self.add("TAKE", f"SELECT {self.select_list()}\nFROM {self.t()}\n"
                     + self.where(take_where),
                     "Under its key's lock, confirm the row is still due.")
            if attempt is not None:
                self.add("TAKE_COUNT", f"UPDATE {self.t()}\n"
                                       f"SET {self.c(attempt)} = {self.c(attempt)} + 1\n"
                                       f"WHERE {self.c(self.q.id)} = {self.p('id')}",
                         "Count the attempt of a taken row.")
            # Lock names: prefixed with the database, hashed where they pass MySQL's 64.
            name = ("FROM (SELECT CONCAT(DATABASE(), '.', %(key)s) AS name) AS lock_name")
            self.add("LOCK", "SELECT GET_LOCK(IF(CHAR_LENGTH(name) > 64, SHA2(name, 256), "
                             f"name), 0)\n{name}",
                     "Take the session-level lock on a job's key, without waiting.")
            self.add("UNLOCK", "SELECT RELEASE_LOCK(IF(CHAR_LENGTH(name) > 64, SHA2(name, 256),"
                               f" name))\n{name}",
                     "Release the session-level lock on a job's key.")

    def fifo_mysql(self) -> None:
        """MySQL FIFO without advisory transaction locks: row locks on the group serialise its
        claimers; a live lease anywhere in the group still blocks."""
        head_filters = self.group_filters()
        lock = "FOR UPDATE NOWAIT" if self.q.form == ROW_LOCK else "FOR UPDATE"
        if self.q.form == ROW_LOCK:
            # The head's row lock alone would let a row enqueued later, sorting ahead of it,
            # be claimed while the head is in work. Locking every unfinished row of the group
            # (without waiting) guards the group for the transaction: a second claim runs into
            # one of them. MySQL has no transaction-scoped advisory locks to do it with.
            self.add("FIFO_LOCK", "\n".join((
                f"SELECT {self.c(self.q.id)}",
                f"FROM {self.t()}{self.force_index()}",
                self.where(head_filters),
                "FOR UPDATE NOWAIT",
            )), "Lock the group's unfinished rows for the transaction, or fail at once when "
                "another claim holds any of them.")
        self.add("FIFO_HEAD", "\n".join((
            f"SELECT {self.select_list()}",
            f"FROM {self.t()}{self.force_index()}",
            self.where(head_filters),
            f"ORDER BY {self.order()}",
            "LIMIT 1",
            lock,
        )), "The group's head (first unfinished row in claim order), locked"
            + (" without waiting: a held head means nothing to claim." if self.q.form == ROW_LOCK
               else ": concurrent claims of the group wait here."))
        if self.q.form == LEASE:
            lu = self.role("locked_until")
            assert lu is not None
            self.add("FIFO_HELD", f"SELECT COUNT(*)\nFROM {self.t()}\n"
                     + self.where(head_filters + [f"{self.c(lu)} > {self.p('now')}"]),
                     "Rows of the group under a live lease: any blocks the claim.")

    def claim_guard(self) -> None:
        """count_crashes: a claim counts its rows and commits, then locks them again. Between
        the two the rows are unlocked and still due, so claims of the table take turns on a
        session lock from the count until the rows are locked again; otherwise a concurrent
        claim would count the same rows once more, for a delivery that never happens."""
        if self.mysql:
            name = "FROM (SELECT CONCAT(DATABASE(), '.', %(key)s) AS name) AS lock_name"
            self.add("CLAIM_GUARD", "SELECT GET_LOCK(IF(CHAR_LENGTH(name) > 64, SHA2(name, 256), "
                                    f"name), %(wait)s)\n{name}",
                     "Take the table's claim turn (a session lock), waiting up to `wait` s.")
            self.add("CLAIM_UNGUARD", "SELECT RELEASE_LOCK(IF(CHAR_LENGTH(name) > 64, "
                                      f"SHA2(name, 256), name))\n{name}",
                     "Give the table's claim turn back.")
            return
        self.add("CLAIM_GUARD", "SELECT pg_advisory_lock(hashtextextended(%(key)s, 0)) IS NOT NULL",
                 "Take the table's claim turn (a session lock), waiting for it.")
        self.add("CLAIM_UNGUARD", "SELECT pg_advisory_unlock(hashtextextended(%(key)s, 0))",
                 "Give the table's claim turn back.")

    def relock(self) -> None:
        self.claim_guard()
        attempt = self.role("attempt")
        assert attempt is not None
        self.add("RELOCK", f"SELECT {self.select_list(returning_claim=True)}\nFROM {self.t()}\n"
                 + self.where([f"{self.c(self.q.id)} = {self.p('id')}",
                               f"{self.c(attempt)} = {self.p('attempt')} + 1"])
                 + "\nFOR UPDATE SKIP LOCKED",
                 "Lock a counted row for the handler's transaction, unless another claim "
                 "counted it since.")

    def claim_row_lock_counted(self) -> None:
        """Row lock that survives crash loops: count the attempt in a short transaction of its
        own, then lock the row again (guarded by the attempt) for the handler's transaction."""
        attempt = self.role("attempt")
        assert attempt is not None
        inner = "\n".join(x for x in (
            f"    SELECT {self.c(self.q.id)}",
            f"    FROM {self.t()}",
            self.where(self.filters(), "    "),
            f"    ORDER BY {self.order()}",
            f"    LIMIT {self.p('limit')}",
            "    FOR UPDATE SKIP LOCKED",
        ) if x)
        self.add("CLAIM", f"UPDATE {self.t()}\n"
                          f"SET {self.c(attempt)} = {self.c(attempt)} + 1\n"
                          f"WHERE {self.d.picked_by(self.c(self.q.id), inner)}\n"
                          f"RETURNING {self.select_list(returning_claim=True)}",
                 "Count the next delivery of up to `limit` rows (commit it at once, so a crash "
                 "still spends the attempt).")
        self.relock()

    def claim_set(self) -> list[str]:
        lu = self.role("locked_until")
        assert lu is not None
        sets = [f"{self.c(lu)} = {self.p('locked_until')}"]
        attempt = self.role("attempt")
        if attempt is not None:
            sets.append(f"{self.c(attempt)} = {self.c(attempt)} + 1")
        return sets

    def claim_lease(self) -> None:
        inner = "\n".join(x for x in (
            f"    SELECT {self.c(self.q.id)}",
            f"    FROM {self.t()}",
            self.where(self.filters(), "    "),
            f"    ORDER BY {self.order()}",
            f"    LIMIT {self.p('limit')}",
            "    FOR UPDATE SKIP LOCKED" if self.d.name == "postgres" else "",
        ) if x)
        self.add("CLAIM", f"UPDATE {self.t()}\nSET " + ",\n    ".join(self.claim_set())
                 + f"\nWHERE {self.d.picked_by(self.c(self.q.id), inner)}\n"
                 + f"RETURNING {self.select_list(returning_claim=True)}",
                 "Claim up to `limit` rows under a lease ending at `locked_until`.")

    def claim_advisory_candidates(self) -> None:
        self.select_claimable("CANDIDATES", "Rows due for a claim, in claim order; each is then "
                                            "locked by its key.", lock="")

    def claim_advisory(self) -> None:
        self.claim_advisory_candidates()
        take_where = [f"{self.c(self.q.id)} = {self.p('id')}"] + self.filters()
        attempt = self.role("attempt")
        if attempt is not None:
            self.add("TAKE", f"UPDATE {self.t()}\n"
                             f"SET {self.c(attempt)} = {self.c(attempt)} + 1\n"
                             + self.where(take_where) + "\n"
                             + f"RETURNING {self.select_list(returning_claim=True)}",
                     "Under its key's lock, confirm the row is still due and count the attempt.")
        else:
            self.add("TAKE", f"SELECT {self.select_list()}\nFROM {self.t()}\n"
                             + self.where(take_where),
                     "Under its key's lock, confirm the row is still due.")
        if self.d.name == "postgres":
            self.add("LOCK", "SELECT pg_try_advisory_lock(hashtextextended(%(key)s, 0))",
                     "Take the session-level lock on a job's key, without waiting.")
            self.add("UNLOCK", "SELECT pg_advisory_unlock(hashtextextended(%(key)s, 0))",
                     "Release the session-level lock on a job's key.")

    def group_filters(self) -> list[str]:
        """The unfinished rows of the worker's group (a FIFO group's members)."""
        g = self.role("group")
        assert g is not None
        out = [f"{self.c(g)} = {self.p('group')}"]
        pa = self.role("processed_at")
        if pa is not None:
            out.append(f"{self.c(pa)} IS NULL")
        return out

    def fifo(self) -> None:
        head_filters = self.group_filters()
        head = "\n".join((
            f"    SELECT {self.c(self.q.id)}",
            f"    FROM {self.t()}",
            self.where(head_filters, "    "),
            f"    ORDER BY {self.order()}",
            "    LIMIT 1",
        ))
        conds = [f"{self.c(self.q.id)} = (\n{head}\n)"]
        ra = self.role("retry_after")
        if ra is not None:
            conds.append(f"{self.c(ra)} <= {self.p('now')}")
        if self.d.name == "postgres":
            self.add("FIFO_GUARD",
                     "SELECT pg_try_advisory_xact_lock(hashtextextended(%(fifo_key)s, 0))",
                     "Serialise claims of one FIFO group for the rest of the transaction.")
        if self.q.form == ROW_LOCK:
            self.add("FIFO_CLAIM", f"SELECT {self.select_list()}\nFROM {self.t()}\n"
                     + self.where(conds) + "\nFOR UPDATE SKIP LOCKED",
                     "Claim the group's head, or nothing when it is held or not yet due.")
            return
        lu = self.role("locked_until")
        assert lu is not None
        held = "\n".join((
            "    SELECT 1",
            f"    FROM {self.t()}",
            self.where(head_filters + [f"{self.c(lu)} > {self.p('now')}"], "    "),
        ))
        conds.append(f"NOT EXISTS (\n{held}\n)")
        self.add("FIFO_CLAIM", f"UPDATE {self.t()}\nSET " + ",\n    ".join(self.claim_set())
                 + "\n" + self.where(conds) + "\n"
                 + f"RETURNING {self.select_list(returning_claim=True)}",
                 "Claim the group's head under a lease, or nothing while any row of the group "
                 "is leased or the head is not yet due.")

    def settlements(self) -> None:
        q = self.q
        pa, ra, attempt, g = (self.role(r) for r in ("processed_at", "retry_after", "attempt",
                                                       "group"))
        many = " Returns the ids settled." if q.lease else ""
        if pa is not None:
            finish = [f"{self.c(pa)} = {self.p('now')}"] + self.clear_lease()
            self.update("FINISH", finish, "Ack or drop: mark the row processed (kept for audit).")
            if self.batches:
                self.many("FINISH_MANY", finish, "Ack or drop many rows: mark them processed."
                          + many)
        else:
            self.add("FINISH", f"DELETE FROM {self.t()}\n" + self.where(self.guard()),
                     "Ack or drop: delete the row.")
            if self.batches:
                self.many("FINISH_MANY", None, "Ack or drop many rows: delete them." + many)
        # Row lock counts the attempt when it settles a retry; the other forms counted it at
        # the claim.
        count = ([f"{self.c(attempt)} = {self.c(attempt)} + 1"]
                 if attempt is not None and q.form == ROW_LOCK and not q.count_crashes else [])
        if q.lease:
            self.update("RETRY", self.clear_lease(), "Return the row to the queue now.")
        elif count:
            self.update("RETRY", count, "Return the row to the queue now, counting the attempt.")
        if ra is not None:
            self.update("RETRY_AFTER", [f"{self.c(ra)} = {self.p('retry_after')}"]
                        + self.clear_lease() + count,
                        "Return the row to the queue, due at `retry_after`.")
        keep_attempt = ([f"{self.c(attempt)} = {self.p('attempt')}"]
                        if attempt is not None and (q.form != ROW_LOCK or q.count_crashes)
                        else [])
        if q.dead_letter_group is not None and g is not None:
            self.update("DEAD_LETTER", [f"{self.c(g)} = {self.p('dead_group')}"]
                        + self.clear_lease() + keep_attempt,
                        "Move a spent row to the dead-letter group, keeping its attempt count.")
        if q.dead_letter_table is not None:
            values: list[str] = []
            for f in q.fields:
                if f.role == "locked_until":
                    values.append("NULL")
                elif f.role == "attempt" and keep_attempt:
                    values.append(self.p("attempt"))
                else:
                    values.append(self.c(f))
            cols = ", ".join(self.c(f) for f in q.fields)
            self.add("DEAD_LETTER_COPY",
                     f"INSERT INTO {self.t(q.dead_letter_table)} ({cols})\n"
                     f"SELECT {', '.join(values)}\nFROM {self.t()}\n" + self.where(self.guard()),
                     "Copy a spent row to the dead-letter table (same transaction as the "
                     "delete).")
            self.add("DEAD_LETTER_DELETE", f"DELETE FROM {self.t()}\n" + self.where(self.guard()),
                     "Remove the row copied to the dead-letter table.")

    # -- what `inboxgen status`, `requeue` and `prune` run -----------------------------------

    def operations(self) -> None:
        q = self.q
        g, pa, ra, lu = (self.role(r) for r in ("group", "processed_at", "retry_after",
                                                  "locked_until"))
        unfinished = [f"{self.c(pa)} IS NULL"] if pa is not None else []
        ready = " AND ".join(self.filters(with_group=False)) or "1 = 1"

        def count(conds: list[str]) -> str:
            return f"SUM(CASE WHEN {' AND '.join(conds) or '1 = 1'} THEN 1 ELSE 0 END)"

        now = self.p("now")
        cols = [f"{self.c(g) if g is not None else 'NULL'} AS queue_group",
                f"{count([ready])} AS ready",
                (count(unfinished + [f"{self.c(ra)} > {now}"]) if ra is not None else "0")
                + " AS scheduled",
                (count(unfinished + [f"{self.c(lu)} > {now}"]) if lu is not None and q.lease
                 else "NULL") + " AS in_work",
                (f"{count([f'{self.c(pa)} IS NOT NULL'])}" if pa is not None else "NULL")
                + " AS finished",
                (f"MIN(CASE WHEN {ready} THEN {self.c(ra)} END)" if ra is not None else "NULL")
                + " AS oldest_ready"]
        grouped = f"\nGROUP BY {self.c(g)}\nORDER BY {self.c(g)}" if g is not None else ""
        self.add("STATUS", "SELECT " + ",\n       ".join(cols) + f"\nFROM {self.t()}" + grouped,
                 "Count the rows of each group by state at `now` (inboxgen status).")
        if q.dead_letter_table is not None:
            self.add("STATUS_DEAD", f"SELECT COUNT(*)\nFROM {self.t(q.dead_letter_table)}",
                     "Count the rows in the dead-letter table.")
        if self.d.name == "postgres":
            self.add("OLDEST_TRANSACTION",
                     "SELECT EXTRACT(EPOCH FROM clock_timestamp() - MIN(xact_start))\n"
                     "FROM pg_stat_activity\n"
                     "WHERE xact_start IS NOT NULL\n"
                     "  AND pid <> pg_backend_pid()\n"
                     "  AND datname = current_database()",
                     "The age in seconds of the database's oldest open transaction (a row-lock "
                     "worker's, or one that holds back vacuum).")
        if self.d.name == "postgres" and q.form == ADVISORY:
            self.add("ADVISORY_LOCKS",
                     "SELECT COUNT(*)\nFROM pg_locks\n"
                     "WHERE locktype = 'advisory'\n"
                     "  AND database = (SELECT oid FROM pg_database "
                     "WHERE datname = current_database())",
                     "Count the advisory locks held in the database (every table's).")
        if pa is not None:
            self.prune(pa)
        self.requeue(g, ra, lu)

    def prune(self, pa: Field) -> None:
        """Delete processed rows in batches of `limit`, so a large backlog never takes a long
        lock. MySQL takes no LIMIT in an IN subquery, but DELETE ... LIMIT is its own."""
        old = f"{self.c(pa)} < {self.p('before')}"
        doc = "Delete up to `limit` rows processed before `before` (inboxgen prune)."
        if self.mysql:
            self.add("PRUNE", f"DELETE FROM {self.t()}\nWHERE {old}\nLIMIT {self.p('limit')}",
                     doc)
        else:
            idc = self.c(self.q.id)
            batch = (f"    SELECT {idc}\n    FROM {self.t()}\n    WHERE {old}\n"
                     f"    LIMIT {self.p('limit')}")
            self.add("PRUNE", f"DELETE FROM {self.t()}\nWHERE {self.d.picked_by(idc, batch)}",
                     doc)
        self.add("PRUNABLE", f"SELECT COUNT(*)\nFROM {self.t()}\nWHERE {old}",
                 "Count the rows processed before `before`.")

    def ids_in(self, column: str) -> str:
        """`column` is one of the ids in parameter `ids` (PostgreSQL: an array; SQLite: a JSON
        array; MySQL: a list PyMySQL writes as (a, b, ...))."""
        if self.d.name == "postgres":
            return f"{column} = ANY({self.p('ids')}::{_pg_array_type(self.q.id)})"
        if self.mysql:
            return f"{column} IN {self.p('ids')}"
        return f"{column} IN (SELECT picked.value FROM json_each({self.p('ids')}) AS picked)"

    def requeue(self, g: Field | None, ra: Field | None, lu: Field | None) -> None:
        """Dead letters back to the queue, due now, all or those of `ids`; the attempt count
        reset to its start or kept (`reset_attempt`)."""
        q = self.q
        attempt = self.role("attempt")
        fresh = _initial_attempt(attempt) if attempt is not None else ""
        reset = (f"CASE WHEN {self.p('reset_attempt')} THEN {fresh} ELSE {self.c(attempt)} END"
                 if attempt is not None else "")
        doc = ("Put dead letters back into group `to_group`, due at `now`{which}; "
               "`reset_attempt` starts their attempt count again.")
        if q.dead_letter_group is not None and g is not None:
            sets = [f"{self.c(g)} = {self.p('to_group')}"]
            if attempt is not None:
                sets.append(f"{self.c(attempt)} = {reset}")
            if ra is not None:
                sets.append(f"{self.c(ra)} = {self.p('now')}")
            if lu is not None and q.lease:
                sets.append(f"{self.c(lu)} = NULL")
            head = f"UPDATE {self.t()}\nSET " + ",\n    ".join(sets)
            dead = f"{self.c(g)} = {self.p('dead_group')}"
            self.add("REQUEUE", f"{head}\nWHERE {dead}", doc.format(which=""))
            self.add("REQUEUE_IDS", f"{head}\nWHERE {dead}\n  AND {self.ids_in(self.c(q.id))}",
                     doc.format(which=", those of `ids`"))
        if q.dead_letter_table is not None:
            values: list[str] = []
            for f in q.fields:
                if f.role == "attempt":
                    values.append(reset)
                elif f.role == "retry_after":
                    values.append(self.p("now"))
                elif f.role == "locked_until" or f.role == "processed_at":
                    values.append("NULL")
                else:
                    values.append(self.c(f))
            dead_t = self.t(q.dead_letter_table)
            if self.d.name == "postgres":
                # One statement: the rows deleted are the rows inserted. An id the database
                # always generates is generated anew.
                keep = [(f, v) for f, v in zip(q.fields, values, strict=True)
                        if not (f is q.id and f.column.db_only)]
                cols = ", ".join(self.c(f) for f, _ in keep)
                returned = ", ".join(self.c(f) for f in q.fields)
                doc = ("Move dead letters{which} from the dead-letter table back into the queue, "
                       "due at `now`; `reset_attempt` starts their attempt count again.")
                for name, where in (("REQUEUE_MOVE", ""),
                                    ("REQUEUE_MOVE_IDS",
                                     f"\n    WHERE {self.ids_in(self.c(q.id))}")):
                    self.add(name, f"WITH moved AS (\n    DELETE FROM {dead_t}{where}\n"
                                   f"    RETURNING {returned}\n)\n"
                                   f"INSERT INTO {self.t()} ({cols})\n"
                                   f"SELECT {', '.join(v for _, v in keep)}\nFROM moved",
                             doc.format(which="" if not where else " of `ids`"))
                return
            cols = ", ".join(self.c(f) for f in q.fields)
            doc = ("Copy dead letters{which} back into the queue table, due at `now`; "
                   "`reset_attempt` starts their attempt count again.")
            copy = f"INSERT INTO {self.t()} ({cols})\nSELECT {', '.join(values)}\nFROM {dead_t}"
            self.add("REQUEUE_COPY", copy, doc.format(which=""))
            self.add("REQUEUE_COPY_IDS", f"{copy}\nWHERE {self.ids_in(self.c(q.id))}",
                     doc.format(which=" of `ids`"))
            back = f"{self.c(q.id)} IN (SELECT {self.c(q.id)} FROM {self.t()})"
            self.add("REQUEUE_DELETE", f"DELETE FROM {dead_t}\nWHERE {back}",
                     "Remove the dead letters copied back into the queue table.")

    def or_default(self, f: Field, value: str) -> str:
        """`value` for column `f` in an insert: where the column has a DDL default, the default
        stands in when the value is NULL (fixed text either way)."""
        if not f.optional:
            return value
        default = f.column.default_sql or "NULL"
        if self.d.name == "postgres" and default.startswith("'"):
            # An untyped literal would make COALESCE text; the column's type keeps it typed.
            default = f"CAST({default} AS {f.column.type_sql})"
        return f"COALESCE({value}, {default})"

    def returning_id(self) -> str:
        """MySQL has no INSERT ... RETURNING: its insert reads the cursor's lastrowid."""
        return "" if self.mysql else f"\nRETURNING {self.c(self.q.id)}"

    def inserts(self) -> None:
        fields = self.q.insert_fields
        cols = ", ".join(self.c(f) for f in fields)
        values = ", ".join(self.or_default(f, self.p(f.attr)) for f in fields)
        doc = "Enqueue one row (inside the caller's transaction); returns its id."
        if not fields:
            self.add("INSERT", f"INSERT INTO {self.t()} DEFAULT VALUES{self.returning_id()}",
                     doc)
            return
        insert = f"INSERT INTO {self.t()} ({cols})\nVALUES ({values})"
        if any(f.optional for f in fields):
            doc += " A column left at None takes its DDL default."
        self.add("INSERT", insert + self.returning_id(), doc)
        if self.q.unique:
            keys = ", ".join(self.c(f) for f in self.q.unique)
            if self.d.name == "mysql":
                pass  # insert_unique runs INSERT and takes a duplicate-key error as "queued"
            else:
                self.add("INSERT_UNIQUE", f"{insert}\nON CONFLICT ({keys}) DO NOTHING",
                         "Enqueue one row unless its unique key is already queued.")
        if self.d.name == "sqlite":
            # executemany() refuses a statement that returns rows (Python 3.12 and later).
            self.add("INSERT_MANY", insert, "Enqueue many rows: this INSERT, run once per row "
                                            "by executemany() in one call.")
        if self.d.name == "postgres" and not any(_is_array(f) for f in fields):
            # unnest() flattens arrays of arrays, so a table with an array column is
            # enqueued in bulk with executemany instead.
            arrays = ",\n    ".join(
                f"{self.p(f.attr)}::{_pg_array_type(f)}" for f in fields)
            if any(f.optional for f in fields):
                # Name unnest's columns after the table's, to give each its default.
                picked = ", ".join(self.or_default(f, self.c(f)) for f in fields)
                self.add("INSERT_MANY", f"INSERT INTO {self.t()} ({cols})\n"
                                        f"SELECT {picked}\nFROM unnest(\n    {arrays}\n) AS "
                                        f"u({cols})",
                         "Enqueue many rows in one statement: one array per column; a None "
                         "takes the column's DDL default.")
                return
            self.add("INSERT_MANY", f"INSERT INTO {self.t()} ({cols})\n"
                                    f"SELECT * FROM unnest(\n    {arrays}\n)",
                     "Enqueue many rows in one statement: one array per column.")


# A run of SQL that a line break may not split: a quoted name or string, or unquoted text.
_SQL_WORD = re.compile(r'(?:"(?:[^"]|"")*"|`(?:[^`]|``)*`|\'(?:[^\']|\'\')*\'|[^\s"`\'])+')
# Where a qualified name may break: between a quoted part and the dot that follows it.
_NAME_PARTS = re.compile(r'(?<=["`])(?=\.["`])')


def _wrap(line: str, width: int = 96) -> str:
    """Break a long line: a list (SELECT, RETURNING, INSERT columns) after its commas, then
    between words, then (names near the servers' 63- and 64-byte limits) between the parts of a
    qualified name, which SQL allows."""
    out = []
    for piece in _wrap_list(line, width).split("\n"):
        out.extend(_wrap_words(piece, width))
    return "\n".join(out)


def _wrap_words(line: str, width: int) -> list[str]:
    if len(line) <= width:
        return [line]
    indent = line[:len(line) - len(line.lstrip())]
    inner = indent + "    "
    words = [w for m in _SQL_WORD.finditer(line) for w in _NAME_PARTS.split(m.group(0))]
    out: list[str] = []
    current = ""
    for word in words:
        glue = "" if word.startswith(".") else " "
        candidate = f"{current}{glue}{word}" if current else indent + word
        if current and len(candidate) > width:
            out.append(current)
            current = inner + word
        else:
            current = candidate
    out.append(current)
    return out


def _wrap_list(line: str, width: int) -> str:
    if len(line) <= width or ", " not in line:
        return line
    head = re.match(r"\s*(\w+ (\w+ )?)?\(?", line)
    indent = " " * (head.end() if head else 0)
    out: list[str] = []
    current = ""
    for piece in line.split(", "):
        candidate = f"{current}, {piece}" if current else piece
        if current and len(candidate) + 1 > width:
            out.append(current + ",")
            current = indent + piece
        else:
            current = candidate
    out.append(current)
    return "\n".join(out)


def _is_array(f: Field) -> bool:
    return f.column.type_sql.rstrip().endswith("]") or f.column.type_sql.upper().startswith(
        "ARRAY")


def _pg_array_type(f: Field) -> str:
    base = f.column.type_sql
    base = _PG_SERIAL_ARRAY.get(base.upper(), base)
    return f"{base}[]"


def _initial_attempt(f: Field) -> str:
    """The attempt count a new row starts with: the column's DDL default where it is a number,
    else 0."""
    default = (f.column.default_sql or "").strip().strip("()")
    return default if default.isdigit() else "0"


def build_statements(queue: Queue) -> list[Statement]:
    return _Builder(queue).build()
