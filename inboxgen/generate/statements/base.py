"""The statements every dialect shares, and the places where dialects differ (postgres.py,
mysql.py and sqlite.py fill them in).

Each statement is fixed text with identifiers quoted for the dialect and values as named
placeholders; nothing is assembled at run time. The shapes, per claim form:

- row lock: CLAIM (SELECT ... FOR UPDATE SKIP LOCKED; the claim's transaction holds the job),
  settlements in the same transaction; a crash rolls back, so the claim does not count the
  attempt and RETRY / RETRY_AFTER do.
- lease: CLAIM (UPDATE ... RETURNING of the rows a subquery picked, committed at once) writes
  the expiry, which is the ownership token: RENEW and every settlement are guarded by
  `locked_until = <held expiry>` (and the attempt, where there is one).
- advisory: CANDIDATES lists due rows, LOCK takes the session lock on a row's key, TAKE confirms
  the row is still claimable (counting the attempt), UNLOCK releases it after settlement.

Claims report the attempt as it stood before the claim (`attempt - 1` where the claim counted it).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import attrs

from inboxgen.generate import catalog as cat
from inboxgen.generate.dialects import ADVISORY, LEASE, ROW_LOCK
from inboxgen.generate.model import Field, Queue, TableRef

CANCEL_DOC = ("Delete queued row `id` unless a worker holds it (or it is finished); returns "
              "whether it did. Nothing is committed here.")
CANCEL_DEAD_DOC = ("Move queued row `id` to the dead letters unless a worker holds it (or it is "
                   "finished), so the jobs that wait for it are told it failed; returns whether "
                   "it did. Nothing is committed here.")


# The parameter a claim's start gives for each column of the claim order.
START_PARAMS = {"priority": "from_priority", "retry_after": "from_retry_after", "id": "from_id"}


@attrs.frozen
class Statement:
    name: str
    sql: str
    params: tuple[str, ...]
    doc: str


class Statements:
    """A queue table's statements: `build()` returns them all. Subclasses, one per dialect,
    give the shapes that differ."""

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
        """The conditions a claimed row meets: a claim's (`with_group`: of the worker's group,
        not paused), or any due row's (STATUS's ready count)."""
        out: list[str] = []
        g, pa, ra, lu = (self.role(r) for r in ("group", "processed_at", "retry_after",
                                                  "locked_until"))
        if g is not None and with_group:
            out.append(self.in_group(g))
        if pa is not None:
            out.append(f"{self.c(pa)} IS NULL")
        if ra is not None:
            out.append(f"{self.c(ra)} <= {self.p('now')}")
        if lu is not None:
            out.append(f"({self.c(lu)} IS NULL OR {self.c(lu)} <= {self.p('now')})")
        if with_group:
            out.extend(self.not_paused())
        out.extend(self.not_waiting())
        return out

    def not_waiting(self) -> list[str]:
        """`after`: a row that waits for other jobs (`parents` above 0) is claimed once none
        of them is still in the queue unfinished: each is finished (processed, or gone as a
        finished row is) or dead (then the delivery settles it, AFTER_STATE). The subquery runs
        for the waiting rows alone."""
        edges, parents = self.q.after_table, self.role("parents")
        if edges is None or parents is None:
            return []
        q = self.d.quote
        pa, g = self.role("processed_at"), self.role("group")
        parent, edge = q("parent"), q("edge")
        # The outer row's parents again, inside: a subquery whose only tie to the row is the
        # id PostgreSQL runs once a claim, hashing every waiting row's parents (1.7 ms over
        # 1,000 of them, against 0.05 ms for the claim); this one it runs per waiting row, two
        # index probes.
        conds = [f"{edge}.{q('job_id')} = {self.t()}.{self.c(self.q.id)}",
                 f"{self.t()}.{self.c(parents)} > 0"]
        if pa is not None:
            conds.append(f"{parent}.{self.c(pa)} IS NULL")
        if self.q.dead_letter_group is not None and g is not None:
            conds.append(f"{parent}.{self.c(g)} <> {self.p('dead_group')}")
        return [f"({self.c(parents)} = 0 OR NOT EXISTS (\n" + "\n".join((
            "    SELECT 1", f"    FROM {self.t(edges)} AS {edge}",
            f"    JOIN {self.t()} AS {parent} ON {parent}.{self.c(self.q.id)} = "
            f"{edge}.{q('after_id')}", self.where(conds, "    "))) + "\n))"]

    def not_paused(self) -> list[str]:
        """[flow] pauses: a claim takes nothing while the queue, or the worker's group, is
        paused. The subquery names no column of the claimed row, so the database evaluates it
        once per claim, not per row."""
        pauses = self.q.pause_table
        if pauses is None:
            return []
        conds = [f"{self.d.quote('queue')} = {self.p('queue')}"]
        if self.role("group") is not None:
            pg = self.d.quote("paused_group")
            conds.append(f"({pg} IS NULL OR {pg} = {self.p('group')})")
        return ["NOT EXISTS (\n" + "\n".join((
            "    SELECT 1", f"    FROM {self.t(pauses)}", self.where(conds, "    "))) + "\n)"]

    def in_group(self, group: Field) -> str:
        """The condition a claim puts on the group column."""
        return f"{self.c(group)} = {self.p('group')}"

    def order(self) -> str:
        return ", ".join(self.c(f) for f in (self.role(r) for r in
                                             ("priority", "retry_after", "id")) if f)

    def where(self, conds: list[str], indent: str = "") -> str:
        if not conds:
            return ""
        conds = [c.replace("\n", "\n" + indent) for c in conds]  # a subquery's lines
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
        rows at once (where the dialect has `batches`)."""
        raise NotImplementedError

    @staticmethod
    def held_columns(q: Queue) -> list[tuple[str, Field]]:
        """The guard parameters of a lease's batch with their columns: id, locked_until and
        (where there is one) attempt."""
        held = [("id", q.id)]
        lu, attempt = q.role("locked_until"), q.role("attempt")
        assert lu is not None
        held.append(("locked_until", lu))
        if attempt is not None:
            held.append(("attempt", attempt))
        return held

    def many(self, name: str, sets: list[str] | None, doc: str) -> None:
        """The batch twin of a guarded settlement (UPDATE with `sets`, or DELETE with None).
        A lease's batch returns the ids it changed: the others are no longer held."""
        head = (f"DELETE FROM {self.t()}\n" if sets is None else
                f"UPDATE {self.t()}\nSET " + ",\n    ".join(sets) + "\n")
        returning = f"\nRETURNING {self.c(self.q.id)}" if self.q.lease else ""
        self.add(name, f"{head}WHERE {self.held_batch()}{returning}", doc)

    def renew_many(self, sets: list[str], progress: Field | None, doc: str) -> None:
        """RENEW_MANY: where the table has a progress column, a dialect that binds one per row
        writes it (PostgreSQL's); elsewhere it writes none, and the runtime renews rows with
        progress to report by RENEW, one statement each (in one transaction)."""
        self.many("RENEW_MANY", sets, doc + (", writing no progress (RENEW writes it)"
                                             if progress is not None else "")
                  + "; returns the ids renewed.")

    def finish_many(self, sets: list[str], result: Field | None, doc: str, then: str) -> None:
        """FINISH_MANY of a table that keeps finished rows. Where it keeps results too, a
        dialect that binds one per row writes them (PostgreSQL's); elsewhere it writes none,
        and the runtime sends acks with a result to FINISH, one statement each (in one
        transaction)."""
        self.many("FINISH_MANY", sets, doc + (", writing no result (FINISH writes one)."
                                              if result is not None else ".") + then)

    @property
    def batches(self) -> bool:
        """Whether the table gets batch settlements (FINISH_MANY, RENEW_MANY): row lock and
        lease, where the dialect has them."""
        return self.q.form == ROW_LOCK or self.q.lease

    # -- statements -----------------------------------------------------------------------------

    # The id kinds a claim start takes: the row's id plus one is the next id in claim order.
    start_id_kinds: tuple[str, ...] = (cat.INT,)

    @property
    def claims_from_id(self) -> bool:
        """Whether a claim starts after a row (`from_id`, and the row's priority and due time
        where the claim order has them): a lease's, a row lock's or an advisory table's
        CANDIDATES, of a table with an integer id (PostgreSQL: or a UUID), not FIFO, whose
        order columns are NOT NULL.
        Every row a drain finished leaves an index entry at the head of the claim order until
        vacuum (InnoDB: purge) removes it, and neither removes any a snapshot still open may
        read, so every claim starting at the head would read past them; so would it past rows
        due later at a more urgent priority, where no claim reads priority by priority
        (MySQL/MariaDB, SQLite). A worker's claims start where the last one ended and go back
        to the head whenever a claim comes back short, and once a second while a claim from the
        head costs little (less often where it costs more), so a row ahead of the start (one
        more urgent, or due earlier, than the last row claimed) waits no longer than that
        (inboxgen.runtime.claimstart)."""
        form = self.q.lease or (self.q.form in (ROW_LOCK, ADVISORY) and not self.q.fifo)
        return (form and self.q.id.column.kind in self.start_id_kinds
                and not any(f.column.nullable for f in self.start_columns)
                and (self.q.limits is None or not self.q.limits.fair))

    @property
    def start_columns(self) -> list[Field]:
        """The claim order's columns after the group: priority, retry_after, id (those the
        table has)."""
        return [f for f in (self.role("priority"), self.role("retry_after"), self.q.id)
                if f is not None]

    @property
    def claim_start(self) -> tuple[str, ...]:
        """The condition a claim's rows meet where it starts after a row: in claim order, at
        (`from_priority`, `from_retry_after`, `from_id`) or later, `from_id` being one past the
        row's id."""
        if not self.claims_from_id:
            return ()
        cols = self.start_columns
        if len(cols) == 1:
            return (f"{self.c(self.q.id)} >= {self.p('from_id')}",)
        return (self.at_or_after([(self.c(f), self.p(START_PARAMS[f.role or ""]))
                                  for f in cols]),)

    @property
    def start_doc(self) -> str:
        """What a claim's doc says of its start."""
        if not self.claims_from_id:
            return ""
        names = [START_PARAMS[f.role or ""] for f in self.start_columns]
        if len(names) == 1:
            return " from id `from_id` on"
        return " from (" + ", ".join(f"`{n}`" for n in names) + ") on in claim order"

    def at_or_after(self, pairs: list[tuple[str, str]]) -> str:
        """Hook: (column, value) pairs, compared in order: the columns' values at or after the
        values'. PostgreSQL's index scan starts at a row comparison."""
        cols = ", ".join(c for c, _ in pairs)
        return f"({cols}) >= ({', '.join(v for _, v in pairs)})"

    def select_claimable(self, name: str, doc: str, *, lock: str = "FOR UPDATE SKIP LOCKED",
                         also: tuple[str, ...] = (), then: str = "") -> None:
        """SELECT the rows due for a claim, in claim order, locked as `lock` says; `also` are
        further conditions a claimed row meets, `then` a column after the row's."""
        columns = self.select_list() + (f", {then}" if then else "")
        self.add(name, self.due_rows(columns, also=also, lock=lock), doc)

    def due_rows(self, columns: str, *, also: tuple[str, ...] = (), lock: str = "") -> str:
        """SELECT `columns` of the first `limit` due rows in claim order that meet `also`,
        locked as `lock` says (none: no lock)."""
        return "\n".join(x for x in (
            f"SELECT {columns}",
            f"FROM {self.t()}{self.force_index()}",
            self.where([*self.filters(), *also]),
            f"ORDER BY {self.order()}",
            f"LIMIT {self.p('limit')}",
            lock,
        ) if x)

    def force_index(self) -> str:
        """What follows the table's name in a read of due rows (MySQL: an index hint)."""
        return ""

    def build(self) -> list[Statement]:
        form = self.q.form
        self.claims()
        if self.q.fifo:
            self.fifo()
        if form == LEASE:
            lu = self.role("locked_until")
            assert lu is not None
            renew = [f"{self.c(lu)} = {self.p('new_locked_until')}"]
            progress = self.role("progress")
            reported = ([f"{self.c(progress)} = COALESCE({self.p('progress')}, "
                         f"{self.c(progress)})"] if progress is not None else [])
            self.update("RENEW", renew + reported,
                        "Extend a held lease; the held expiry is the token."
                        + (" With the job's last reported `progress` (None keeps what the "
                           "row holds)." if reported else ""))
            if self.batches:
                self.renew_many(renew, progress, "Extend many held leases to "
                                "`new_locked_until`")
        self.settlements()
        self.inserts()
        self.operations()
        self.notifications()
        return self.out

    def claims(self) -> None:
        form = self.q.form
        if form == ROW_LOCK and self.q.count_crashes:
            self.claim_row_lock_counted()
        elif form == ROW_LOCK:
            self.claim_row_lock()
        elif form == LEASE and self.q.limits is not None:
            self.claim_limited()
        elif form == LEASE:
            self.claim_lease()
        elif form == ADVISORY:
            self.claim_advisory()
        if form == ROW_LOCK and self.q.limits is not None:
            self.advisory_locks("a seat")  # [flow] limits: each job in work holds a seat

    def notifications(self) -> None:
        """Statements that wake listening workers, where the database has notifications."""

    def claim_row_lock(self) -> None:
        self.select_claimable("CLAIM", f"Claim up to `limit` rows{self.start_doc}; the "
                                       "claim's open transaction holds them.",
                              also=self.claim_start)

    def claim_row_lock_counted(self) -> None:
        """Row lock that survives crash loops: the claim counts the attempt and commits at once,
        and a session lock on each counted row's key keeps the row from other claims until
        RELEASE (the dialect's statements say how)."""
        raise NotImplementedError

    def claim_set(self) -> list[str]:
        lu = self.role("locked_until")
        assert lu is not None
        sets = [f"{self.c(lu)} = {self.p('locked_until')}"]
        attempt = self.role("attempt")
        if attempt is not None:
            sets.append(f"{self.c(attempt)} = {self.c(attempt)} + 1")
        return sets

    # How a lease claim's subquery locks the rows it picks, so concurrent claims skip them.
    lease_pick_lock = ""

    def picked(self, lock: str, also: tuple[str, ...] = ()) -> str:
        """The condition that a row is among the first `limit` due rows in claim order, picked
        by a subquery that locks them as `lock` says (an UPDATE's claim); `also` are further
        conditions a picked row meets."""
        inner = "\n".join(x for x in (
            f"    SELECT {self.c(self.q.id)}",
            f"    FROM {self.t()}",
            self.where(self.filters() + list(also), "    "),
            f"    ORDER BY {self.order()}",
            f"    LIMIT {self.p('limit')}",
            lock,
        ) if x)
        return self.d.picked_by(self.c(self.q.id), inner)

    def claim_lease(self) -> None:
        self.add("CLAIM", f"UPDATE {self.t()}\nSET " + ",\n    ".join(self.claim_set())
                 + f"\nWHERE {self.picked(self.lease_pick_lock, self.claim_start)}\n"
                 + f"RETURNING {self.select_list(returning_claim=True)}",
                 f"Claim up to `limit` rows{self.start_doc} under a lease ending at "
                 "`locked_until`.")

    def claim_limited(self) -> None:
        """[flow] limits, under a lease: claims take turns (CLAIM_TURN, the dialect's lock,
        held to the claim's commit), so each sees every lease the claims before it wrote. CLAIM
        reads the due rows with what the limits count beside them (the live leases of the
        queue and of each row's key, the claims of the rate's window); a full queue, a spent
        rate or a key at its limit gives no row. Of the rows read, claim() keeps those the
        limits leave room for (a batch may hold several rows of one key), CLAIM_MARK writes
        their leases and CLAIM_RECORD their claims for the rate, after CLAIM_FORGET deleted
        those of past windows."""
        limits = self.q.limits
        assert limits is not None
        if limits.fair and self.claims_fair_alone and limits.concurrency is None \
                and limits.key_concurrency is None and limits.rate is None:
            self.claim_fair_alone()
            return
        self.claim_turn()
        key_col = "NULL"
        if limits.key is not None:
            key_col = (f"{self.d.quote('inboxgen_rows')}.{self.d.quote('inboxgen_k')}"
                       if limits.fair else f"{self.t()}.{self.d.quote(limits.key)}")
        queue_count, claimed, _ = counts = self.limit_counts(key_col)
        also: list[str] = []
        if limits.concurrency is not None:
            also.append(f"{queue_count} < {self.p('concurrency')}")
        if limits.rate_table is not None:
            also.append(f"{claimed} < {self.p('rate')}")
        if limits.key is not None and limits.key_concurrency is not None:
            held, key = self.d.quote("inboxgen_held"), self.d.quote(limits.key)
            # The keys at their limit, found once from the live leases, not counted per row:
            # a row-by-row count reads a key's jobs in work again for each of its rows the
            # claim passes over, and a key at its limit may have thousands waiting.
            also.append("\n".join((f"{key_col} NOT IN (", f"    SELECT {held}.{key}",
                                   f"    FROM {self.held_rows(by_lease=True)}",
                                   f"    WHERE {self.live_lease()}", f"    GROUP BY {held}.{key}",
                                   f"    HAVING COUNT(*) >= {self.p('key_concurrency')}",
                                   ")")))
        also += self.turn_held()
        also += self.claim_start
        if limits.rate_table is not None:
            self.rate_forget(limits.rate_table)
        if limits.fair:
            self.claim_fair(self.count_columns(key_col, counts), self.turn_held())
        else:
            columns = "\n".join((f"{self.select_list()},", *(
                "       " + line
                for line in ",\n".join(self.count_columns(key_col, counts)).splitlines())))
            self.add("CLAIM", self.due_rows(columns, also=tuple(also), lock=self.limited_lock),
                     f"Under the claim turn, read up to `limit` due rows{self.start_doc} within "
                     "the limits, with what the limits count (jobs in work of the queue and of "
                     "the row's key, claims of the rate's window) beside each.")
            if limits.key is not None and limits.key_concurrency is not None:
                self.claim_by_key()
                self.held_back()
        self.add("CLAIM_MARK", f"UPDATE {self.t()}\nSET " + ",\n    ".join(self.claim_set())
                 + f"\nWHERE {self.ids_in(self.c(self.q.id))}",
                 "Write the lease (the ownership token) on the rows of CLAIM that claim() kept.")
        if limits.rate_table is not None:
            q = self.d.quote
            cols, values = [q("queue"), q("claimed_at")], [self.p("queue"), self.db_now]
            if limits.rate_per_key and limits.key is not None:
                cols.append(q("claim_key"))
                values.append(q(limits.key))
            self.add("CLAIM_RECORD", f"INSERT INTO {self.t(limits.rate_table)} "
                                     f"({', '.join(cols)})\n"
                                     f"SELECT {', '.join(values)}\nFROM {self.t()}\n"
                                     f"WHERE {self.ids_in(self.c(self.q.id))}",
                     "Record the claims CLAIM_MARK made, at the database's time, for the rate.")

    def live_lease(self) -> str:
        """The condition a row in work (`inboxgen_held`, the table again) meets: its lease has
        not ended."""
        lu = self.role("locked_until")
        assert lu is not None
        return f"{self.d.quote('inboxgen_held')}.{self.c(lu)} > {self.p('now')}"

    def held_rows(self, by_lease: bool) -> str:
        """The table again as `inboxgen_held`, the rows the limits count (`by_lease`: read
        through the index on the lease column, where no other condition narrows them)."""
        return f"{self.t()} AS {self.d.quote('inboxgen_held')}"

    def in_work(self, *conds: str) -> str:
        """The jobs in work meeting `conds` (on `inboxgen_held`), counted."""
        return "\n".join(("(", "    SELECT COUNT(*)",
                          f"    FROM {self.held_rows(by_lease=not conds)}",
                          self.where([*conds, self.live_lease()], "    "), ")"))

    def limit_counts(self, key_col: str) -> tuple[str, str, str]:
        """What a limited claim counts beside a row whose key is `key_col`: the queue's jobs
        in work, the claims of the rate's window (of the row's key, with rate_per_key) and the
        key's jobs in work; "NULL" for a limit the spec does not set."""
        limits = self.q.limits
        assert limits is not None
        queue_count = claimed = key_count = "NULL"
        if limits.concurrency is not None:
            queue_count = self.in_work()
        if limits.rate_table is not None:
            claimed = self.rate_claimed(limits.rate_table,
                                        key_col if limits.rate_per_key else None)
        if limits.key is not None and limits.key_concurrency is not None:
            key_count = self.in_work(
                f"{self.d.quote('inboxgen_held')}.{self.d.quote(limits.key)} = {key_col}")
        return queue_count, claimed, key_count

    def count_columns(self, key_col: str, counts: tuple[str, str, str]) -> list[str]:
        """The four columns a limited claim puts last, for claim() to apply the limits: the
        `counts` (limit_counts) and the row's key between them."""
        queue_count, claimed, key_count = counts
        q = self.d.quote
        return [f"{queue_count} AS {q('inboxgen_in_work')}",
                f"{claimed} AS {q('inboxgen_claimed')}", f"{key_col} AS {q('inboxgen_key')}",
                f"{key_count} AS {q('inboxgen_key_in_work')}"]

    def claim_by_key(self) -> None:
        """[flow] key_concurrency without fair: CLAIM_BY_KEY, the fair claim's walk over the
        key's values with the limits' counts beside each row. CLAIM reads past every waiting
        row of a key at its limit; where thousands wait (HELD_BACK counts them), the runtime
        claims with this instead, which reads the first rows of each key it walks."""
        q = self.d.quote
        walked = f"{q('inboxgen_rows')}.{q('inboxgen_k')}"
        self.claim_fair(self.count_columns(walked, self.limit_counts(walked)), self.turn_held(),
                        "CLAIM_BY_KEY", "Under the claim turn, as CLAIM reads, but walking up to "
                        "`limit` values of the key from the first after `after` and reading the "
                        "first due rows of each: for a table where many due rows wait behind keys "
                        "at their limit (HELD_BACK).")

    def held_back(self) -> None:
        """HELD_BACK: of the first `limit` due rows in claim order, those past the first
        `key_concurrency` rows of their key: rows that wait behind their own key's, which a
        limited claim reads past while that key is at its limit (as it is, most of the time,
        under load). Counted from the rows alone, not from the jobs in work at that instant, so
        the count does not flip as a key's jobs come and go. The runtime reads it once a second
        to choose between CLAIM and CLAIM_BY_KEY."""
        limits = self.q.limits
        assert limits is not None and limits.key is not None
        q = self.d.quote
        key, ahead, per_key, n = q(limits.key), q("inboxgen_ahead"), q("inboxgen_per_key"), \
            q("inboxgen_n")
        kc = self.p("key_concurrency")
        first = "\n".join("        " + line for line in self.due_rows(key).splitlines())
        self.add("HELD_BACK", "\n".join((
            f"SELECT SUM(CASE WHEN {per_key}.{n} > {kc} THEN {per_key}.{n} - {kc} ELSE 0 END)",
            "FROM (", f"    SELECT {ahead}.{key}, COUNT(*) AS {n}", "    FROM (", first,
            f"    ) AS {ahead}", f"    GROUP BY {ahead}.{key}", f") AS {per_key}")),
            "Of the first `limit` due rows in claim order, count those past the first "
            "`key_concurrency` of their key: the rows CLAIM reads past while their key is at "
            "its limit.")

    def claim_fair(self, counts: list[str], held: list[str], name: str = "CLAIM",
                   doc: str = "") -> None:
        """[flow] fair: CLAIM walks up to `limit` values of the key, from the first after
        `after` (where the claims before it stopped), and reads the first due rows of each in
        claim order, the first of every key before the second of any; with fewer keys than
        `limit`, several of each. A key walked with no due row gives one row of NULLs (rank 0),
        so claim() learns where the walk stopped. The limits' counts stand beside each row, as
        in a limited claim, for claim() to apply."""
        q = self.d.quote
        rows, r = q("inboxgen_rows"), q("inboxgen_r")
        doc = doc or ("Under the claim turn, walk up to `limit` values of the key from the first "
                      "after `after`, and read the first due rows of each"
                      + (", " + self.weighted_doc() if self.weighted else "")
                      + ", with what the limits count beside each row.")
        self.add(name, "\n".join(x for x in (
            self.fair_ctes(),
            f"SELECT {self.select_list()},",
            *("       " + line for line in ",\n".join(
                [*counts, f"CASE WHEN {self.c(self.q.id)} IS NULL THEN 0 ELSE {rows}.{r} END "
                          f"AS {q('inboxgen_rank')}", *self.weight_columns()]).splitlines()),
            f"FROM {rows}",
            self.fair_rows_join(q("inboxgen_id")),
            self.where(held),
            f"ORDER BY {self.fair_order()}",
            self.fair_lock,
        ) if x), doc)

    # Integer division, and the greater of its arguments (SQLite's: MAX with two of them).
    int_div = "/"
    greatest = "GREATEST"

    @property
    def weighted(self) -> bool:
        """[flow] weights_table: a fair claim gives each key its weight's turns in a round."""
        return self.q.limits is not None and self.q.limits.weights_table is not None

    def fair_order(self) -> str:
        """The order of a fair claim's rows: the first of every key before the second of any;
        weighted, by turn (a key of weight w has w rows in each, counted from the place
        `inboxgen_p` the claims before left it at), then the walk's order."""
        q = self.d.quote
        rows, r, n, k = q("inboxgen_rows"), q("inboxgen_r"), q("inboxgen_n"), q("inboxgen_k")
        if not self.weighted:
            return f"{rows}.{r}, {rows}.{n}, {rows}.{k}"
        p, w = q("inboxgen_p"), q("inboxgen_w")
        return f"{rows}.{p} {self.int_div} {rows}.{w}, {rows}.{n}, {rows}.{k}, {rows}.{p}"

    def weighted_doc(self) -> str:
        """How a fair claim's docstring says it orders the rows it walks."""
        if not self.weighted:
            return "the first of every key before the second of any"
        assert self.q.limits is not None and self.q.limits.weights_table is not None
        return (f"in turns, a key taking as many rows in each as its weight in "
                f"{self.q.limits.weights_table.name} (1 where it has none)")

    def weight_columns(self) -> list[str]:
        """What a weighted fair claim puts after the rank, for claim() to find where the turns
        stopped: the key's weight."""
        if not self.weighted:
            return []
        q = self.d.quote
        return [f"{q('inboxgen_rows')}.{q('inboxgen_w')} AS {q('inboxgen_weight')}"]

    def key_weight(self, of: str) -> list[str]:
        """The weight of key `of` (a column of the walk) and the place its first row takes in
        its turns: after the rows the claims before took (`spent`, of the key `resume` whose
        turn they left unfinished), as two columns of the walk's first rows."""
        limits, q = self.q.limits, self.d.quote
        assert limits is not None and limits.weights_table is not None
        return ["(",
                f"        SELECT {self.greatest}(COALESCE(MAX({q('weight')}), 1), 1)",
                f"        FROM {self.t(limits.weights_table)}",
                self.where([f"{q('queue')} = {self.p('queue')}",
                            f"{q('fair_key')} = {of}"], "        "),
                f"    ), CASE WHEN {of} = {self.p('resume')} THEN {self.p('spent')} ELSE 0 END,"]

    # Whether a fair claim without limits is one statement that writes its leases itself, with
    # no claim turn (nothing to count); claim_fair_alone() writes it.
    claims_fair_alone = False

    def claim_fair_alone(self) -> None:
        raise NotImplementedError

    def fair_ctes(self) -> str:
        """WITH RECURSIVE and the fair CLAIM's two CTEs: inboxgen_keys, the walk over the key's
        values (fair_walk), and inboxgen_rows, each walked value's rank-th due row in claim
        order (its id and order columns; NULLs for a value without a due row, rank 1)."""
        q, limits = self.d.quote, self.q.limits
        assert limits is not None and limits.key is not None
        key = q(limits.key)
        keys, rows = q("inboxgen_keys"), q("inboxgen_rows")
        k, n, r = q("inboxgen_k"), q("inboxgen_n"), q("inboxgen_r")
        roles = [(x, self.role(x)) for x in ("priority", "retry_after", "id")]
        order = [f for _, f in roles if f]
        # Where the last row read stands, named by role (no column of the table's can clash).
        carried = [q(f"inboxgen_{x}") for x, f in roles if f]

        def first_due(of: str, after: bool) -> list[str]:
            conds = [f"{key} = {of}.{k}", *self.filters()]
            if after:
                mine = [self.c(f) for f in order]
                at = [f"{rows}.{c}" for c in carried]
                conds.append(f"{mine[0]} > {at[0]}" if len(order) == 1 else
                             f"({', '.join(mine)}) > ({', '.join(at)})")
            return conds

        head, cols = self.fair_head("LEFT", first_due(keys, after=False), order)
        more, _ = self.fair_head("", first_due(rows, after=True), order)
        walked = f"(SELECT COUNT(*) FROM {keys} WHERE {keys}.{k} IS NOT NULL)"
        first = [f"    SELECT {keys}.{n}, 1, {keys}.{k}, {cols}"]
        again = [f"    SELECT {rows}.{n}, {rows}.{r} + 1, {rows}.{k}, {cols}"]
        bound = [f"    WHERE {rows}.{r} * {walked} < {self.p('limit')}"]
        if self.weighted:
            # Each row carries its key's weight and its place in the key's turns; a key takes
            # rows while the turn of the next leaves the batch unfilled.
            w, p = q("inboxgen_w"), q("inboxgen_p")
            carried = [w, p, *carried]
            first = [f"    SELECT {keys}.{n}, 1, {keys}.{k}, "
                     + "\n".join(self.key_weight(f"{keys}.{k}")), f"           {cols}"]
            again = [f"    SELECT {rows}.{n}, {rows}.{r} + 1, {rows}.{k}, {rows}.{w}, "
                     f"{rows}.{p} + 1,", f"           {cols}"]
            bound = [f"    WHERE {rows}.{r} < {self.p('limit')}",
                     f"      AND ({rows}.{p} + 1) {self.int_div} {rows}.{w} * (",
                     f"          {walked[1:-1]}", f"      ) < {self.p('limit')}"]
        return "\n".join((
            "WITH RECURSIVE",
            self.fair_walk(key) + ",",
            f"{rows} ({n}, {r}, {k}, {', '.join(carried)}) AS (",
            *first,
            f"    FROM {keys}",
            head,
            f"    WHERE {keys}.{k} IS NOT NULL",
            "    UNION ALL",
            *again,
            f"    FROM {rows}",
            more,
            *bound,
            ")"))

    def fair_head(self, outer: str, conds: list[str], order: list[Field]) -> tuple[str, str]:
        """How the fair CLAIM joins the first due row meeting `conds` (`outer`: "LEFT" to keep
        a walked key without one), and the columns of `order` it carries from that row. Here
        the join finds the row by the id a subquery reads first."""
        join = " ".join(x for x in (outer, "JOIN") if x)
        return "\n".join((
            f"    {join} {self.t()} ON {self.t()}.{self.c(self.q.id)} = (",
            f"        SELECT {self.c(self.q.id)}", f"        FROM {self.t()}",
            self.where(conds, "        "), f"        ORDER BY {self.order()}", "        LIMIT 1",
            "    )")), ", ".join(f"{self.t()}.{self.c(f)}" for f in order)

    def fair_walk(self, key: str) -> str:
        """The CTE inboxgen_keys (inboxgen_k, inboxgen_n): up to `limit` values of `key` among
        the unfinished rows of the worker's group, in order from the first after `after`, and
        from the first value where none is after it; inboxgen_n orders them."""
        q = self.d.quote
        keys, k, n = q("inboxgen_keys"), q("inboxgen_k"), q("inboxgen_n")

        def next_key(*conds: str) -> str:
            return "\n".join(x for x in (
                f"    SELECT {key}", f"    FROM {self.t()}",
                self.where([*self.unfinished(), *conds], "    "),
                f"    ORDER BY {key}", "    LIMIT 1") if x)

        return "\n".join((
            f"{keys} ({k}, {n}) AS (",
            "    SELECT COALESCE((",
            *("    " + line for line in next_key(f"{key} > {self.p('after')}").splitlines()),
            "    ), (",
            *("    " + line for line in next_key().splitlines()),
            "    )), 1",
            "    UNION ALL",
            "    SELECT (",
            *("    " + line for line in next_key(f"{key} > {keys}.{k}").splitlines()),
            f"    ), {keys}.{n} + 1",
            f"    FROM {keys}",
            f"    WHERE {keys}.{k} IS NOT NULL",
            f"      AND {keys}.{n} < {self.p('limit')}",
            ")"))

    def fair_rows_join(self, row_id: str) -> str:
        """How the fair CLAIM's final read finds each walked row by its id `row_id` (a column
        of inboxgen_rows), keeping the keys walked without one. The row is still due as the
        read locks it: its holder may have settled it since the walk read it."""
        rows = self.d.quote("inboxgen_rows")
        return "\n".join((
            f"LEFT JOIN {self.t()} ON {self.t()}.{self.c(self.q.id)} = {rows}.{row_id}",
            *(f"    AND {c}".replace("\n", "\n    ") for c in self.filters())))

    def rate_claimed(self, rates: TableRef, key: str | None) -> str:
        """The claims of the rate's window: recorded for this queue (and, per key, for the
        row's `key`) since `rate_seconds` ago."""
        q = self.d.quote
        conds = [f"{q('queue')} = {self.p('queue')}"]
        if key is not None:
            conds.append(f"{self.t(rates)}.{q('claim_key')} = {key}")
        conds.append(f"{q('claimed_at')} > {self.window_start}")
        return "\n".join(("(", "    SELECT COUNT(*)", f"    FROM {self.t(rates)}",
                          self.where(conds, "    "), ")"))

    def rate_forget(self, rates: TableRef) -> None:
        q = self.d.quote
        self.add("CLAIM_FORGET", f"DELETE FROM {self.t(rates)}\n" + self.where(
            [f"{q('queue')} = {self.p('queue')}", f"{q('claimed_at')} <= {self.window_start}"]),
                 "Delete the recorded claims older than the rate's window.")

    # The database's time, as the rate table records it, and the start of the rate's window
    # (`rate_seconds` before it): the dialect's.
    db_now = ""
    window_start = ""

    # How a limited claim's read locks the rows it reads (SQLite's transaction holds the file),
    # and a fair claim's (where the dialect does not lock them as fair_rows_join reads them).
    limited_lock = "FOR UPDATE SKIP LOCKED"
    fair_lock = "FOR UPDATE SKIP LOCKED"

    def claim_turn(self) -> None:
        """CLAIM_TURN (and where it outlives the transaction, CLAIM_TURN_END): the lock that
        makes a limited queue's claims take turns. SQLite's claims take turns anyway: each
        holds the file's write lock from BEGIN IMMEDIATE."""

    def turn_held(self) -> list[str]:
        """A condition of CLAIM that holds only under the claim turn, where taking the turn can
        give up waiting (MySQL's GET_LOCK)."""
        return []

    def claim_advisory_candidates(self) -> None:
        self.select_claimable("CANDIDATES", "Rows due for a claim"
                              + (self.start_doc or ", in claim order")
                              + "; each is then locked by its key.", lock="",
                              also=self.claim_start)

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
        self.advisory_locks("a job's key")

    def advisory_locks(self, what: str) -> None:
        """LOCK and UNLOCK of `what` (a job's key, a seat of a limit), where the database has
        session locks (SQLite's are kept by the runtime, in the process)."""

    def group_filters(self) -> list[str]:
        """The unfinished rows of the worker's group (a FIFO group's members)."""
        assert self.role("group") is not None
        return self.unfinished()

    # -- claims that walk no scheduled rows ---------------------------------------------------

    @property
    def by_priority(self) -> bool:
        """Whether the table gets claims that read the due rows priority by priority
        (CLAIM_BY_PRIORITY, CANDIDATES_BY_PRIORITY) beside its plain ones. In (priority,
        retry_after, id) order the rows of one priority that are due later sit before the due
        rows of the next one: the plain claim's single index scan reads every scheduled row of
        a more urgent priority before it reaches a due row. Reading each priority's due rows on
        their own (the next priority is one index probe) stops at the first row due later. On
        PostgreSQL that costs a claim of an ordinary table a quarter more (the planner plans it
        anew at every call, as it does every claim), so the runtime takes it only while
        SCHEDULED counts enough scheduled rows to outweigh that; MySQL's twin (a list of
        priorities, statements/mysql.py) costs what the plain claim does, and is always taken.
        A nullable priority keeps the single scan: a walk would never reach its NULLs. A FIFO
        table claims its groups' heads."""
        pr, ra = self.role("priority"), self.role("retry_after")
        # A fair claim walks the keys instead.
        return (pr is not None and ra is not None and not pr.column.nullable
                and not self.q.fifo and (self.q.limits is None or not self.q.limits.fair))

    def next_priority(self) -> None:
        """NEXT_PRIORITY: the first priority of unfinished rows above `above`, and whether its
        first row is due (or in work): one probe of the claim index, a range from `above` on.
        due_priorities() walks the priorities with it, for the claims kept to a list of them
        (MySQL's; a partitioned PostgreSQL table's)."""
        pr, ra = self.role("priority"), self.role("retry_after")
        assert pr is not None and ra is not None
        prc, rac = self.c(pr), self.c(ra)
        self.add("NEXT_PRIORITY", "\n".join(x for x in (
            f"SELECT {prc}, {rac} <= {self.p('now')}", f"FROM {self.t()}{self.force_index()}",
            self.where([*self.unfinished(), f"{prc} > {self.p('above')}"]),
            f"ORDER BY {prc}, {rac}", "LIMIT 1") if x),
            "The first priority above `above`, and whether it has a due row (a row in work "
            "counts).")

    def priority_walk(self) -> tuple[str, str]:
        """The recursive CTE that lists the priorities of unfinished rows in claim order, each
        found by one probe of the claim index, and its name."""
        pr = self.role("priority")
        assert pr is not None
        prc, t = self.c(pr), self.t()
        unfinished = self.unfinished()
        walk = "inboxgen_priorities"

        def first_priority(extra: list[str], indent: str) -> str:
            return "\n".join(x for x in (
                f"{indent}SELECT {prc}", f"{indent}FROM {t}",
                self.where(unfinished + extra, indent),
                f"{indent}ORDER BY {prc}", f"{indent}LIMIT 1") if x)

        return "\n".join((
            f"WITH RECURSIVE {walk} AS (",
            "    (",
            first_priority([], "        "),
            "    )",
            "    UNION ALL",
            "    SELECT (",
            first_priority([f"{prc} > {walk}.{prc}"], "        "),
            "    )",
            f"    FROM {walk}",
            f"    WHERE {walk}.{prc} IS NOT NULL",
            ")",
        )), walk

    def unfinished(self) -> list[str]:
        """The conditions every unfinished row of the worker's group meets (none where the
        table has neither groups nor processed_at)."""
        g, pa = self.role("group"), self.role("processed_at")
        out = [self.in_group(g)] if g is not None else []
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
        conds += self.not_paused()
        self.fifo_guard()
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

    def fifo_guard(self) -> None:
        """A statement that serialises the claims of one FIFO group, where the database has
        one (SQLite's one writer serialises them anyway)."""

    def settlements(self) -> None:
        q = self.q
        pa, ra, attempt, g = (self.role(r) for r in ("processed_at", "retry_after", "attempt",
                                                       "group"))
        many = " Returns the ids settled." if q.lease else ""
        if pa is not None:
            finish = [f"{self.c(pa)} = {self.p('now')}"] + self.clear_lease()
            result = self.role("result")
            kept = [f"{self.c(result)} = {self.p('result')}"] if result is not None else []
            self.update("FINISH", finish + kept,
                        "Ack or drop: mark the row processed (kept for audit)"
                        + (", with the handler's `result` (None: NULL)." if kept else "."))
            if self.batches:
                self.finish_many(finish, result, "Ack or drop many rows: mark them processed",
                                 many)
        else:
            self.add("FINISH", f"DELETE FROM {self.t()}\n" + self.where(self.guard()),
                     "Ack or drop: delete the row.")
            if self.batches:
                self.many("FINISH_MANY", None, "Ack or drop many rows: delete them." + many)
        # Row lock counts the attempt when it settles a retry; the other forms counted it at
        # the claim.
        count = ([f"{self.c(attempt)} = {self.c(attempt)} + 1"]
                 if attempt is not None and q.form == ROW_LOCK and not q.count_crashes else [])
        error = self.record_error()
        noted = " A failure's `error` is kept (None keeps the last one)." if error else ""
        if q.lease:
            self.update("RETRY", self.clear_lease() + error,
                        "Return the row to the queue now." + noted)
        elif count or error:
            self.update("RETRY", count + error, "Return the row to the queue now"
                        + (", counting the attempt." if count else ".") + noted)
        if ra is not None:
            self.update("RETRY_AFTER", [f"{self.c(ra)} = {self.p('retry_after')}"]
                        + self.clear_lease() + count + error,
                        "Return the row to the queue, due at `retry_after`." + noted)
        keep_attempt = ([f"{self.c(attempt)} = {self.p('attempt')}"]
                        if attempt is not None and (q.form != ROW_LOCK or q.count_crashes)
                        else [])
        if q.dead_letter_group is not None and g is not None:
            self.update("DEAD_LETTER", [f"{self.c(g)} = {self.p('dead_group')}"]
                        + self.clear_lease() + keep_attempt + error,
                        "Move a spent row to the dead-letter group, keeping its attempt count."
                        + (" The row keeps `error`, why it died." if error else ""))
        if q.dead_letter_table is not None:
            values: list[str] = []
            for f in q.fields:
                if f.role == "locked_until":
                    values.append("NULL")
                elif f.role == "attempt" and keep_attempt:
                    values.append(self.attempt_value())
                elif f.role == "error":
                    values.append(self.error_value(f))
                else:
                    values.append(self.c(f))
            self.dead_letter_to_table(values)

    def record_error(self) -> list[str]:
        """The SET of a settlement that records a failure: the error given, or where it is
        None (a retry the handler asked for) the one the column holds."""
        f = self.role("error")
        return [f"{self.c(f)} = {self.error_value(f)}"] if f is not None else []

    def error_value(self, f: Field) -> str:
        return f"COALESCE({self.p('error')}, {self.c(f)})"

    def attempt_value(self) -> str:
        """The attempt a dead letter keeps, as a value to insert."""
        return self.p("attempt")

    def dead_letter_to_table(self, values: list[str]) -> None:
        """Copy a spent row to the dead-letter table, then delete it (in one transaction:
        `dead_letter()` rolls back when the copy found no row). `values` are what each column
        of the queue table becomes."""
        q = self.q
        assert q.dead_letter_table is not None
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
        # Not yet runnable: due later, or (`after`) waiting for other jobs.
        later = [f"{self.c(ra)} > {now}"] if ra is not None else []
        later += [f"NOT {w}" for w in self.not_waiting()]
        cols = [f"{self.c(g) if g is not None else 'NULL'} AS queue_group",
                f"{count([ready])} AS ready",
                (count(unfinished + ["(" + " OR ".join(later) + ")" if len(later) > 1
                                     else later[0]]) if later else "0")
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
        self.server_status()
        if pa is not None:
            self.prune(pa)
        self.requeue(g, ra, lu)
        if q.form != ADVISORY:  # its holders hold a key computed from the row, not the row
            self.cancel()
        self.state(g, pa, ra, lu)
        if q.pause_table is not None:
            self.pauses(q.pause_table, g is not None)
        if q.after_table is not None:
            self.after(q.after_table)

    def pauses(self, pauses: TableRef, grouped: bool) -> None:
        """PAUSE, RESUME and PAUSED: the rows of the pause table for this queue (`queue`, its
        name) and, with `paused_group` NULL, for all of it. PAUSE adds its row only where no
        such row is (two at once may both add one: RESUME deletes every match)."""
        q, t = self.d.quote, self.t(pauses)
        cols, values = [q("queue")], [self.p("queue")]
        match = [f"{q('queue')} = {self.p('queue')}"]
        if grouped:
            cols.append(q("paused_group"))
            values.append(self.p("group"))
            match.append(self.same_or_both_null(q("paused_group"), self.p("group")))
        there = "\n".join(("    SELECT 1", f"    FROM {t}", self.where(match, "    ")))
        self.add("PAUSE", f"INSERT INTO {t} ({', '.join(cols)})\n"
                          f"SELECT {', '.join(values)}{self.from_no_table}\n"
                          f"WHERE NOT EXISTS (\n{there}\n)",
                 "Pause the queue" + (" (`group` None) or one group" if grouped else "")
                 + ": claims take none of its rows until resume(). Rows in work finish.")
        self.add("RESUME", f"DELETE FROM {t}\n" + self.where(match),
                 "Lift the pause of the queue" + (" (`group` None: pauses of single groups "
                                                  "stay) or of one group" if grouped else "")
                 + "; returns whether there was one.")
        self.add("PAUSED", f"SELECT DISTINCT {q('paused_group') if grouped else 'NULL'}\n"
                           f"FROM {t}\n" + self.where(match[:1]),
                 "What is paused: None for the whole queue"
                 + (", else each paused group." if grouped else "."))

    # How a SELECT of values alone, with a WHERE, names no table (MySQL: FROM DUAL).
    from_no_table = ""

    def same_or_both_null(self, a: str, b: str) -> str:
        """`a` equals `b`, NULL equal to NULL (PostgreSQL's IS NOT DISTINCT FROM)."""
        return f"{a} IS NOT DISTINCT FROM {b}"

    def cancellable(self) -> list[str]:
        """The conditions of a row `cancel()` may delete: this id, unfinished, and under a
        lease not leased (its lease ran out)."""
        pa, lu = self.role("processed_at"), self.role("locked_until")
        conds = [f"{self.c(self.q.id)} = {self.p('id')}"]
        if pa is not None:
            conds.append(f"{self.c(pa)} IS NULL")
        if lu is not None and self.q.lease:
            conds.append(f"({self.c(lu)} IS NULL OR {self.c(lu)} <= {self.p('now')})")
        return conds

    def cancel(self) -> None:
        """CANCEL: delete a queued row that no worker holds. SQLite: a row-lock holder's open
        transaction holds the database, so the delete waits for it to end. With `after`, the
        row goes to the dead letters instead (cancel_dead), so the jobs that wait for it are
        told it failed."""
        if self.q.after_table is not None:
            self.cancel_dead(self.where(self.cancellable()))
            return
        self.add("CANCEL", f"DELETE FROM {self.t()}\n" + self.where(self.cancellable()),
                 CANCEL_DOC)

    def cancel_dead(self, where: str) -> None:
        """`after`: CANCEL moves the queued row that `where` picks to the dead letters, its
        error (where the table keeps one) `cancelled`: into the dead-letter group, or copied to
        the dead-letter table by CANCEL_COPY first (SQLite: one writer, so the two statements
        see the same row)."""
        if self.q.dead_letter_table is None:
            self.add("CANCEL", f"UPDATE {self.t()}\nSET " + ",\n    ".join(self.cancel_sets())
                     + f"\n{where}", CANCEL_DEAD_DOC)
            return
        self.add("CANCEL_COPY", self.cancel_copy(where),
                 "Copy queued row `id` to the dead-letter table for cancel() (the same "
                 "transaction as CANCEL).")
        self.add("CANCEL", f"DELETE FROM {self.t()}\n{where}", CANCEL_DEAD_DOC)

    def cancel_sets(self) -> list[str]:
        """What CANCEL sets on a row it moves to the dead-letter group."""
        g, error = self.role("group"), self.role("error")
        assert g is not None
        sets = [f"{self.c(g)} = {self.p('dead_group')}"]
        if error is not None:
            sets.append(f"{self.c(error)} = {self.p('cancelled')}")
        return sets

    def cancel_copy(self, where: str) -> str:
        """The INSERT that copies the row `where` picks into the dead-letter table."""
        q = self.q
        assert q.dead_letter_table is not None
        return (f"INSERT INTO {self.t(q.dead_letter_table)} "
                f"({', '.join(self.c(f) for f in q.fields)})\n"
                f"SELECT {', '.join(self.cancelled_values())}\nFROM {self.t()}\n{where}")

    def cancelled_values(self) -> list[str]:
        """What each column of a cancelled row's dead letter holds: the row's, without a
        lease, its error `cancelled`."""
        return ["NULL" if f.role == "locked_until" else
                self.p("cancelled") if f.role == "error" else self.c(f) for f in self.q.fields]

    def after(self, edges: TableRef) -> None:
        """`after`: AFTER_ADD lists one job a new job waits for, AFTER_SET counts them on its
        row, AFTER_STATE says what became of each (AFTER_STATES: of several jobs' at once)."""
        q, t = self.d.quote, self.t(edges)
        parents = self.role("parents")
        assert parents is not None
        self.add("AFTER_ADD", f"INSERT INTO {t} ({q('job_id')}, {q('after_id')}, "
                              f"{q('on_failure')})\n"
                              f"VALUES ({self.p('job_id')}, {self.p('after_id')}, "
                              f"{self.p('on_failure')})",
                 "Note that job `job_id` waits for job `after_id`.")
        self.add("AFTER_SET", f"UPDATE {self.t()}\nSET {self.c(parents)} = {self.p('parents')}\n"
                              f"WHERE {self.c(self.q.id)} = {self.p('id')}",
                 "Count the jobs job `id` waits for: claims look for them while it is above 0.")
        idc, pa, g = self.c(self.q.id), self.role("processed_at"), self.role("group")
        parent, dead, edge = q("parent"), q("dead"), q("edge")
        after_id = f"{edge}.{q('after_id')}"
        whens = []
        joins = [f"LEFT JOIN {self.t()} AS {parent} ON {parent}.{idc} = {after_id}"]
        if self.q.dead_letter_table is not None:
            joins.append(f"LEFT JOIN {self.t(self.q.dead_letter_table)} AS {dead} "
                         f"ON {dead}.{idc} = {after_id}")
            whens.append((f"{dead}.{idc} IS NOT NULL", "dead"))
        whens.append((f"{parent}.{idc} IS NULL", "finished"))  # deleted as it finished
        if self.q.dead_letter_group is not None and g is not None:
            whens.append((f"{parent}.{self.c(g)} = {self.p('dead_group')}", "dead"))
        if pa is not None:
            whens.append((f"{parent}.{self.c(pa)} IS NOT NULL", "finished"))
        case = "CASE " + "".join(f"WHEN {cond} THEN '{state}'\n            "
                                 for cond, state in whens) + "ELSE 'waiting' END"
        job_id = f"{edge}.{q('job_id')}"
        read = f"{after_id}, {edge}.{q('on_failure')},\n       {case}\nFROM {t} AS {edge}\n" \
            + "\n".join(joins)
        self.add("AFTER_STATE", f"SELECT {read}\nWHERE {job_id} = {self.p('id')}\n"
                                f"ORDER BY {after_id}",
                 "What became of each job that job `id` waits for: finished, dead (a dead "
                 "letter, or cancelled) or waiting.")
        self.add("AFTER_STATES", f"SELECT {job_id}, {read}\nWHERE {self.ids_in(job_id)}\n"
                                 f"ORDER BY {job_id}, {after_id}",
                 "What became of the jobs that each job of `ids` waits for, read at once (the "
                 "worker reads a claimed batch's waiting jobs together).")

    def state(self, g: Field | None, pa: Field | None, ra: Field | None,
              lu: Field | None) -> None:
        """STATE: what became of one job, read from the queue table and, where there is one,
        the dead-letter table (which keeps the id). The first WHEN that holds names it."""
        q, now = self.q, self.p("now")
        whens: list[tuple[str, str]] = []
        if pa is not None:
            whens.append((f"{self.c(pa)} IS NOT NULL", "finished"))
        if q.dead_letter_group is not None and g is not None:
            whens.append((f"{self.c(g)} = {self.p('dead_group')}", "dead"))
        if lu is not None and q.lease:
            whens.append((f"{self.c(lu)} > {now}", "in_work"))
        if ra is not None:
            whens.append((f"{self.c(ra)} > {now}", "scheduled"))
        state = ("CASE" + "".join(f"\n         WHEN {w} THEN '{name}'" for w, name in whens)
                 + "\n         ELSE 'ready'\n       END" if whens else "'ready'")
        # Columns 7 and on: what the table keeps of its jobs (JobState.error, .result, .progress).
        kept = [f for f in (self.role("error"), self.role("result"), self.role("progress"))
                if f is not None]
        rest = ", ".join(self.c(f) if f is not None else "NULL"
                         for f in (q.id, self.role("attempt"), ra, pa, self.role("payload"),
                                   *kept))
        said = [{"error": "the error of its last failure", "result": "its result",
                 "progress": "its last reported progress"}[f.role or ""] for f in kept]
        also = (f", {', '.join(said[:-1])} and {said[-1]}" if len(said) > 1
                else f" and {said[0]}" if said else "")
        error = self.role("error")
        idc = f"{self.c(q.id)} = {self.p('id')}"
        sql = (f"SELECT {state} AS state, {rest}\nFROM {self.t()}\nWHERE {idc}")
        if q.dead_letter_table is not None:
            sql += (f"\nUNION ALL\nSELECT 'dead', {rest}\n"
                    f"FROM {self.t(q.dead_letter_table)}\nWHERE {idc}")
        self.add("STATE", sql, "Find job `id` and say what became of it at `now` (ready, "
                 "scheduled, in work, finished or dead), with its payload" + also + ".")
        # The dead letters, newest id first: where a dead-letter group or table keeps them.
        list_doc = ("List up to `limit` dead letters, the newest (by id) first, with their payloads"
                    + (" and errors." if error is not None else "."))
        order = f"ORDER BY {self.c(q.id)} DESC\nLIMIT {self.p('limit')}"
        if q.dead_letter_table is not None:
            self.add("DEAD_LIST", f"SELECT 'dead' AS state, {rest}\n"
                     f"FROM {self.t(q.dead_letter_table)}\n{order}", list_doc)
        elif q.dead_letter_group is not None and g is not None:
            self.add("DEAD_LIST", f"SELECT 'dead' AS state, {rest}\nFROM {self.t()}\n"
                     f"WHERE {self.c(g)} = {self.p('dead_group')}\n{order}", list_doc)

    def server_status(self) -> None:
        """What `inboxgen status` reads of the server beside the table, where it can."""

    def prune(self, pa: Field) -> None:
        """Delete processed rows in batches of `limit`, so a large backlog never takes a long
        lock."""
        old = f"{self.c(pa)} < {self.p('before')}"
        self.add("PRUNE", self.prune_batch(old),
                 "Delete up to `limit` rows processed before `before` (inboxgen prune).")
        self.add("PRUNABLE", f"SELECT COUNT(*)\nFROM {self.t()}\nWHERE {old}",
                 "Count the rows processed before `before`.")
        if self.q.partitioned:
            self.prune_partitions(pa)

    def prune_partitions(self, pa: Field) -> None:
        """Statements that drop whole partitions whose rows are all finished long enough."""

    def prune_batch(self, old: str) -> str:
        idc = self.c(self.q.id)
        batch = (f"    SELECT {idc}\n    FROM {self.t()}\n    WHERE {old}\n"
                 f"    LIMIT {self.p('limit')}")
        return f"DELETE FROM {self.t()}\nWHERE {self.d.picked_by(idc, batch)}"

    def ids_in(self, column: str) -> str:
        """`column` is one of the ids in parameter `ids`."""
        raise NotImplementedError

    def requeue(self, g: Field | None, ra: Field | None, lu: Field | None) -> None:
        """Dead letters back to the queue, due now, all or those of `ids`; the attempt count
        reset to its start or kept (`reset_attempt`)."""
        q = self.q
        attempt = self.role("attempt")
        fresh = initial_attempt(attempt) if attempt is not None else ""
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
            for cleared in (self.role("error"), self.role("progress")):
                if cleared is not None:
                    sets.append(f"{self.c(cleared)} = NULL")  # a fresh start
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
                elif f.role in ("locked_until", "processed_at", "error", "progress"):
                    values.append("NULL")
                else:
                    values.append(self.c(f))
            self.requeue_from_table(values, reset)

    def requeue_from_table(self, values: list[str], reset: str) -> None:
        """Dead letters back from the dead-letter table: `values` are the queue row's, column
        by column. Copied, then deleted (two statements, in one transaction)."""
        q = self.q
        assert q.dead_letter_table is not None
        dead_t = self.t(q.dead_letter_table)
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
        return f"COALESCE({value}, {self.column_default(f)})"

    def column_default(self, f: Field) -> str:
        return f.column.default_sql or "NULL"

    def returning_id(self) -> str:
        return f"\nRETURNING {self.c(self.q.id)}"

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
            self.insert_unique(insert, ", ".join(self.c(f) for f in self.q.unique))
        if self.replaces:
            self.replace()
        self.insert_many(fields, cols, insert)

    def insert_unique(self, insert: str, keys: str) -> None:
        self.add("INSERT_UNIQUE", f"{insert}\nON CONFLICT ({keys}) DO NOTHING",
                 "Enqueue one row unless its unique key is already queued.")

    def insert_many(self, fields: Sequence[Field], cols: str, insert: str) -> None:
        """The statement that enqueues many rows in one call, where the dialect has one."""

    # -- replace and debounce: a queued row of the unique key gets the new row's values --------

    @property
    def replaces(self) -> bool:
        """insert_replace() (and with a due time and an enqueued_at column, insert_debounced()):
        where the caller gives every column of the unique key, and workers hold rows (the
        advisory form's hold a key computed from the row, and it has no cancel either)."""
        q = self.q
        return (bool(q.unique) and q.form != ADVISORY and bool(q.insert_fields)
                and not any(f.generated for f in q.unique))

    @property
    def debounces(self) -> bool:
        return (self.replaces and self.role("retry_after") is not None
                and self.role("enqueued_at") is not None)

    @property
    def replace_lock(self) -> str:
        """How a replacement locks the key's row. Only a plain row lock's worker holds a row's
        lock while its job runs: there the pick passes over a locked row (and so over one that
        a concurrent replacement of the same key holds). Elsewhere a row is locked only by a
        claim being made or by another replacement, and the pick waits for it: replacements of
        one key take turns."""
        if self.q.form == ROW_LOCK and not self.q.count_crashes:
            return "FOR UPDATE SKIP LOCKED"
        return "FOR UPDATE"

    def key_matches(self) -> list[str]:
        """The row of the new row's unique key."""
        return [f"{self.c(f)} = {self.or_default(f, self.p(f.attr))}" for f in self.q.unique]

    def replaceable(self) -> list[str]:
        """The key's row, queued and held by no worker (as cancellable(), by its key): not
        finished, not a dead letter, under a lease not leased by the database's clock. Where a
        worker's hold is a lock (the row lock's, a counted row's key), each dialect's pick
        passes over it."""
        q = self.q
        g, pa, lu = self.role("group"), self.role("processed_at"), self.role("locked_until")
        conds = self.key_matches()
        if pa is not None:
            conds.append(f"{self.c(pa)} IS NULL")
        if q.dead_letter_group is not None and g is not None:
            conds.append(f"{self.c(g)} <> {self.p('dead_group')}")
        if lu is not None and q.lease:
            conds.append(f"({self.c(lu)} IS NULL OR {self.c(lu)} <= {self.now_of(lu)})")
        return conds

    def fresh(self, due: str | None = None) -> list[str]:
        """What a replaced row is set to: the new row's values (its key aside), its attempts
        counted from the start, no lease and no error or progress of the job it replaces;
        with `due`, that due time."""
        keys = {f.name for f in self.q.unique}
        sets: list[str] = []
        for f in self.q.fields:
            value: str | None = None
            if f.name in keys or f.role in ("id", "enqueued_at"):
                continue
            if f.role == "retry_after" and due is not None:
                value = due
            elif not f.generated:
                value = self.or_default(f, self.p(f.attr))
            elif f.role == "attempt":
                value = initial_attempt(f)
            elif f.role in ("retry_after", "priority") and f.column.default_sql:
                value = f.column.default_sql
            elif f.role in ("locked_until", "error", "result", "progress"):
                value = "NULL"
            if value is not None:
                sets.append(f"{self.c(f)} = {value}")
        return sets

    def replace(self) -> None:
        """REPLACE, REPLACE_INSERT, (DEBOUNCE, DEBOUNCE_INSERT) and KEY_ROW: what
        insert_replace() and insert_debounced() run, in this order, until one finds or makes
        the key's row."""
        fields = list(self.q.insert_fields)
        keys = ", ".join(self.c(f) for f in self.q.unique)
        values = [self.or_default(f, self.p(f.attr)) for f in fields]
        self.replace_pick()
        self.replace_update("REPLACE", self.fresh(),
                            "Give the queued row of the new row's unique key, where no worker "
                            "holds it, the new row's values; returns its id.")
        self.add("REPLACE_INSERT", self.insert_new(fields, values, keys),
                 "Enqueue the new row unless a row of its unique key is there"
                 + self.insert_new_gives)
        if self.debounces:
            ra, ea = self.role("retry_after"), self.role("enqueued_at")
            assert ra is not None and ea is not None
            now = self.now_of(ra)
            due = (f"{self.least}(\n        {self.later(now, self.p('wait'))},\n"
                   f"        {self.later(self.c(ea), self.p('max_wait'))}\n    )")
            self.replace_update("DEBOUNCE", self.fresh(due),
                                "As REPLACE, and move its due time to `wait` seconds from now, "
                                "but no later than `max_wait` seconds after the row was first "
                                "enqueued.")
            first = self.later(now, self.p("first_wait"))
            if ra in fields:
                values[fields.index(ra)] = first
            else:
                fields.append(ra)
                values.append(first)
            self.add("DEBOUNCE_INSERT", self.insert_new(fields, values, keys),
                     "As REPLACE_INSERT, the new row due `first_wait` seconds from now (the "
                     "lesser of `wait` and `max_wait`).")
        self.add("KEY_ROW", f"SELECT {self.c(self.q.id)}\nFROM {self.t()}\n"
                 + self.where(self.key_matches()),
                 "Find the row of the new row's unique key (one that REPLACE leaves alone).")

    def replace_pick(self) -> None:
        """Hook: a statement that locks the replaceable row before REPLACE or DEBOUNCE writes
        it (MySQL/MariaDB; elsewhere the UPDATE picks it itself)."""

    def replace_update(self, name: str, sets: list[str], doc: str) -> None:
        """Hook: an UPDATE of the replaceable row (SQLite: the one writer needs no pick)."""
        self.add(name, f"UPDATE {self.t()}\nSET " + ",\n    ".join(sets) + "\n"
                 + self.where(self.replaceable()) + self.returning_id(), doc)

    @property
    def insert_new_gives(self) -> str:
        """Hook: what insert_new()'s statement gives, after "unless a row of its unique key is
        there"."""
        return "; returns its id."

    def insert_new(self, fields: list[Field], values: list[str], keys: str) -> str:
        """Hook: an INSERT that adds nothing where a row of the key is there, returning the
        new row's id."""
        cols = ", ".join(self.c(f) for f in fields)
        return (f"INSERT INTO {self.t()} ({cols})\nVALUES ({', '.join(values)})\n"
                f"ON CONFLICT ({keys}) DO NOTHING{self.returning_id()}")

    def now_of(self, f: Field) -> str:
        """Hook: the database's time now, as column `f` holds times."""
        return self.db_now

    def later(self, time: str, seconds: str) -> str:
        """Hook: `time` plus `seconds` (a placeholder)."""
        raise NotImplementedError

    least = "LEAST"  # the lesser of its arguments


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


def initial_attempt(f: Field) -> str:
    """The attempt count a new row starts with: the column's DDL default where it is a number,
    else 0."""
    default = (f.column.default_sql or "").strip().strip("()")
    return default if default.isdigit() else "0"

