"""`inboxgen prune --partitions`: drop whole the partitions of a partitioned PostgreSQL queue
table whose rows were all processed before a cutoff, without blocking claims.

A partition goes when it holds rows, none of them unfinished or processed at or after the
cutoff, and no row can land in it again: a range partition below the table's highest range (a
default, list or hash partition, or the range open to MAXVALUE, would take new rows). It is
detached CONCURRENTLY (claims go on; the detach waits for the transactions that may still read
it), read again once detached (a row requeued meanwhile puts it back: attached again, nothing
lost), then dropped. A detach that was interrupted is finished first, and its partition
dropped or, where it would be kept, attached again.

Only the module's functions run (partitions(), partition_keeps(), detach_partition(), ...);
they fill a partition's name, which no statement can bind, into `{partition}` as psycopg
quotes an identifier.
"""

from __future__ import annotations

import datetime as _dt
import re
from types import ModuleType
from typing import Any

import attrs

from inboxgen.errors import ConfigError

_RANGE = re.compile(r"FOR VALUES FROM \((?P<low>.*)\) TO \((?P<high>.*)\)")


@attrs.frozen
class Partition:
    schema: str
    name: str
    bounds: str  # FOR VALUES FROM (1) TO (1000), DEFAULT, ...
    detaching: bool

    @property
    def shown(self) -> str:
        return f"{self.schema}.{self.name}"


@attrs.frozen
class Outcome:
    partition: Partition
    done: str  # dropped, would drop, kept, attached again


def prune_partitions(module: ModuleType, conn: Any, *, before: _dt.datetime,
                     dry_run: bool) -> list[Outcome]:
    """Each partition of the module's table and what became of it. `conn` is a psycopg
    connection outside a transaction; it is left in autocommit."""
    d = module.DESCRIPTOR
    if not hasattr(module, "prune"):
        raise ConfigError(f"table {d.qualified_name} keeps no processed rows (no processed_at "
                          f"column: finishing a job deletes it), so no partition fills with "
                          f"them: prune --partitions has nothing to drop")
    if not hasattr(module, "partitions"):
        raise ConfigError(f"table {d.qualified_name} is not partitioned in the DDL its module was "
                          f"built from (PARTITION BY): prune --partitions has nothing to drop; "
                          f"prune --older-than deletes rows")
    conn.autocommit = True

    def kept(part: Partition) -> bool:
        return bool(module.partition_keeps(conn, schema=part.schema, name=part.name,
                                           before=before))

    parts = [Partition(*row) for row in module.partitions(conn)]
    if not parts:
        raise ConfigError(f"table {d.qualified_name} has no partitions on this database (is it "
                          f"partitioned there as in its DDL?)")
    last = _highest_range(parts)
    default = next((p for p in parts if p.bounds == "DEFAULT"), None)
    outcomes: list[Outcome] = []
    # An interrupted detach first: PostgreSQL lets a table have one detach pending at a time.
    for part in sorted(parts, key=lambda p: not p.detaching):
        if part.detaching:  # an interrupted detach: its rows are no longer claimed
            if dry_run:
                outcomes.append(Outcome(part, "would finish its interrupted detach"))
                continue
            module.finish_detach(conn, schema=part.schema, name=part.name)
        elif not _droppable(part, last):
            outcomes.append(Outcome(part, "kept: new rows may land in it"))
            continue
        elif kept(part):
            outcomes.append(Outcome(part, f"kept: holds rows not processed before "
                                          f"{before:%Y-%m-%d %H:%M:%S} UTC"))
            continue
        elif not _holds_rows(module, conn, part):
            outcomes.append(Outcome(part, "kept: empty (rows may still land in it)"))
            continue
        elif default is not None:
            why = (f"the table has a default partition ({default.shown}): PostgreSQL detaches "
                   f"a partition without blocking claims only from a table without one")
            if not dry_run:
                raise ConfigError(f"table {d.qualified_name}: {why}")
            outcomes.append(Outcome(part, f"would not drop: {why}"))
            continue
        elif dry_run:
            outcomes.append(Outcome(part, "would drop"))
            continue
        else:
            module.detach_partition(conn, schema=part.schema, name=part.name)
        # Detached: no claim, requeue or cancel reads it any more. A row requeued between the
        # reading above and the detach would be lost with it: it goes back instead, as does a
        # partition whose interrupted detach was not prune's to make (one rows may land in),
        # which was not read above.
        back = ("a row in it was requeued while it was being detached" if kept(part)
                else None if not part.detaching
                else "new rows may land in it" if not _droppable(part, last)
                else "empty (rows may still land in it)" if not _holds_rows(module, conn, part)
                else None)
        if back is not None:
            module.attach_partition(conn, schema=part.schema, name=part.name,
                                    bounds=part.bounds)
            outcomes.append(Outcome(part, f"attached again: {back}"))
            continue
        module.drop_partition(conn, schema=part.schema, name=part.name)
        outcomes.append(Outcome(part, "dropped"))
    return outcomes


def _droppable(part: Partition, last: Partition | None) -> bool:
    """A range partition below the highest: no new row lands in it."""
    return part is not last and _RANGE.fullmatch(part.bounds) is not None


def _holds_rows(module: ModuleType, conn: Any, part: Partition) -> bool:
    # partition_keeps() with no cutoff at all: any row.
    return bool(module.partition_keeps(conn, schema=part.schema, name=part.name,
                                       before=_dt.datetime.min.replace(tzinfo=_dt.UTC)))


def _highest_range(parts: list[Partition]) -> Partition | None:
    """The range partition open to MAXVALUE, else the one whose upper bound is highest where
    the bounds compare as numbers or as text of one length (ids, dates)."""
    ranges = [(p, m) for p in parts if (m := _RANGE.fullmatch(p.bounds))]
    if not ranges:
        return None
    for p, m in ranges:
        if "MAXVALUE" in m["high"]:
            return p

    def key(item: tuple[Partition, re.Match[str]]) -> tuple[int, Any]:
        high = item[1]["high"].strip("'")
        try:
            return (0, float(high))
        except ValueError:
            return (1, high)

    return max(ranges, key=key)[0]

