"""A job whose payload does not decode (JSON text that is not JSON; JSON its typed payload's
class refuses) on the operator's side, on real databases: the worker dead-letters it, and the
dashboard (read-only or not, payloads shown or not, mounted or on its own), `inboxgen status`
and the generated `state()` / `dead_letters()` still answer, showing that job as undecodable
with its error, and every other job as usual."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import html
import json
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from dbcases import apply_ddl, typed
from genutil import import_path

from inboxgen import Job, Worker
from inboxgen.testing import run_until_idle

starlette = pytest.importorskip("starlette")  # the dashboard extra; the dev extra has it
uvicorn = pytest.importorskip("uvicorn")

from starlette.applications import Starlette  # noqa: E402
from starlette.routing import Mount  # noqa: E402

from inboxgen.ops import dashboard  # noqa: E402

TOKEN = "tok-51c0ffee"
EMAIL = ("import msgspec\n\n\nclass Email(msgspec.Struct):\n    subject: str\n"
         "    to: str\n")
GOOD = '{"subject": "hello", "to": "good@example.com"}'
MISSING = '{"to": "poison@example.com"}'  # no subject: Email refuses it
MALFORMED = "not json {poison-text"
MISSING_ERROR = "ValidationError: Object missing required field `subject`"
MALFORMED_ERROR = "DecodeError: JSON is malformed"

# mail: a typed payload (jsonb on PostgreSQL), dead letters in a table of their own; tasks: JSON
# kept as text (so it may be anything), dead letters in group "dead".
MAIL_SPEC = """\
table = "mail"
dialect = "{dialect}"
ddl = "mail.sql"

[columns]
id = {{ role = "id", generated = true }}
queue = "group"
attempt = {{ role = "attempt", generated = true }}
locked_until = "locked_until"
payload = {{ role = "payload", codec = "json", type = "mail_payloads:Email" }}

[runtime]
max_attempts = 3

[dead_letter]
table = "mail_dead"
"""
MAIL_DDL = """\
CREATE TABLE mail (
    id {id},
    queue {text} NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 1,
    locked_until {lease},
    payload {json} NOT NULL
);
CREATE INDEX mail_claim ON mail (queue, id);
CREATE TABLE mail_dead (
    id BIGINT PRIMARY KEY,
    queue {text} NOT NULL,
    attempt INTEGER NOT NULL,
    locked_until {lease},
    payload {json} NOT NULL
);
"""
TASKS_SPEC = """\
table = "tasks"
dialect = "{dialect}"
ddl = "tasks.sql"

[columns]
id = {{ role = "id", generated = true }}
queue = "group"
attempt = {{ role = "attempt", generated = true }}
locked_until = "locked_until"
payload = {{ role = "payload", codec = "json" }}

[runtime]
max_attempts = 3

[dead_letter]
group = "dead"
"""
TASKS_DDL = """\
CREATE TABLE tasks (
    id {id},
    queue {text} NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 1,
    locked_until {lease},
    payload TEXT NOT NULL
);
CREATE INDEX tasks_claim ON tasks (queue, id);
"""


def sql_text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


class Shop:
    """A project (pyproject.toml, specs, the payload class) built by `inboxgen build` as a user
    builds it, its tables on a fresh database: `mail` and `tasks`, imported."""

    def __init__(self, root: Path, dialect: str, target: str) -> None:
        self.root, self.dialect, self.target = root, dialect, target
        specs = root / "specs"
        specs.mkdir(parents=True)
        (root / "pyproject.toml").write_text(
            '[tool.inboxgen]\nspecs = "specs"\nout = "generated"\n', encoding="utf-8")
        (root / "mail_payloads.py").write_text(EMAIL, encoding="utf-8")
        for name, spec, ddl in (("mail", MAIL_SPEC, MAIL_DDL), ("tasks", TASKS_SPEC, TASKS_DDL)):
            (specs / f"{name}.toml").write_text(spec.format(dialect=dialect), encoding="utf-8")
            (specs / f"{name}.sql").write_text(typed(ddl, dialect), encoding="utf-8")
            apply_ddl(dialect, target, typed(ddl, dialect))
        built = self.inboxgen("build")
        assert built.returncode == 0, built.stderr
        tag = f"{abs(hash(str(root)))}_{dialect}"
        self.mail = import_path(root / "generated" / "mail.py", f"_undecodable_mail_{tag}")
        self.tasks = import_path(root / "generated" / "tasks.py", f"_undecodable_tasks_{tag}")

    def inboxgen(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "inboxgen", *args], cwd=self.root,
                              capture_output=True, text=True, check=False, timeout=120)

    def exec(self, *statements: str) -> None:
        apply_ddl(self.dialect, self.target, ";\n".join(statements) + ";")

    def connect(self) -> Any:
        from inboxgen.ops.connect import connect

        return connect(self.dialect, self.target)[0]


@pytest.fixture(params=["sqlite", "postgres"])
def shop(request: pytest.FixtureRequest, fresh_database: Callable[[str], str], tmp_path: Path,
         monkeypatch: pytest.MonkeyPatch) -> Shop:
    monkeypatch.syspath_prepend(str(tmp_path / "app"))  # the payload class, as a worker has it
    return Shop(tmp_path / "app", request.param, fresh_database(request.param))


def fill(shop: Shop) -> dict[str, int]:
    """A dead letter of each table whose payload does not decode (the mail one dead-lettered by
    a worker), a queued job of each whose payload does not decode, and a good one of each."""
    # The worker serves group "work" only; the ids are written before it moves the first.
    shop.exec(f"INSERT INTO mail (queue, payload) VALUES ('work', {sql_text(MISSING)})",
              f"INSERT INTO mail (queue, payload) VALUES ('later', {sql_text(GOOD)})",
              f"INSERT INTO mail (queue, payload) VALUES ('later', {sql_text(MISSING)})")
    served: list[Any] = []

    def send(job: Job[Any]) -> None:
        served.append(job.payload)

    worker = Worker(shop.mail.DESCRIPTOR, send, database=shop.target, group="work",
                    listen=False)
    asyncio.run(run_until_idle(worker, timeout=30))
    assert served == [] and worker.stats.dead_lettered == 1
    shop.exec(f"INSERT INTO tasks (queue, payload) VALUES ('dead', {sql_text(MALFORMED)})",
              f"INSERT INTO tasks (queue, payload) VALUES ('work', {sql_text(GOOD)})",
              f"INSERT INTO tasks (queue, payload) VALUES ('work', {sql_text(MALFORMED)})")
    return {"mail_dead": 1, "mail_good": 2, "mail_queued": 3,
            "tasks_dead": 1, "tasks_good": 2, "tasks_queued": 3}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def in_thread(app: Any) -> Iterator[str]:
    """`app` served by uvicorn on a thread of this process until the block ends."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(),
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True
        thread.join(timeout=20)


def get(url: str) -> tuple[int, str]:
    """(status, body, its HTML entities undone) of a GET; an error status is an answer."""
    try:
        with urllib.request.urlopen(url, timeout=20) as response:
            return response.status, html.unescape(response.read().decode())
    except urllib.error.HTTPError as err:
        return err.code, html.unescape(err.read().decode())


def test_the_generated_readers_show_it_as_stored_with_its_error(shop: Shop) -> None:
    ids = fill(shop)
    now = dt.datetime.now(dt.UTC)
    conn = shop.connect()
    try:
        for module, error, stored in ((shop.mail, MISSING_ERROR, MISSING),
                                      (shop.tasks, MALFORMED_ERROR, MALFORMED)):
            name = module.DESCRIPTOR.table
            if shop.dialect == "postgres" and module is shop.mail:
                stored = json.loads(stored)  # jsonb: psycopg hands it back parsed
            (dead,) = module.dead_letters(conn, limit=10)
            assert (dead.id, dead.state, dead.payload) == (ids[f"{name}_dead"], "dead", stored)
            assert dead.payload_error is not None and dead.payload_error.startswith(error)
            found = module.state(conn, id=ids[f"{name}_dead"], now=now)
            assert found == dead
            queued = module.state(conn, id=ids[f"{name}_queued"], now=now)
            assert (queued.state, queued.payload, queued.payload_error) == (
                "ready", stored, dead.payload_error)
            good = module.state(conn, id=ids[f"{name}_good"], now=now)
            assert good.payload_error is None
            assert good.payload == module.decode_payload(
                json.loads(GOOD) if isinstance(dead.payload, dict) else GOOD)
            conn.rollback()
    finally:
        conn.close()


def test_the_dashboard_and_status_show_it_as_undecodable(shop: Shop) -> None:
    ids = fill(shop)
    modules = [shop.mail, shop.tasks]
    plain = dashboard.app(shop.target, modules)  # read-only, payloads hidden, on its own
    shows = dashboard.app(shop.target, modules, show_payloads=True, allow_actions=True,
                          token=TOKEN)
    outer = Starlette(routes=[Mount("/ops/queues", app=shows)])  # mounted in a user's app
    try:
        with in_thread(plain) as alone, in_thread(outer) as mounted:
            for base, payloads_shown in ((alone, False), (f"{mounted}/ops/queues", True)):
                code, page = get(f"{base}/")
                assert code == 200, page
                # Each dead letter is listed, marked as not decoding, with its error.
                for table, error in (("mail", MISSING_ERROR), ("tasks", MALFORMED_ERROR)):
                    section = page.split(f'data-table="{table}"', 1)[1].split("</section>")[0]
                    assert f'id={ids[f"{table}_dead"]}">{ids[f"{table}_dead"]}</a>' in section
                    assert "does not decode" in section and error in section, section
                assert ("poison@example.com" in page) is payloads_shown
                assert ("poison-text" in page) is payloads_shown
                code, body = get(f"{base}/api/status")
                assert code == 200, body

                for table, error in (("mail", MISSING_ERROR), ("tasks", MALFORMED_ERROR)):
                    for job, state in (("dead", "dead"), ("queued", "ready")):
                        code, page = get(f"{base}/job?table={table}&id={ids[f'{table}_{job}']}")
                        assert code == 200, page
                        assert f'data-state="{state}"' in page
                        assert "does not decode" in page and error in page, page
                        raw = "poison@example.com" if table == "mail" else "poison-text"
                        assert (raw in page) is payloads_shown
                    code, page = get(f"{base}/job?table={table}&id={ids[f'{table}_good']}")
                    assert code == 200 and "does not decode" not in page
                    assert ("good@example.com" in page) is payloads_shown
                # With actions on, the dead letter can be put back once its payload is fixed.
                code, page = get(f"{base}/job?table=mail&id={ids['mail_dead']}")
                assert ('action="' in page and "Requeue" in page) is payloads_shown
    finally:
        for web in (plain, shows):
            dashboard.dashboard_of(web).database.close()

    env_args = ("--database-url", shop.target)
    shown = shop.inboxgen("status", *env_args)
    assert shown.returncode == 0, shown.stderr
    listed = shop.inboxgen("status", "--json", *env_args)
    assert listed.returncode == 0, listed.stderr
    tables = {t["table"]: t for t in json.loads(listed.stdout)}
    assert tables["mail"]["dead_table"] == 1
    assert {g["group"]: g["ready"] for g in tables["tasks"]["groups"]} == {"dead": 1, "work": 2}

