"""PostgreSQL's statement shapes: arrays for batches (`= ANY`, `unnest`), session and
transaction advisory locks, NOTIFY, and status read from the server's own views."""

from __future__ import annotations

from collections.abc import Sequence

from inboxgen.generate import catalog as cat
from inboxgen.generate.dialects import ADVISORY
from inboxgen.generate.model import Field
from inboxgen.generate.statements.base import CANCEL_DEAD_DOC, CANCEL_DOC, Statements

_PG_SERIAL_ARRAY = {"SERIAL": "INT", "SMALLSERIAL": "SMALLINT", "BIGSERIAL": "BIGINT"}


class PostgresStatements(Statements):
    # A uuid sorts as its 128-bit number (bytewise): the number plus one is the next uuid.
    # (MariaDB's UUID type sorts its time-based fields first: not there.)
    start_id_kinds = (cat.INT, cat.UUID)
    lease_pick_lock = "    FOR UPDATE SKIP LOCKED"

    # -- claims the primary key cannot serve ---------------------------------------------------

    @property
    def group_then_id(self) -> bool:
        """Whether claims order by (group, id): a grouped table with neither priority nor
        retry_after. Ordered by id alone, the primary key's index also gives the claim its
        order, and the planner takes it whenever its statistics say most rows are unfinished
        (a table analysed before a burst was drained, or a fresh one): that scan then reads
        every finished row and every other group's row ahead of the first claimable one.
        Matching the group with `= ANY(ARRAY[...])` keeps the group out of the planner's
        constants, so only the claim index, keyed (group, id), gives the order and the claim
        reads it whatever the statistics say. A fair claim reads in the order of its walk's
        index, (group, key, ...), which needs the group compared with `=`."""
        return (self.role("group") is not None and self.role("priority") is None
                and self.role("retry_after") is None
                and not (self.q.limits is not None and self.q.limits.fair))

    def in_group(self, group: Field) -> str:
        if not self.group_then_id:
            return super().in_group(group)
        return f"{self.c(group)} = ANY(ARRAY[{self.p('group')}])"

    def order(self) -> str:
        if not self.group_then_id:
            return super().order()
        group = self.role("group")
        assert group is not None
        return f"{self.c(group)}, {self.c(self.q.id)}"

    # -- claims that walk no scheduled rows ---------------------------------------------------

    # While True, the claims being built read the due rows priority by priority.
    walking = False

    @property
    def claim_start(self) -> tuple[str, ...]:
        # A walk from a start would read every row of each priority it passes over (the row
        # comparison takes the place of the due time's bound), where one from the head stops
        # at each priority's first row due later: it reads from the head.
        return () if self.walking else super().claim_start

    def claims(self) -> None:
        super().claims()
        if not self.by_priority:
            return
        plain, self.out, self.walking = self.out, [], True
        try:
            super().claims()
        finally:
            walked, self.out, self.walking = self.out, plain, False
        for st in walked:
            if st.name not in ("CLAIM", "CANDIDATES", "HELD_BACK"):
                continue
            if self.listed:
                self.add(f"{st.name}_BY_PRIORITY", st.sql,
                         f"{st.name} reading the due rows of each priority of `priorities` "
                         "in turn (most urgent first: those due_priorities() lists as having "
                         "due rows), so that no row due later at a more urgent priority is "
                         "read.")
            else:
                self.add(f"{st.name}_BY_PRIORITY", st.sql,
                         f"{st.name} reading the due rows priority by priority, so that rows "
                         "due later at a more urgent priority are not read: for a table holding "
                         "many of them (SCHEDULED).")
        self.scheduled()
        if self.listed:
            self.next_priority()

    @property
    def listed(self) -> bool:
        """Whether the claims by priority keep to a list of the priorities that have due rows
        (`priorities`, walked by NEXT_PRIORITY once a second while SCHEDULED counts enough
        rows due later) rather than finding them in the statement: a partitioned table's.
        There each probe of a walk in the statement is made once per partition (behind
        10,000,000 rows due later in ten partitions a claim by priority read 184 buffers
        against 69 kept to the list, and took 1.85 ms against 0.90 ms). On one table the
        walk's probes are one index descent each."""
        return self.q.partitioned

    def due_by_priority(self, columns: str, lock: str, also: tuple[str, ...] = ()) -> str:
        """SELECT `columns` of the first `limit` due rows in claim order, priority by priority:
        for each priority of unfinished rows (in that order, until `limit` rows came) its due
        rows, locked as `lock` says. The outer LIMIT stops the walk: priorities past it are
        never read, their rows never locked."""
        pr = self.role("priority")
        assert pr is not None
        prc = self.c(pr)
        cte, walk = self.priority_walk()
        unfinished = self.unfinished()
        due = [c for c in self.filters() if c not in unfinished]
        order = ", ".join(self.c(f) for f in (self.role("retry_after"), self.q.id) if f)
        inner = "\n".join(x for x in (
            f"    SELECT {columns}",
            f"    FROM {self.t()}",
            self.where(unfinished + [f"{prc} = {walk}.{prc}"] + due + list(also), "    "),
            f"    ORDER BY {order}",
            f"    LIMIT {self.p('limit')}",
            f"    {lock.strip()}" if lock else "",
        ) if x)
        return "\n".join((cte, "SELECT due.*", f"FROM {walk}", "CROSS JOIN LATERAL (", inner,
                          ") AS due", f"LIMIT {self.p('limit')}"))

    def priority_walk(self) -> tuple[str, str]:
        # (SCHEDULED, which counts the rows due later of every priority, walks them all.)
        if not (self.listed and self.walking):
            return super().priority_walk()
        pr = self.role("priority")
        assert pr is not None
        walk = "inboxgen_priorities"
        # The list is in claim order, and each priority's LATERAL read follows it.
        return (f"WITH {walk} ({self.c(pr)}) AS (\n"
                f"    SELECT unnest({self.p('priorities')}::{pg_array_type(pr)})\n"
                ")"), walk

    def scheduled(self) -> None:
        """SCHEDULED: how many unfinished rows are due later, counted up to `limit`, priority by
        priority (a probe per priority and the rows counted): what the runtime reads, once a
        second, to choose between the plain claim and the one by priority."""
        pr, ra = self.role("priority"), self.role("retry_after")
        assert pr is not None and ra is not None
        cte, walk = self.priority_walk()
        later = "\n".join((
            "    SELECT 1",
            f"    FROM {self.t()}",
            self.where(self.unfinished() + [f"{self.c(pr)} = {walk}.{self.c(pr)}",
                                            f"{self.c(ra)} > {self.p('now')}"], "    "),
            f"    LIMIT {self.p('limit')}",
        ))
        self.add("SCHEDULED", "\n".join((
            cte, "SELECT COUNT(*)", "FROM (", "    SELECT 1", f"    FROM {walk}",
            "    CROSS JOIN LATERAL (",
            "\n".join("    " + line for line in later.splitlines()),
            "    ) AS later", f"    LIMIT {self.p('limit')}", ") AS counted")),
            "Count the rows due later (up to `limit`), priority by priority.")

    def due_rows(self, columns: str, *, also: tuple[str, ...] = (), lock: str = "") -> str:
        if not self.walking:
            return super().due_rows(columns, also=also, lock=lock)
        # (Indented once more: the walk's pick is a LATERAL subquery.)
        return self.due_by_priority(columns.replace("\n", "\n    "), lock, also)

    def picked(self, lock: str, also: tuple[str, ...] = ()) -> str:
        if not self.walking:
            return super().picked(lock, also) + self.start_bound(also)
        inner = self.due_by_priority(self.c(self.q.id), lock, also)
        return self.d.picked_by(self.c(self.q.id),
                                "\n".join("    " + line for line in inner.splitlines()))

    def start_bound(self, also: tuple[str, ...]) -> str:
        """A partitioned table's UPDATE of picked rows that start at an id: the start again,
        outside the subquery. The rows are found by their ids (`= ANY(ARRAY(...))`), which the
        planner cannot bound, so the UPDATE probed the primary key of every partition; with
        the start there it leaves out those below it where the table is partitioned by range
        of id (a table whose old partitions hold processed rows, or another group's: a claim
        of one row behind 1,000,000 read 9 buffers where it read 29)."""
        start = f"{self.c(self.q.id)} >= {self.p('from_id')}"
        return f"\n  AND {start}" if self.q.partitioned and start in also else ""

    def cancel(self) -> None:
        """The row is picked as a claim picks it (unheld)."""
        where = f"WHERE {self.unheld(self.cancellable())}"
        if self.q.after_table is not None:
            self.cancel_dead(where)
            return
        self.add("CANCEL", f"DELETE FROM {self.t()}\n{where}", CANCEL_DOC)

    def cancel_dead(self, where: str) -> None:
        """To a dead-letter table in one statement: the DELETE's rows are what it copies."""
        q = self.q
        if q.dead_letter_table is None:
            super().cancel_dead(where)
            return
        cols = ", ".join(self.c(f) for f in q.fields)
        values = self.cancelled_values()
        self.add("CANCEL", f"WITH gone AS (\n    DELETE FROM {self.t()}\n    "
                           + where.replace("\n", "\n    ") + f"\n    RETURNING {cols}\n)\n"
                           f"INSERT INTO {self.t(q.dead_letter_table)} ({cols})\n"
                           f"SELECT {', '.join(values)}\nFROM gone", CANCEL_DEAD_DOC)

    def unheld(self, conds: list[str], *, shared: bool = False) -> str:
        """The id of the row that meets `conds` and no worker holds: picked as a claim picks
        it, passing over a row a holder has locked (and, counted, a row whose key a holder's
        session keeps). With `shared`, a counted row's key is tested with a shared lock,
        which other such picks share."""
        idc = self.c(self.q.id)
        if self.q.count_crashes and not self.q.lease:
            lock = "pg_try_advisory_xact_lock_shared" if shared else "pg_try_advisory_xact_lock"
            conds = [*conds, f"{lock}(hashtextextended(%(row_key)s || {idc}::text, 0))"]
        pick = "\n".join((f"    SELECT {idc}", f"    FROM {self.t()}", self.where(conds, "    "),
                          f"    {self.replace_lock if shared else 'FOR UPDATE SKIP LOCKED'}"))
        return self.d.picked_by(idc, pick)

    def replace_update(self, name: str, sets: list[str], doc: str) -> None:
        self.add(name, f"UPDATE {self.t()}\nSET " + ",\n    ".join(sets) + "\n"
                 + f"WHERE {self.unheld(self.replaceable(), shared=True)}"
                 + self.returning_id(), doc)

    def now_of(self, f: Field) -> str:
        # A TIMESTAMP column holds UTC without a zone (the runtime binds naive UTC).
        if f.column.kind == cat.TIMESTAMPTZ:
            return self.db_now
        return f"({self.db_now} AT TIME ZONE 'UTC')"

    def later(self, time: str, seconds: str) -> str:
        return f"{time} + make_interval(secs => {seconds})"

    def held_batch(self) -> str:
        """One array per guard parameter, one entry per row (a row lock's rows are the
        transaction's: their ids are enough)."""
        idc = self.c(self.q.id)
        if not self.q.lease:
            return f"{idc} = ANY({self.p('id')}::{pg_array_type(self.q.id)})"
        held = self.held_columns(self.q)
        cols = ", ".join(self.c(f) for _, f in held)
        picked = ", ".join(f"held.{p}{_HELD_PLUS.get(p, '')}" for p, _ in held)
        source = f"    FROM {self.unnest(held, '        ')}"
        return f"({cols}) IN (\n    SELECT {picked}\n{source}\n)"

    def unnest(self, held: list[tuple[str, Field]], indent: str) -> str:
        """`unnest(...) AS held(...)`: one array parameter per entry of `held`, cast to its
        column's array type, as the rows of `held`."""
        arrays = ", ".join(f"{self.p(p)}::{pg_array_type(f)}" for p, f in held)
        return f"unnest({arrays})\n{indent}AS held({', '.join(p for p, _ in held)})"

    def finish_many(self, sets: list[str], result: Field | None, doc: str, then: str) -> None:
        """With a result column: each row marked with its own result."""
        if result is None:
            super().finish_many(sets, result, doc, then)
            return
        self.joined_many("FINISH_MANY", sets, "result", result, f"{self.c(result)} = held.result",
                         doc + ", each with its `result`." + then)

    def renew_many(self, sets: list[str], progress: Field | None, doc: str) -> None:
        """With a progress column: each row's last reported progress written with it."""
        if progress is None:
            super().renew_many(sets, progress, doc)
            return
        c = self.c(progress)
        self.joined_many("RENEW_MANY", sets, "progress", progress,
                         f"{c} = COALESCE(held.progress, {self.t()}.{c})",
                         doc + ", each with its last reported `progress` (None keeps what the "
                         "row holds); returns the ids renewed.")

    def joined_many(self, name: str, sets: list[str], param: str, f: Field, set_held: str,
                    doc: str) -> None:
        """A batch settlement that writes a value of its own to each row: the rows joined to
        one array per guard parameter and one of `param` values (UPDATE ... FROM unnest)."""
        q = self.q
        guard = self.held_columns(q) if q.lease else [("id", q.id)]
        t = self.t()
        matched = [f"{t}.{self.c(col)} = held.{p}{_HELD_PLUS.get(p, '')}" for p, col in guard]
        returning = f"\nRETURNING {t}.{self.c(q.id)}" if q.lease else ""
        self.add(name, f"UPDATE {t}\nSET " + ",\n    ".join([*sets, set_held])
                 + f"\nFROM {self.unnest([*guard, (param, f)], '    ')}\n"
                 + "WHERE " + "\n  AND ".join(matched) + returning, doc)

    def claim_row_lock_counted(self) -> None:
        """count_crashes: the claim counts its rows and commits at once, so a job that kills its
        process still spends its attempt. The row's lock ends with that commit, so a session
        lock on the row's key keeps it from other claims instead, from its pick until RELEASE
        after its settlement commits: another claim's pick passes over a row whose key it
        cannot lock, and never counts it again. A crash ends the session, which frees the
        rows, counted."""
        attempt = self.role("attempt")
        assert attempt is not None
        idc = self.c(self.q.id)
        key = "hashtextextended(%(row_key)s || {}::text, 0)"
        free = f"pg_try_advisory_xact_lock({key.format(idc)})"
        # The key's session lock is taken in RETURNING, once per counted row: a CTE joined
        # to the lock function said the same at half again the planning cost of every claim.
        picked = self.picked("    FOR UPDATE SKIP LOCKED", (*self.claim_start, free))
        self.add("CLAIM", f"UPDATE {self.t()}\n"
                          f"SET {self.c(attempt)} = {self.c(attempt)} + 1\n"
                          f"WHERE {picked}\n"
                          f"RETURNING {self.select_list(returning_claim=True)},\n"
                          f"    pg_advisory_lock({key.format(idc)}) AS key_locked",
                 "Count the next delivery of up to `limit` rows"
                 + self.start_doc
                 + " (commit it at once, so a crash still spends the attempt); each row's key "
                 "stays locked for the session until RELEASE.")
        self.add("RELEASE", f"SELECT pg_advisory_unlock({key.format('held.id')})\n"
                            f"FROM unnest({self.p('id')}::{pg_array_type(self.q.id)}) AS held(id)",
                 "Unlock the keys of counted rows once their settlements have committed.")

    db_now = "clock_timestamp()"  # not now(): the transaction's start
    window_start = "clock_timestamp() - make_interval(secs => %(rate_seconds)s)"

    # PostgreSQL locks no row on the nullable side of an outer join: fair_rows_join locks
    # the walked rows as it reads them.
    fair_lock = ""

    claims_fair_alone = True

    def claim_fair_alone(self) -> None:
        """[flow] fair alone: the walk's first `limit` rows locked (still due as they are
        locked), leased and returned by one statement, with a row of NULLs for each key walked
        without one; it needs no claim turn, as it counts nothing."""
        q = self.d.quote
        rows, r, k = q("inboxgen_rows"), q("inboxgen_r"), q("inboxgen_k")
        idc, row_id = self.c(self.q.id), q("inboxgen_id")
        picked, claimed, pid = q("inboxgen_picked"), q("inboxgen_leased"), q("inboxgen_picked_id")
        order = self.fair_order()
        first = "\n".join((
            f"{idc} = ANY (ARRAY(", f"    SELECT {rows}.{row_id}", f"    FROM {rows}",
            f"    WHERE {rows}.{row_id} IS NOT NULL", f"    ORDER BY {order}",
            f"    LIMIT {self.p('limit')}", "))"))
        counts = ["NULL AS " + q(c) for c in ("inboxgen_in_work", "inboxgen_claimed")] + [
            f"{rows}.{k} AS {q('inboxgen_key')}", f"NULL AS {q('inboxgen_key_in_work')}",
            f"CASE WHEN {idc} IS NULL THEN 0 ELSE {rows}.{r} END AS {q('inboxgen_rank')}",
            *self.weight_columns()]
        self.add("CLAIM", "\n".join((
            self.fair_ctes() + ",",
            f"{picked} AS (",
            f"    SELECT {idc} AS {pid}",
            f"    FROM {self.t()}",
            self.where([first, *self.filters()], "    "),
            "    FOR UPDATE SKIP LOCKED",
            "),",
            f"{claimed} AS (",
            f"    UPDATE {self.t()}",
            "    SET " + ",\n        ".join(self.claim_set()),
            f"    FROM {picked}",
            f"    WHERE {self.t()}.{idc} = {picked}.{pid}",
            f"    RETURNING {self.select_list(returning_claim=True)}",
            ")",
            f"SELECT {self.select_list()},",
            *("       " + c for c in ",\n".join(counts).splitlines()),
            f"FROM {rows}",
            f"LEFT JOIN {claimed} ON {claimed}.{idc} = {rows}.{row_id}",
            f"WHERE {rows}.{r} = 1 OR {claimed}.{idc} IS NOT NULL",
            f"ORDER BY {order}",
        )), "Walk up to `limit` values of the key from the first after `after`, and claim the "
            "first due rows of each under a lease ending at `locked_until`: "
            + self.weighted_doc() + ", `limit` at most; each key walked without a due row "
            "gives a row of NULLs.")

    def fair_head(self, outer: str, conds: list[str], order: list[Field]) -> tuple[str, str]:
        """A LATERAL subquery: the planner joins a row found by a subquery's id with a hash of
        the whole table, where a lateral read is one index probe."""
        head = self.d.quote("inboxgen_head")
        join = " ".join(x for x in (outer, "JOIN LATERAL") if x)
        return "\n".join((
            f"    {join} (",
            f"        SELECT {', '.join(self.c(f) for f in order)}", f"        FROM {self.t()}",
            self.where(conds, "        "), f"        ORDER BY {self.order()}", "        LIMIT 1",
            f"    ) AS {head} ON TRUE")), ", ".join(f"{head}.{self.c(f)}" for f in order)

    def fair_rows_join(self, row_id: str) -> str:
        rows, job = self.d.quote("inboxgen_rows"), self.d.quote("inboxgen_job")
        idc = self.c(self.q.id)
        return "\n".join((
            "LEFT JOIN (",
            f"    SELECT {self.select_list()}",
            f"    FROM {self.t()}",
            self.where([f"{idc} = ANY (ARRAY(SELECT {rows}.{row_id} FROM {rows}))",
                        *self.filters()], "    "),
            "    FOR UPDATE SKIP LOCKED",
            f") AS {job} ON {job}.{idc} = {rows}.{row_id}"))

    def claim_turn(self) -> None:
        self.add("CLAIM_TURN", "SELECT pg_advisory_xact_lock(hashtextextended('inboxgen turn:' "
                               "|| %(queue)s, 0))",
                 "Wait for the claim turn of a limited queue, held to the end of the "
                 "transaction.")

    def advisory_locks(self, what: str) -> None:
        self.add("LOCK", "SELECT pg_try_advisory_lock(hashtextextended(%(key)s, 0))",
                 f"Take the session-level lock on {what}, without waiting.")
        self.add("UNLOCK", "SELECT pg_advisory_unlock(hashtextextended(%(key)s, 0))",
                 f"Release the session-level lock on {what}.")

    def fifo_guard(self) -> None:
        self.add("FIFO_GUARD",
                 "SELECT pg_try_advisory_xact_lock(hashtextextended(%(fifo_key)s, 0))",
                 "Serialise claims of one FIFO group for the rest of the transaction.")

    def server_status(self) -> None:
        self.add("OLDEST_TRANSACTION",
                 "SELECT EXTRACT(EPOCH FROM clock_timestamp() - MIN(xact_start))\n"
                 "FROM pg_stat_activity\n"
                 "WHERE xact_start IS NOT NULL\n"
                 "  AND pid <> pg_backend_pid()\n"
                 "  AND datname = current_database()",
                 "The age in seconds of the database's oldest open transaction (a row-lock "
                 "worker's, or one that holds back vacuum).")
        # The table by its quoted name, bound as a value: the statistics views key tables by
        # oid, found on the search path as the other statements find the table. A partitioned
        # table holds no rows of its own: its partitions (pg_inherits, at every level) do.
        # No row where the table is not there.
        self.add("TABLE_HEALTH",
                 "WITH RECURSIVE tree (part) AS (\n"
                 "    SELECT to_regclass(%(table)s)::oid\n"
                 "    UNION ALL\n"
                 "    SELECT inhrelid FROM pg_inherits JOIN tree ON inhparent = part\n"
                 ")\n"
                 "SELECT SUM(n_dead_tup)::int8 AS n_dead_tup,\n"
                 "       SUM(n_live_tup)::int8 AS n_live_tup,\n"
                 "       SUM(n_tup_hot_upd)::float8 / NULLIF(SUM(n_tup_upd), 0) AS hot_share,\n"
                 "       MAX(last_autovacuum) AS last_autovacuum\n"
                 "FROM pg_stat_user_tables\n"
                 "WHERE relid IN (SELECT part FROM tree)\n"
                 "HAVING COUNT(*) > 0",
                 "The table's dead and live row versions, the share of its updates that were "
                 "HOT (wrote no index entry), and its last autovacuum, as the server's "
                 "statistics count them (inboxgen status); a partitioned table's are its "
                 "partitions' summed, with the latest autovacuum of any.")
        if self.q.form == ADVISORY:
            self.add("ADVISORY_LOCKS",
                     "SELECT COUNT(*)\nFROM pg_locks\n"
                     "WHERE locktype = 'advisory'\n"
                     "  AND database = (SELECT oid FROM pg_database "
                     "WHERE datname = current_database())",
                     "Count the advisory locks held in the database (every table's).")

    def prune_partitions(self, pa: Field) -> None:
        # A partition's name is an identifier, which no statement can bind: the statements
        # that name one hold `{partition}`, which prune fills with the quoted name the server
        # reported (psycopg.sql.Identifier), and nothing else.
        t = self.t()
        self.add("PARTITIONS",
                 "SELECT n.nspname AS schema, c.relname AS name,\n"
                 "       pg_get_expr(c.relpartbound, c.oid) AS bounds,\n"
                 "       i.inhdetachpending AS detaching\n"
                 "FROM pg_inherits i\n"
                 "JOIN pg_class c ON c.oid = i.inhrelid\n"
                 "JOIN pg_namespace n ON n.oid = c.relnamespace\n"
                 "WHERE i.inhparent = to_regclass(%(table)s)\n"
                 "ORDER BY c.relname",
                 "The table's partitions: schema, name, bounds (`FOR VALUES ...`, `DEFAULT`), and "
                 "whether a detach of it is pending (inboxgen prune --partitions).")
        self.add("PARTITION_KEEPS",
                 f"SELECT EXISTS (\n    SELECT 1\n    FROM {{partition}}\n"
                 f"    WHERE {self.c(pa)} IS NULL OR {self.c(pa)} >= %(before)s\n)",
                 "Whether partition `{partition}` holds a row not processed, or processed at or "
                 "after `before`: such a partition is kept.")
        self.add("DETACH_PARTITION",
                 f"ALTER TABLE {t} DETACH PARTITION {{partition}} CONCURRENTLY",
                 "Detach partition `{partition}` without blocking claims (outside a "
                 "transaction: it waits for the transactions that may still read it).")
        self.add("FINISH_DETACH",
                 f"ALTER TABLE {t} DETACH PARTITION {{partition}} FINALIZE",
                 "Finish a detach of partition `{partition}` that was interrupted.")
        self.add("ATTACH_PARTITION",
                 f"ALTER TABLE {t} ATTACH PARTITION {{partition}} {{bounds}}",
                 "Attach partition `{partition}` again with its `{bounds}` as PARTITIONS read "
                 "them (a row was requeued in it while it was being detached).")
        self.add("DROP_PARTITION", "DROP TABLE {partition}",
                 "Drop detached partition `{partition}`, whose rows were all processed before "
                 "the cutoff.")

    def ids_in(self, column: str) -> str:
        return f"{column} = ANY({self.p('ids')}::{pg_array_type(self.q.id)})"

    def requeue_from_table(self, values: list[str], reset: str) -> None:
        # One statement: the rows deleted are the rows inserted. An id the database always
        # generates is generated anew.
        q = self.q
        assert q.dead_letter_table is not None
        dead_t = self.t(q.dead_letter_table)
        keep = [(f, v) for f, v in zip(q.fields, values, strict=True)
                if not (f is q.id and f.column.db_only)]
        cols = ", ".join(self.c(f) for f, _ in keep)
        returned = ", ".join(self.c(f) for f in q.fields)
        doc = ("Move dead letters{which} from the dead-letter table back into the queue, "
               "due at `now`; `reset_attempt` starts their attempt count again.")
        for name, where in (("REQUEUE_MOVE", ""),
                            ("REQUEUE_MOVE_IDS", f"\n    WHERE {self.ids_in(self.c(q.id))}")):
            self.add(name, f"WITH moved AS (\n    DELETE FROM {dead_t}{where}\n"
                           f"    RETURNING {returned}\n)\n"
                           f"INSERT INTO {self.t()} ({cols})\n"
                           f"SELECT {', '.join(v for _, v in keep)}\nFROM moved",
                     doc.format(which="" if not where else " of `ids`"))

    def attempt_value(self) -> str:
        # Typed, so the parameter has one type wherever the statement names it: a lease's
        # guard (`attempt = %(attempt)s + 1`) reads it as an INTEGER, and the bare value would
        # take the type of the dead-letter table's column (a SMALLINT one would not prepare).
        return f"CAST({self.p('attempt')} AS INTEGER)"

    def dead_letter_to_table(self, values: list[str]) -> None:
        # One statement: the row deleted is the row inserted, and a worker that sends its
        # settlements together (a pipeline) needs no result between two statements.
        q = self.q
        assert q.dead_letter_table is not None
        cols = ", ".join(self.c(f) for f in q.fields)
        where = self.where(self.guard(), "    ")
        self.add("DEAD_LETTER_MOVE",
                 f"WITH moved AS (\n    DELETE FROM {self.t()}\n{where}\n"
                 f"    RETURNING {cols}\n)\n"
                 f"INSERT INTO {self.t(q.dead_letter_table)} ({cols})\n"
                 f"SELECT {', '.join(values)}\nFROM moved",
                 "Move a spent row to the dead-letter table: delete it from the queue and "
                 "insert it there, in one statement.")

    def column_default(self, f: Field) -> str:
        default = super().column_default(f)
        if default.startswith("'"):
            # An untyped literal would make COALESCE text; the column's type keeps it typed.
            default = f"CAST({default} AS {f.column.type_sql})"
        return default

    def insert_many(self, fields: Sequence[Field], cols: str, insert: str) -> None:
        if any(_is_array(f) for f in fields):
            # unnest() flattens arrays of arrays, so a table with an array column is
            # enqueued in bulk with executemany instead.
            return
        arrays = ",\n    ".join(f"{self.p(f.attr)}::{pg_array_type(f)}" for f in fields)
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

    def notifications(self) -> None:
        self.add("NOTIFY", "SELECT pg_notify(%(channel)s, %(payload)s)",
                 "Wake workers listening on the table's channel; the payload is the group.")
        self.insert_notify()

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


# What a held row's guard value is matched with: the claim counted the attempt the worker holds.
_HELD_PLUS = {"attempt": " + 1"}


def _is_array(f: Field) -> bool:
    return f.column.type_sql.rstrip().endswith("]") or f.column.type_sql.upper().startswith(
        "ARRAY")


def pg_array_type(f: Field) -> str:
    """The array type of column `f` (a serial's is its integer type's)."""
    base = f.column.type_sql
    base = _PG_SERIAL_ARRAY.get(base.upper(), base)
    return f"{base}[]"
