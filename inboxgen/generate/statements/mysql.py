"""MySQL/MariaDB's statement shapes: no UPDATE ... RETURNING (a claim selects its rows, locked,
and marks them in the same transaction), no LIMIT in an IN subquery, no INSERT ... RETURNING,
named locks (GET_LOCK) for session locks, and a claim that reads the claim-order index in
order."""

from __future__ import annotations

from inboxgen.generate.dialects import LEASE, ROW_LOCK
from inboxgen.generate.statements.base import CANCEL_DOC, Statements


class MySQLStatements(Statements):
    @property
    def batches(self) -> bool:
        """No batch settlements: MySQL/MariaDB has no UPDATE ... RETURNING to say which rows a
        lease's batch changed, and a row lock's multi-row DELETE ... IN (...) deadlocks
        against concurrent SKIP LOCKED claims where one row at a time does not: each row
        settles alone."""
        return False

    def force_index(self) -> str:
        """MySQL: read the claim-order index in order. A locking read that sorts instead locks
        every due row it examines, and then one claim holds the whole queue."""
        if not self.q.claim_index:
            return ""
        return f" FORCE INDEX ({self.d.quote(self.q.claim_index)})"

    def mark(self, name: str, sets: list[str], doc: str) -> None:
        """UPDATE the rows a MySQL claim selected (MySQL has no UPDATE ... RETURNING); `ids`
        is a list, which PyMySQL writes as a parenthesised list."""
        self.add(name, f"UPDATE {self.t()}\nSET " + ",\n    ".join(sets)
                 + f"\nWHERE {self.c(self.q.id)} IN {self.p('ids')}", doc)

    def claims(self) -> None:
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

    def fifo(self) -> None:
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
        name = "FROM (SELECT CONCAT(DATABASE(), '.', %(key)s) AS name) AS lock_name"
        self.add("CLAIM_GUARD", "SELECT GET_LOCK(IF(CHAR_LENGTH(name) > 64, SHA2(name, 256), "
                                f"name), %(wait)s)\n{name}",
                 "Take the table's claim turn (a session lock), waiting up to `wait` s.")
        self.add("CLAIM_UNGUARD", "SELECT RELEASE_LOCK(IF(CHAR_LENGTH(name) > 64, "
                                  f"SHA2(name, 256), name))\n{name}",
                 "Give the table's claim turn back.")

    def cancel(self) -> None:
        """No DELETE reads its own table in a subquery: CANCEL_PICK locks the row (skipping
        one a holder has locked), then CANCEL deletes it, in the caller's transaction."""
        idc = self.c(self.q.id)
        self.add("CANCEL_PICK", f"SELECT {idc}\nFROM {self.t()}\n"
                 + self.where(self.cancellable()) + "\nFOR UPDATE SKIP LOCKED",
                 "Lock queued row `id` for cancel() unless a worker holds it.")
        self.add("CANCEL", f"DELETE FROM {self.t()}\nWHERE {idc} = {self.p('id')}", CANCEL_DOC)

    def prune_batch(self, old: str) -> str:
        # No LIMIT in an IN subquery, but DELETE ... LIMIT is MySQL's own.
        return f"DELETE FROM {self.t()}\nWHERE {old}\nLIMIT {self.p('limit')}"

    def ids_in(self, column: str) -> str:
        # A list, which PyMySQL writes as (a, b, ...).
        return f"{column} IN {self.p('ids')}"

    def returning_id(self) -> str:
        return ""  # no INSERT ... RETURNING: the insert reads the cursor's lastrowid

    def insert_unique(self, insert: str, keys: str) -> None:
        pass  # insert_unique runs INSERT and takes a duplicate-key error as "queued"
