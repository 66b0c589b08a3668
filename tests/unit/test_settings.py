"""A worker's settings: the spec's defaults, what the caller gave, and the checks they pass
before anything connects."""

from __future__ import annotations

import pytest

from generated_examples import mailer, reports
from inboxgen.errors import WorkerConfigError
from inboxgen.runtime.settings import UNSET, fit_to_pool, settings_for


def settings(descriptor: object, **given: object):  # type: ignore[no-untyped-def]
    args = {"group": None, "name": None, "workers": None, "batch": None, "lease": None,
            "poll_interval": None, "max_attempts": UNSET, "backoff": None,
            "transactional": False, **given}
    return settings_for(descriptor, **args)  # type: ignore[arg-type]


def test_the_specs_defaults_fill_what_the_caller_left_out() -> None:
    s = settings(reports.DESCRIPTOR)
    assert (s.name, s.workers, s.batch, s.lease, s.max_attempts) == ("report_jobs", 1, 1, 60,
                                                                      None)
    given = settings(mailer.DESCRIPTOR, group="emails", workers=3, max_attempts=2)
    assert (given.name, given.workers, given.max_attempts) == ("email_jobs:emails", 3, 2)


@pytest.mark.parametrize(("descriptor", "given", "message"), [
    (reports.DESCRIPTOR, {"max_attempts": 3}, "needs a dead-letter destination"),
    (mailer.DESCRIPTOR, {"group": "emails", "max_attempts": None}, "max_attempts is missing"),
    (mailer.DESCRIPTOR, {}, "the table has groups"),
    (reports.DESCRIPTOR, {"group": "g"}, "no group column"),
    (reports.DESCRIPTOR, {"workers": 0}, "workers must be at least 1"),
    (reports.DESCRIPTOR, {"lease": 0}, "lease must be at least 1"),
])
def test_settings_that_do_not_fit_the_table_are_refused(descriptor: object,
                                                        given: dict[str, object],
                                                        message: str) -> None:
    with pytest.raises(WorkerConfigError, match=message) as err:
        settings(descriptor, **given)
    assert err.value.table


class Pool:
    def __init__(self, max_size: int) -> None:
        self.max_size = max_size


def test_a_callers_pool_bounds_the_slots_and_keeps_one_connection_spare() -> None:
    s = settings(mailer.DESCRIPTOR, group="emails", workers=8)
    assert fit_to_pool(s, Pool(4), "email_jobs").workers == 3
    assert fit_to_pool(s, Pool(20), "email_jobs").workers == 8
    with pytest.raises(WorkerConfigError, match="at least 2"):
        fit_to_pool(s, Pool(1), "email_jobs")
