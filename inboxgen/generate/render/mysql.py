"""MySQL/MariaDB (PyMySQL, and asyncmy for the async twins): statements run on a cursor (the
connections have no execute()), DATETIME and TIMESTAMP both as naive UTC, id lists as tuples,
claims as a locking SELECT then an UPDATE, and errors recognised by their numbers."""

from __future__ import annotations

from inboxgen.generate import catalog as cat
from inboxgen.generate.dialects import LEASE, ROW_LOCK
from inboxgen.generate.render.base import START_ARGS, Func, Renderer, Step, indented


class MySQLRenderer(Renderer):
    connection_type = "pymysql.connections.Connection[Any]"
    # Named in inboxgen.values, not imported: a module loads where asyncmy is not installed.
    async_connection_type = "_v.AsyncMySQLConnection"
    connection_helper = "mysql_connection"
    # DATETIME and TIMESTAMP both travel as naive UTC (the worker's sessions run with
    # time_zone '+00:00').
    naive_utc_kinds = frozenset({cat.TIMESTAMP, cat.TIMESTAMPTZ})
    executor = "_v.mysql_execute"
    executor_args = ("conn",)
    reads_before_leasing = True  # CLAIM_MARK writes the lease after CLAIM read the rows

    # What PyMySQL and asyncmy hand back where it is not the DB-API type of the kind: JSON and
    # MariaDB's UUID as text, BOOLEAN (TINYINT(1)) as int, TIME as a timedelta (a TIME may
    # exceed a day, or be negative).
    _DRIVER_TYPES = {cat.JSON: "str", cat.UUID: "str", cat.BOOL: "int",
                     cat.TIME: "datetime.timedelta"}

    def driver_type(self, kind: str) -> str:
        return self._DRIVER_TYPES.get(kind) or super().driver_type(kind)

    def ids_of(self, generator: str) -> str:
        # `IN %(ids)s`: both drivers write a tuple as a parenthesised list (asyncmy takes no
        # list there).
        return f"tuple({generator})"

    def ids_from(self, name: str) -> str:
        return f"tuple({name})"

    def insert_id(self, params: str) -> tuple[str, Step, bool]:
        """From the cursor's lastrowid where the id is AUTO_INCREMENT, or from the row where
        the caller gave it. An id filled by another default cannot be read back: insert
        returns None then."""
        idf = self.q.id
        t = self.raw_type(idf).removesuffix(" | None")
        if idf.column.auto and idf.generated:
            return "int", Step("last_id", self.cur("INSERT", params)), True
        run = tuple(self.run("", "INSERT", params))
        if not idf.generated and not idf.optional:
            return t, Step("exec", run, f"row.{idf.attr}"), True
        return "None", Step("exec", run), False

    def insert_unique_by_error(self, params: str) -> list[Func]:
        # INSERT IGNORE would also swallow truncations and foreign-key errors: only a
        # duplicate key (error 1062) means the job is already queued.
        return [Func("insert_unique", "row: NewRow", "bool",
                     "Enqueue one row unless its unique key is already queued; returns whether "
                     "it was inserted. Run it inside a transaction: only the statement is "
                     "undone by a duplicate.",
                     (Step("unless_duplicate", tuple(self.run("", "INSERT", params))),))]

    def replace_steps(self, update: str, insert: str, wake: tuple[str, ...], *,
                      debounce: bool = False) -> tuple[Step, ...]:
        """`insert` (REPLACE_INSERT or DEBOUNCE_INSERT) adds the new row or locks the key's
        row; REPLACE_PICK then finds that row where it is queued and free, and `update` writes
        it by id. A plain row lock's worker holds its row's lock while the job runs, and the
        insert would wait for it: there KEY_ROW, which locks nothing, says first whether the
        key has a row, and the pick passes over a held one."""
        idf = self.q.id
        new_id = ("cur.lastrowid" if idf.column.auto and idf.generated else
                  f"row.{idf.attr}" if not idf.generated else "None")
        inserted = "cur.lastrowid" if self.q.numbers_inserts else "not cur.lastrowid"
        add = [*self.run("cur = ", insert, "params"),
               f"if {inserted}:  # else the key's row is there, and locked by this call",
               f'    return Replaced(outcome="queued", id={new_id})']
        if self.q.form == ROW_LOCK and not self.q.count_crashes:
            add = [*self.run("cur = ", "KEY_ROW", "params"),
                   "if AWAIT cur.fetchone() is None:",
                   *indented(add)]
        lines = [*self.replace_params(debounce), *add,
                 *self.run("cur = ", "REPLACE_PICK", "params"),
                 "found = AWAIT cur.fetchone()",
                 "if found is not None:",
                 *indented(self.run("", update, '{**params, "id": found[0]}')),
                 '    return Replaced(outcome="replaced", id=found[0])']
        return (self.kept_step(lines),)

    def insert_many_by_executemany(self) -> Func:
        return Func("insert_many", "rows: Sequence[NewRow]", "None",
                    "Enqueue many rows in one statement (the driver's executemany writes one "
                    "multi-row INSERT); nothing is committed here.",
                    (Step("exec", ("AWAIT _v.mysql_executemany(conn, INSERT, [_insert_params(r) "
                                   "for r in rows])",)),))

    def claim(self) -> Func:
        """MySQL has no UPDATE ... RETURNING: a lease's claim selects and locks, then marks
        (claim_then_mark); a counted row lock's counts its rows after the select."""
        st = self.st
        claim = st["CLAIM"]
        args = self.args(claim, skip=("limit", *START_ARGS),
                         extra="limit: int = 1" + self.start_args(claim))
        doc = claim.doc
        then: tuple[str, ...] = ()
        keep = ""
        if "CLAIM_COUNT" in st:
            then = ("if rows:", *("    " + line for line in
                                  self.run("", "CLAIM_COUNT", self.params(st["CLAIM_COUNT"]))))
            doc = ("Claim up to `limit` rows, each with its key locked for the session until "
                   "RELEASE, and count their next delivery (each statement may commit at once: "
                   "a crash still spends the attempt).")
            keep = "r[-1] == 1"  # the rows whose keys CLAIM took
        name, walk, walk_doc, pick = self.by_priority("CLAIM")
        return Func("claim", args + walk, "list[ClaimedRow]", doc + walk_doc, (
            Step("many", self.cur(name, self.params(claim)), self.claimed("r"), after=then,
                 keep=keep),), before=pick)

    def cancel(self) -> Func:
        pick, s = self.st["CANCEL_PICK"], self.st["CANCEL"]
        copy: tuple[str, ...] = ()
        if "CANCEL_COPY" in self.st:  # `after`: to the dead-letter table, copied first
            copy = tuple(self.run("", "CANCEL_COPY", self.params(self.st["CANCEL_COPY"])))
        return Func("cancel", self.args(pick), "bool", s.doc, (
            Step("changed", (*copy, *self.cur("CANCEL", self.params(s)))),),
            before=(*self.cur("CANCEL_PICK", self.params(pick)),
                    "if AWAIT cur.fetchone() is None:",
                    "    return False  # held, finished or gone"))

    def fifo_head_claim(self) -> Func:
        q, st = self.q, self.st
        head = st["FIFO_HEAD"]
        ra = q.role("retry_after")
        run: tuple[str, ...]
        if q.form == ROW_LOCK:
            run = ("try:", *("    " + line for line in
                             self.run("", "FIFO_LOCK", self.params(st["FIFO_LOCK"]))),
                   *("    " + line for line in self.cur("FIFO_HEAD", self.params(head))),
                   "except Exception as err:  # either driver's error",
                   "    if _v.mysql_lock_unavailable(err):",
                   "        return None  # another claim holds the group",
                   "    raise")
        else:
            run = self.cur("FIFO_HEAD", self.params(head))
        # What the one-row step does with the head it read (`found`) before returning it.
        then: list[str] = []
        if ra is not None:
            then += [f"if found.{ra.attr} > now:", "    return None  # the head is not due"]
        extra = "now: datetime.datetime" if ra is not None else ""
        if q.form == LEASE:
            held = st["FIFO_HELD"]
            then += [*self.run("cur = ", "FIFO_HELD", self.params(held)),
                     "held = AWAIT cur.fetchone()", "if held is not None and held[0]:",
                     "    return None  # a row of the group is leased",
                     *self.run("", "CLAIM_MARK", [
                         f'"locked_until": {self.param_value("locked_until")}',
                         f'"ids": (found.{q.id.attr},)'])]
            extra = "now: datetime.datetime, locked_until: datetime.datetime"
        args = "*, group: str" + (f", {extra}" if extra else "")
        return Func("fifo_claim", args, "ClaimedRow | None",
                    "Claim the group's head, or nothing while it (or, under a lease, any row of "
                    "the group) is held or the head is not yet due; run it in a transaction.",
                    (Step("one", run, self.claimed("row"), after=tuple(then)),))
