"""The claim forms, one module each: row lock (and its seated variant), lease, advisory."""

from __future__ import annotations

from inboxgen.runtime.forms.advisory import advisory
from inboxgen.runtime.forms.base import Form, Parts, Slots
from inboxgen.runtime.forms.lease import FifoLease, Lease
from inboxgen.runtime.forms.row_lock import row_lock
from inboxgen.runtime.forms.seated_row_lock import seated_row_lock

__all__ = ["Form", "Parts", "Slots", "form_for"]


def form_for(parts: Parts) -> Form:
    """The form the table was generated for."""
    d = parts.descriptor
    if d.form == "lease":
        return FifoLease(parts) if d.fifo else Lease(parts)
    if d.form == "row_lock":
        # [flow] concurrency: seats, session locks each job in work holds
        return seated_row_lock(parts) if d.seats is not None else row_lock(parts)
    return advisory(parts)
