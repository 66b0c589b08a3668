"""What a generated module tells the runtime about its table (the contract committed modules
import, with values.py): no SQL parsing at run time."""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

# A placeholder outside quotes: `:name` for sqlite3, `%(name)s` for psycopg and PyMySQL.
QUOTED = r'"(?:[^"]|"")*"|`(?:[^`]|``)*`|\'(?:[^\']|\'\')*\''
PLACEHOLDERS = {
    True: re.compile(QUOTED + r"|(?<!:):(?P<name>[^\W\d]\w*)"),
    False: re.compile(QUOTED + r"|%\((?P<name>[^\W\d]\w*)\)s"),
}

# prune --partitions' statements name one partition of the table, which no statement can bind:
# their SQL holds this slot, filled in when they run. Unfilled, they prepare nowhere.
PARTITION_SLOT = "{partition}"


def names_a_partition(sql: str) -> bool:
    return PARTITION_SLOT in sql


@attrs.frozen
class RuntimeDefaults:
    """Spec defaults for settings that shape no SQL; the runtime's arguments override them."""

    workers: int = 1
    batch: int = 1
    lease_seconds: int = 30
    poll_interval: float = 1.0
    max_attempts: int | None = None


@attrs.frozen(kw_only=True)
class Seats:
    """[flow] limits of a row-lock or advisory table, held by seats: a job in work holds one
    session lock of the queue's `concurrency` seats and one of its key's `key_concurrency`
    seats (the key: the claimed row's attribute `key`), which a crash gives up with its session.
    None: no such limit."""

    concurrency: int | None = None
    key: str | None = None
    key_concurrency: int | None = None


@attrs.frozen(kw_only=True)
class QueueStatus:
    """One group of a queue table as `status()` counts it at a given time."""

    group: str | None  # None where the table has no groups
    ready: int  # due and free: the next claims take these (row lock: also those in work)
    scheduled: int  # due later (retry_after in the future)
    in_work: int | None  # under a live lease; None where the database cannot tell
    finished: int | None  # processed and kept; None where finishing deletes the row
    oldest_ready: datetime.datetime | None  # when the longest-waiting ready row became due


@attrs.frozen(kw_only=True)
class Replaced:
    """What `insert_replace()` or `insert_debounced()` did with a row of a unique key."""

    # "queued": no row of the key was there, the new row was inserted; "replaced": the key's
    # queued row, which no worker held, took the new row's values; "kept": the key's row is in
    # work, finished or a dead letter, and was left as it is (nothing was enqueued).
    outcome: str
    # The key's row: the new one, the replaced one, or the one kept (None in the rare case it
    # was gone by the time it was looked up, or where the insert cannot read an id back).
    id: Any


@attrs.frozen(kw_only=True)
class AfterState:
    """What became of the jobs a job waits for (`after`), as `after_state()` finds them: each
    job's id in one of the three. A batch is its callback's: `after_state(conn, id=callback)`
    says how far the batch has come."""

    finished: tuple[Any, ...] = ()  # acked or dropped (kept as processed, or deleted)
    # A dead letter, cancelled included: each one the job was enqueued after with
    # on_failure="dead_letter" keeps it from running (it is dead-lettered in turn).
    dead: tuple[Any, ...] = ()
    waiting: tuple[Any, ...] = ()  # still in the queue, unfinished
    blocking: tuple[Any, ...] = ()  # of `dead`, those whose on_failure is "dead_letter"

    @classmethod
    def of(cls, rows: Sequence[Sequence[Any]]) -> AfterState:
        """From AFTER_STATE's rows: (after_id, on_failure, state)."""
        by: dict[str, list[Any]] = {"finished": [], "dead": [], "waiting": []}
        blocking: list[Any] = []
        for after_id, on_failure, state in rows:
            by[str(state)].append(after_id)
            if state == "dead" and on_failure == "dead_letter":
                blocking.append(after_id)
        return cls(finished=tuple(by["finished"]), dead=tuple(by["dead"]),
                   waiting=tuple(by["waiting"]), blocking=tuple(blocking))

    @classmethod
    def by_job(cls, ids: Sequence[Any], rows: Sequence[Sequence[Any]]) -> dict[Any, AfterState]:
        """From AFTER_STATES' rows, (job_id, after_id, on_failure, state): each job of `ids`
        and its AfterState (an empty one for a job that waits for none)."""
        of: dict[Any, list[Sequence[Any]]] = {i: [] for i in ids}
        for job_id, *rest in rows:
            of.setdefault(job_id, []).append(rest)
        return {i: cls.of(found) for i, found in of.items()}

    @property
    def done(self) -> bool:
        """Whether every job it waits for is finished or dead."""
        return not self.waiting


@attrs.frozen(kw_only=True)
class JobState:
    """One job as `state()` finds it at a given time, in the queue table or its dead letters
    (or as `dead_letters()` lists them)."""

    # "ready" (due and free; under a row lock also while a worker holds it), "scheduled" (due
    # later), "in_work" (under a live lease), "finished" (processed and kept) or "dead".
    state: str
    id: Any
    attempt: int | None  # the attempt column as it stands (see the attempt convention)
    due: datetime.datetime | None  # retry_after, where the table has it
    finished_at: datetime.datetime | None  # processed_at, where the table keeps finished rows
    # Decoded as the handler receives it; None where the table has no payload. Where it does
    # not decode: the value as the driver returned it (bytes, text, or parsed JSON).
    payload: Any
    # None, or why the payload does not decode (one line, "ValidationError: Object missing
    # required field `subject`"): the worker dead-letters such a job.
    payload_error: str | None = None
    # The last failure a worker recorded (its type, message and where it was raised), where the
    # table has an `error` column; None when none failed (or since a requeue).
    error: str | None = None
    # What its handler returned (parsed JSON, or an instance of the spec's result type), where
    # the table has a `result` column and the job finished with one; else None.
    result: Any = None
    # What its handler last reported ({"fraction": 0.4, "note": "..."}), as the last renewal of
    # its lease wrote it, where the table has a `progress` column; else None.
    progress: Any = None

    @classmethod
    def with_payload(cls, *, state: str, id: Any, attempt: int | None,
                     due: datetime.datetime | None, finished_at: datetime.datetime | None,
                     stored: Any, decode: Callable[[Any], Any],
                     error: str | None = None, result: Any = None,
                     progress: Any = None) -> JobState:
        """The job whose payload column holds `stored`, decoded by `decode` (NULL stays None).
        A payload that does not decode is kept as stored, with `payload_error` saying why:
        whoever reads a job's state still gets it, whatever its payload holds."""
        payload, undecoded = stored, None
        if stored is not None:
            try:
                payload = decode(stored)
            except Exception as err:  # the decoder's (msgspec's, or a codec's) in any form
                undecoded = _one_line(err)
        return cls(state=state, id=id, attempt=attempt, due=due, finished_at=finished_at,
                   payload=payload, payload_error=undecoded, error=error, result=result,
                   progress=progress)


def _one_line(err: BaseException) -> str:
    """An exception as one line: its type, then its message with its whitespace collapsed."""
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


@attrs.frozen(kw_only=True)
class TableHealth:
    """A PostgreSQL queue table as the server's statistics count it (pg_stat_user_tables)."""

    dead_tuples: int  # row versions dead and not yet vacuumed away
    live_tuples: int
    hot_share: float | None  # the share of its updates that were HOT; None before any update
    last_autovacuum: datetime.datetime | None  # None: never since the statistics were reset

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> TableHealth:
        """From TABLE_HEALTH's row: dead, live, HOT share, last autovacuum."""
        return cls(dead_tuples=int(row[0]), live_tuples=int(row[1]),
                   hot_share=None if row[2] is None else float(row[2]), last_autovacuum=row[3])


@attrs.frozen(kw_only=True)
class Operations:
    """The generated functions of one table (sync or async); None where the form has none.

    Their keyword arguments follow the table's roles (a table without groups takes no `group`),
    which the runtime reads from the descriptor.
    """

    claim: Callable[..., Any] | None = None
    # [flow] limits on MySQL: the claim turn, taken before a claim's transaction and given up
    # after its commit (elsewhere claim() takes it, or the transaction is the turn).
    claim_turn: Callable[..., Any] | None = None
    claim_turn_end: Callable[..., Any] | None = None
    scheduled: Callable[..., Any] | None = None  # rows due later, for the claim's choice
    # MySQL, a partitioned PostgreSQL table: the priorities that have due rows, which the
    # claim by priority keeps to.
    due_priorities: Callable[..., Any] | None = None
    held_back: Callable[..., Any] | None = None  # [flow] rows of keys at their limit, the same
    fifo_claim: Callable[..., Any] | None = None
    candidates: Callable[..., Any] | None = None
    take: Callable[..., Any] | None = None
    relock: Callable[..., Any] | None = None
    release: Callable[..., Any] | None = None
    claim_guard: Callable[..., Any] | None = None
    claim_unguard: Callable[..., Any] | None = None
    lock: Callable[..., Any] | None = None
    unlock: Callable[..., Any] | None = None
    renew: Callable[..., Any] | None = None
    renew_many: Callable[..., Any] | None = None
    finish: Callable[..., Any] | None = None
    finish_many: Callable[..., Any] | None = None
    retry: Callable[..., Any] | None = None
    retry_after: Callable[..., Any] | None = None
    dead_letter: Callable[..., Any] | None = None
    insert: Callable[..., Any] | None = None
    insert_many: Callable[..., Any] | None = None
    insert_unique: Callable[..., Any] | None = None  # a schedule's next occurrence
    notify: Callable[..., Any] | None = None
    pause: Callable[..., Any] | None = None  # [flow] pauses
    resume: Callable[..., Any] | None = None
    paused: Callable[..., Any] | None = None
    after_state: Callable[..., Any] | None = None  # `after`: what a waiting job waits for
    after_states: Callable[..., Any] | None = None  # the same, of several jobs at once


@attrs.frozen
class TableDescriptor:
    """A queue table as generated: its claim form, roles, statements and row types."""

    table: str
    schema: str | None
    dialect: str  # "postgres", "mysql" or "sqlite"
    form: str  # "row_lock", "lease" or "advisory"
    fifo: bool
    count_crashes: bool  # row lock: claims count the attempt in a transaction of their own
    roles: Mapping[str, str]  # role -> column name
    columns: tuple[str, ...]  # the claimed row's columns, in the order of its attributes
    statements: Mapping[str, str]  # statement name -> exact SQL text
    claimed_row: type[Any]
    new_row: type[Any]
    codec: str | None
    decode_payload: Callable[[Any], Any] | None
    advisory_key: Callable[[Any], str] | None
    dead_letter_group: str | None
    dead_letter_table: str | None
    defaults: RuntimeDefaults
    source: str  # the spec the module was generated from
    ops: Operations
    async_ops: Operations | None  # the `_async` twins (psycopg, asyncmy); None on SQLite
    # The class a handler's result must fit where the spec types the result column (`type`);
    # None: any JSON.
    result_type: Any = None
    # [flow] limits of a row-lock or advisory table (a lease table's claim counts its leases).
    seats: Seats | None = None
    # Derived from the above when the module is imported, so the module says each thing once.
    role_attrs: Mapping[str, str] = attrs.field(init=False)  # role -> claimed row attribute
    statement_params: Mapping[str, tuple[str, ...]] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        attr_of = dict(zip(self.columns, (f.name for f in attrs.fields(self.claimed_row)),
                           strict=True))
        object.__setattr__(self, "role_attrs", {role: attr_of[column]
                                                for role, column in self.roles.items()})
        object.__setattr__(self, "statement_params", {
            name: _placeholders(sql, sqlite=self.dialect == "sqlite")
            for name, sql in self.statements.items()})

    @property
    def claim_counts_attempt(self) -> bool:
        """Lease and advisory claims count the attempt; row lock counts it at a retry."""
        return (self.form != "row_lock" or self.count_crashes) and "attempt" in self.roles

    @property
    def qualified_name(self) -> str:
        return f"{self.schema}.{self.table}" if self.schema else self.table


def _placeholders(sql: str, *, sqlite: bool) -> tuple[str, ...]:
    """The placeholder names of `sql`, each once, in order of appearance."""
    seen: dict[str, None] = {}
    for m in PLACEHOLDERS[sqlite].finditer(sql):
        if m.group("name") is not None:
            seen.setdefault(m.group("name"))
    return tuple(seen)
