"""MySQL/MariaDB's statement shapes: no UPDATE ... RETURNING (a claim selects its rows, locked,
and marks them in the same transaction), no LIMIT in an IN subquery, no INSERT ... RETURNING,
named locks (GET_LOCK) for session locks, and a claim that reads the claim-order index in
order."""

from __future__ import annotations

from inboxgen.generate.dialects import LEASE, ROW_LOCK
from inboxgen.generate.model import Field
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
        """MySQL: read the claim-order index in order, from the claim's start. A locking read
        that sorts instead locks every due row it examines, and then one claim holds the whole
        queue. Left to choose, MariaDB also read a group claimed in id order from the group's
        head (`ref` on the group, the start a filter) once its statistics counted the entries
        purge keeps for a snapshot held open: the advisory form's read of candidates, unlocked,
        then read every row a drain had settled, at every round."""
        if not self.q.claim_index:
            return ""
        return f" FORCE INDEX ({self.d.quote(self.q.claim_index)})"

    def held_rows(self, by_lease: bool) -> str:
        # MariaDB may read the whole table for the jobs in work through an index on the key
        # (whose order serves GROUP BY) where its estimate of the live leases counts the entries
        # of rows deleted since, which purge has not yet removed.
        index = self.q.limits.in_work_index if self.q.limits is not None else None
        if not by_lease or index is None:
            return super().held_rows(by_lease)
        return f"{super().held_rows(by_lease)} FORCE INDEX ({self.d.quote(index)})"

    def mark(self, name: str, sets: list[str], doc: str) -> None:
        """UPDATE the rows a MySQL claim selected (MySQL has no UPDATE ... RETURNING); `ids`
        is a list, which PyMySQL writes as a parenthesised list."""
        self.add(name, f"UPDATE {self.t()}\nSET " + ",\n    ".join(sets)
                 + f"\nWHERE {self.c(self.q.id)} IN {self.p('ids')}", doc)

    def at_or_after(self, pairs: list[tuple[str, str]]) -> str:
        # MySQL/MariaDB's range optimizer reads a row comparison as a filter, not an index
        # start; this spelling is ranges it seeks to.
        (col, value), *rest = pairs
        if not rest:
            return f"{col} >= {value}"
        return f"({col} > {value} OR ({col} = {value} AND {self.at_or_after(rest)}))"

    # -- claims that read no scheduled rows ---------------------------------------------------

    # While True, the claims being built are kept to the priorities listed in `priorities`.
    walking = False

    def due_rows(self, columns: str, *, also: tuple[str, ...] = (), lock: str = "") -> str:
        if self.walking:
            pr = self.role("priority")
            assert pr is not None
            also = (*also, f"{self.c(pr)} IN {self.p('priorities')}")
        return super().due_rows(columns, also=also, lock=lock)

    def claims(self) -> None:
        """Beside each claim (and a key-limited lease's HELD_BACK, which reads the rows a claim
        reads), where the table has a priority and a due time, its twin kept to the
        priorities that have due rows (`priorities`, which NEXT_PRIORITY walks): MySQL
        has no LATERAL to read each priority's due rows on their own, but a list of priorities
        and the due time's bound make one index range per priority, which ends at its first
        row due later. The plain claim's one scan reads every row due later at a more urgent
        priority before it reaches a due row, and as a locking read it locks each row it reads
        until its transaction ends (InnoDB keeps the locks of rows a condition turned away):
        behind 1,000,000 of them one claim held 2,000,000 row locks, and a row lock's ten
        slots filled the buffer pool with lock heaps until the server aborted. The list is
        walked a probe per statement (NEXT_PRIORITY): in one statement (a recursive CTE)
        MariaDB reads a correlated subquery's rows from the start of the group, not from the
        priority before, and scans the group's rows for a GROUP BY unless its statistics are
        fresh."""
        self.claims_of_form()
        if not self.by_priority:
            return
        plain, self.out, self.walking = self.out, [], True
        try:
            self.claims_of_form()
        finally:
            walked, self.out, self.walking = self.out, plain, False
        for st in walked:
            if st.name in ("CLAIM", "CANDIDATES", "HELD_BACK"):
                self.add(f"{st.name}_BY_PRIORITY", st.sql,
                         f"{st.name} kept to the priorities `priorities` that have due rows "
                         "(NEXT_PRIORITY walks them): each priority's due rows are one index "
                         "range, so that no row due later is read.")
        self.next_priority()

    def claims_of_form(self) -> None:
        form = self.q.form
        attempt = self.role("attempt")
        if form == ROW_LOCK and self.q.count_crashes:
            self.claim_row_lock_counted()
        elif form == ROW_LOCK:
            self.claim_row_lock()
        elif form == LEASE and self.q.limits is not None:
            self.claim_limited()
        elif form == LEASE:
            self.select_claimable("CLAIM", f"Select up to `limit` due rows{self.start_doc} "
                                           f"and lock them until CLAIM_MARK, in the same "
                                           f"transaction.", also=self.claim_start)
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
            self.advisory_locks("a job's key")
        if form == ROW_LOCK and self.q.limits is not None:
            self.advisory_locks("a seat")  # [flow] limits: each job in work holds a seat

    def advisory_locks(self, what: str) -> None:
        # Lock names: prefixed with the database, hashed where they pass MySQL's 64.
        name = ("FROM (SELECT CONCAT(DATABASE(), '.', %(key)s) AS name) AS lock_name")
        self.add("LOCK", "SELECT GET_LOCK(IF(CHAR_LENGTH(name) > 64, SHA2(name, 256), "
                         f"name), 0)\n{name}",
                 f"Take the session-level lock on {what}, without waiting.")
        self.add("UNLOCK", "SELECT RELEASE_LOCK(IF(CHAR_LENGTH(name) > 64, SHA2(name, 256),"
                           f" name))\n{name}",
                 f"Release the session-level lock on {what}.")

    db_now = "UTC_TIMESTAMP(6)"
    window_start = "UTC_TIMESTAMP(6) - INTERVAL %(rate_seconds)s * 1000000 MICROSECOND"

    # The claim turn's lock name: the database's and queue's names hashed, so that it stays
    # within MySQL's 64 characters.
    _TURN = "CONCAT('inboxgen turn:', SHA1(CONCAT(DATABASE(), '.', %(queue)s)))"

    def claim_turn(self) -> None:
        """A named lock: session-level, so CLAIM_TURN goes before the claim's transaction and
        CLAIM_TURN_END after its commit (a read view begun under the turn sees every claim
        before it). GET_LOCK gives up after ten seconds; CLAIM then reads nothing."""
        self.add("CLAIM_TURN", f"SELECT GET_LOCK({self._TURN}, 10)",
                 "Wait (ten seconds at most) for the claim turn of a limited queue, held until "
                 "CLAIM_TURN_END; returns whether it came.")
        self.add("CLAIM_TURN_END", f"SELECT RELEASE_LOCK({self._TURN})",
                 "Give the claim turn up, after the claim's commit.")

    int_div = "DIV"  # `/` gives a decimal

    def fair_walk(self, key: str) -> str:
        """MySQL's subqueries cannot seek past a value they take from the walk (a dependent
        subquery reads the index from its start), so the walk is one read that groups the
        unfinished rows by key (a loose index scan), from the first key after `after`, then
        from the first key."""
        q = self.d.quote
        k, n = q("inboxgen_k"), q("inboxgen_n")
        walk = q("inboxgen_walk")

        def part(label: int, cond: str) -> str:
            return "\n".join((f"    SELECT {key} AS {k}, {label} AS {n}",
                              f"    FROM {self.t()}",
                              self.where([*self.unfinished(), cond], "    "),
                              f"    GROUP BY {key}", f"    ORDER BY {key}",
                              f"    LIMIT {self.p('limit')}"))

        after = self.p("after")
        return "\n".join((
            f"{q('inboxgen_keys')} ({k}, {n}) AS (",
            f"    SELECT {walk}.{k}, {walk}.{n}",
            "    FROM ((",
            *("    " + line for line in part(0, f"({after} IS NULL OR {key} > {after})")
              .splitlines()),
            "    ) UNION ALL (",
            *("    " + line for line in part(1, f"{key} <= {after}").splitlines()),
            f"    )) AS {walk}",
            f"    ORDER BY {walk}.{n}, {walk}.{k}",
            f"    LIMIT {self.p('limit')}",
            ")"))

    def turn_held(self) -> list[str]:
        return [f"IS_USED_LOCK({self._TURN}) = CONNECTION_ID()"]

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
            self.where(head_filters + self.not_paused()),
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

    def row_key(self) -> str:
        """The name of a counted row's session lock: the database, the table and the row's
        id, hashed to fit MySQL's 64 characters."""
        return f"SHA2(CONCAT(DATABASE(), '.', %(row_key)s, {self.c(self.q.id)}), 256)"

    @staticmethod
    def key_free(key: str) -> str:
        """No other session holds `key` (this one may: its own rows, as on PostgreSQL)."""
        return f"COALESCE(IS_USED_LOCK({key}), CONNECTION_ID()) = CONNECTION_ID()"

    def claim_row_lock_counted(self) -> None:
        """count_crashes: the claim counts its rows and commits at once, so a job that kills its
        process still spends its attempt. A session lock on each row's key (GET_LOCK) keeps the
        row from other claims from the claim until RELEASE after its settlement commits, so the
        claim and the count need no transaction around them (a worker runs each on its own).
        The claim passes over rows whose key another session holds (IS_USED_LOCK, which has no
        effect) and takes the keys of the rows it returns in its last column: a select list is
        evaluated for the rows returned alone, after any sort, so a claim cannot leave keys
        locked on rows it does not return. Only the holder of a row's lock takes its key, so
        no other session takes one between the two. A crash ends the session, which frees the
        rows; an attempt is counted only once its key is held."""
        attempt = self.role("attempt")
        assert attempt is not None
        key = self.row_key()
        self.select_claimable("CLAIM", f"Select up to `limit` due rows{self.start_doc} "
                                       f"whose keys no other session holds, and lock each "
                                       f"row's key for the session until RELEASE (the last "
                                       f"column is 1 where it did).",
                              also=(*self.claim_start, self.key_free(key)),
                              then=f"GET_LOCK({key}, 0)")
        self.mark("CLAIM_COUNT", [f"{self.c(attempt)} = {self.c(attempt)} + 1"],
                  "Count the next delivery of the claimed rows: committed at once, so a crash "
                  "still spends the attempt.")
        self.add("RELEASE", "SELECT RELEASE_ALL_LOCKS()",
                 "Unlock the keys of counted rows once their settlements have committed: every "
                 "key the session holds, as a session claims again only after its rows settled.")

    def cancel(self) -> None:
        """No DELETE reads its own table in a subquery: CANCEL_PICK locks the row (skipping
        one a holder has locked), then CANCEL deletes it, in the caller's transaction."""
        idc = self.c(self.q.id)
        conds = self.cancellable()
        if self.q.count_crashes and not self.q.lease:
            conds.append(self.key_free(self.row_key()))  # a counted row in work
        self.add("CANCEL_PICK", f"SELECT {idc}\nFROM {self.t()}\n"
                 + self.where(conds) + "\nFOR UPDATE SKIP LOCKED",
                 "Lock queued row `id` for cancel() unless a worker holds it.")
        if self.q.after_table is not None:
            self.cancel_dead(f"WHERE {idc} = {self.p('id')}")
            return
        self.add("CANCEL", f"DELETE FROM {self.t()}\nWHERE {idc} = {self.p('id')}", CANCEL_DOC)

    def replace_pick(self) -> None:
        """No UPDATE reads its own table in a subquery: REPLACE_PICK locks the key's row
        (replace_lock; passing over a counted row whose key a holder keeps), then REPLACE or
        DEBOUNCE writes it, by its id."""
        conds = self.replaceable()
        if self.q.count_crashes and not self.q.lease:
            conds.append(self.key_free(self.row_key()))  # a counted row in work
        self.add("REPLACE_PICK", f"SELECT {self.c(self.q.id)}\nFROM {self.t()}\n"
                 + self.where(conds) + f"\n{self.replace_lock}",
                 "Lock the queued row of the new row's unique key unless a worker holds it.")

    def replace_update(self, name: str, sets: list[str], doc: str) -> None:
        self.add(name, f"UPDATE {self.t()}\nSET " + ",\n    ".join(sets) + "\n"
                 f"WHERE {self.c(self.q.id)} = {self.p('id')}",
                 doc.replace("; returns its id", " (picked by REPLACE_PICK)"))

    @property
    def insert_new_gives(self) -> str:
        mark = ("the cursor's lastrowid is then 0, an insert's the number it gave"
                if self.q.numbers_inserts else
                "LAST_INSERT_ID(1) then makes the cursor's lastrowid 1, an insert leaves it 0")
        return f", where it changes nothing but locks that row ({mark})."

    def insert_new(self, fields: list[Field], values: list[str], keys: str) -> str:
        # A plain INSERT's duplicate-key error would leave a shared lock on the key's row, and
        # a locking read of a key with no row locks the gap where it would go: two callers
        # holding either deadlock when both go on to write. ON DUPLICATE KEY UPDATE locks the
        # key's row exclusively at once, so concurrent callers of one key take turns.
        cols = ", ".join(self.c(f) for f in fields)
        idc = self.c(self.q.id)
        same = idc if self.q.numbers_inserts else f"IF(LAST_INSERT_ID(1), {idc}, {idc})"
        return (f"INSERT INTO {self.t()} ({cols})\nVALUES ({', '.join(values)})\n"
                f"ON DUPLICATE KEY UPDATE {idc} = {same}")

    def later(self, time: str, seconds: str) -> str:
        return f"{time} + INTERVAL ROUND({seconds} * 1000000) MICROSECOND"

    from_no_table = " FROM DUAL"

    def same_or_both_null(self, a: str, b: str) -> str:
        return f"{a} <=> {b}"

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
