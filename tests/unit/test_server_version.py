"""MySQL/MariaDB server versions: which inboxgen accepts, and how a refusal reads."""

from __future__ import annotations

import pytest

from inboxgen import ServerTooOld
from inboxgen.runtime.serverversion import parse_server_version, require_supported

ACCEPTED = ["8.0.1", "8.0.35", "8.4.2-log", "9.1.0", "10.6.0-MariaDB",
            "10.11.19-MariaDB-0+deb12u1", "11.4.2"]
REFUSED = ["8.0.0", "5.7.44-log", "10.5.22-MariaDB", "garbage", "8.0"]


@pytest.mark.parametrize("text", ACCEPTED)
def test_versions_inboxgen_runs_on(text: str) -> None:
    version = parse_server_version(text)
    assert version is not None and version.supported, text


@pytest.mark.parametrize("text", REFUSED)
def test_versions_inboxgen_refuses(text: str) -> None:
    version = parse_server_version(text)
    assert version is None or not version.supported, text


def test_flavor_and_floor_are_named() -> None:
    maria = parse_server_version("10.5.22-MariaDB")
    mysql = parse_server_version("5.7.44-log")
    assert maria is not None and str(maria) == "MariaDB 10.5.22"
    assert maria.floor == (10, 6, 0)
    assert mysql is not None and str(mysql) == "MySQL 5.7.44"
    assert mysql.floor == (8, 0, 1)


@pytest.mark.parametrize(("text", "shown"), [("10.5.22-MariaDB", "MariaDB 10.5.22"),
                                             ("5.7.44-log", "MySQL 5.7.44"),
                                             ("garbage", "'garbage'")])
def test_server_too_old_names_server_and_floor(text: str, shown: str) -> None:
    with pytest.raises(ServerTooOld) as caught:
        require_supported(text, worker="mailer", table="email_jobs")
    assert str(caught.value) == (
        f"the server is {shown}; inboxgen needs MySQL 8.0.1 or MariaDB 10.6 or newer (SKIP "
        f"LOCKED) (worker mailer, table email_jobs)")
    assert caught.value.table == "email_jobs"
