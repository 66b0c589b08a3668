"""Whether a row is still in its table. A lease renewal or a settlement that changed nothing
either lost its row to another worker (the row is there, under another lease) or found it
deleted while the job ran (deleting a row is how a job is cancelled): the two are told apart
with one read by id, asked only then."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from inboxgen.generate.dialects import DIALECTS

if TYPE_CHECKING:
    from inboxgen.descriptor import TableDescriptor
    from inboxgen.runtime.backends.base import Backend


class Presence:
    def __init__(self, descriptor: TableDescriptor, backend: Backend) -> None:
        dialect = DIALECTS[descriptor.dialect]
        self.sql = (f"SELECT 1 FROM {dialect.qualified(descriptor.schema, descriptor.table)} "
                    f"WHERE {dialect.quote(descriptor.roles['id'])} = {dialect.param('id')}")
        self.backend = backend

    async def gone(self, row_id: Any) -> bool:
        """True when row `row_id` is no longer in the table; False when it is, or when that
        cannot be read now (a lost connection)."""
        try:
            async with self.backend.connection() as conn:
                return await self.backend.query(conn, self.sql, {"id": row_id}) is None
        except Exception:
            return False
