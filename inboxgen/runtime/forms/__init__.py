"""The claim forms, one module each: row lock, lease, advisory."""

from __future__ import annotations

from typing import TYPE_CHECKING

from inboxgen.runtime.forms.advisory import Advisory
from inboxgen.runtime.forms.base import Form
from inboxgen.runtime.forms.lease import Lease
from inboxgen.runtime.forms.row_lock import row_lock

if TYPE_CHECKING:
    from inboxgen.runtime.worker import Worker

__all__ = ["Form", "form_for"]


def form_for(worker: Worker) -> Form:
    """The form the worker's table was generated for."""
    make = {"row_lock": row_lock, "lease": Lease, "advisory": Advisory}[worker.descriptor.form]
    return make(worker)
