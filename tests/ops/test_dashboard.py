"""`inboxgen dashboard` on real databases: run as a user runs it (the command in the project's
folder) and driven in a real headless Chromium through selenium, or mounted in an ASGI app and
read over plain HTTP.

Screenshots are test artifacts: under $INBOXGEN_ARTIFACTS/<test name>/ when that is set, else
under the test's tmp_path (artifacts/), which pytest keeps for the last few runs.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from dbcases import Layout, Queue, apply_ddl, cli_project
from genutil import build_module
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from venvs import make_venv

starlette = pytest.importorskip("starlette")  # the dashboard extra; the dev extra has it
uvicorn = pytest.importorskip("uvicorn")

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.support import expected_conditions  # noqa: E402
from selenium.webdriver.support.select import Select  # noqa: E402
from selenium.webdriver.support.wait import WebDriverWait  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.routing import Mount  # noqa: E402

from inboxgen.ops import dashboard  # noqa: E402

CHROMEDRIVER = Path("/usr/bin/chromedriver")  # Debian's chromium-driver
CHROMIUM = Path("/usr/bin/chromium")
TOKEN = "tok-7f3a9c1e"
USER, PASSWORD = "dash_viewer", "pw-Zq81-secret"  # a role of the test server's, with a password
LAYOUT = Layout(form="lease", group=True, dead="group", error="TEXT")
# What the dead job's last failure left in its error column (where the table has one).
FAILURE = 'ConnectionError: smtp down\n  File "mail.py", line 9, in send\n    smtp.send(m)'



def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


def mix(q: Queue, start: dt.datetime) -> dict[str, int]:
    """Jobs in every state, in group g: two ready, one scheduled, one in work under a lease, one
    finished, one dead (in the dead-letter group, or the dead-letter table). Each payload is
    "payload-<name>", so a page that shows one can be told."""
    conn = q.connect()
    ids = {name: q.add(conn, payload=f"payload-{name}", group="g",
                       retry_after=start + dt.timedelta(seconds=due))
           for name, due in (("ready-1", -120), ("ready-2", -30), ("scheduled", 3600),
                             ("work", -200), ("done", -300), ("dead", -400))}
    for name in ("dead", "done", "work"):  # claim order: the oldest due first
        row = q.claim_one(conn, now=start, until=start + dt.timedelta(seconds=600))
        conn.commit()
        assert q.id_of(row) == ids[name]
        if name == "done":
            assert q.settle("finish", conn, row, now=start - dt.timedelta(seconds=1))
        elif name == "dead":
            assert q.settle("dead_letter", conn, row, error=FAILURE)
        conn.commit()
    return ids


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http(method: str, url: str, *, form: dict[str, str] | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, str]:
    """(status, body) of one request; an HTTP error status is an answer, not an exception."""
    data = None if form is None else urllib.parse.urlencode(form).encode()
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def status_json(root: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    """What `inboxgen status --json` prints for the project's database."""
    result = subprocess.run([sys.executable, "-m", "inboxgen", "status", "--json"], cwd=root,
                            env=env, capture_output=True, text=True, check=False, timeout=120)
    assert result.returncode == 0, result.stderr
    tables: list[dict[str, Any]] = json.loads(result.stdout)
    return tables


def counts(tables: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """(table, group) -> the counts a line of the page shows, from status JSON."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for t in tables:
        for g in t["groups"]:
            name = "" if g["group"] is None else g["group"]
            if g["dead"]:
                out[t["table"], name] = {"dead": str(g["ready"] + g["scheduled"])}
            else:
                out[t["table"], name] = {k: "?" if g[k] is None else str(g[k])
                                         for k in ("ready", "scheduled", "in_work", "finished")}
        if t["dead_table"] is not None:
            out[t["table"], "(dead-letter table)"] = {"dead": str(t["dead_table"])}
    return out


def counts_shown(browser: WebDriver) -> dict[tuple[str, str], dict[str, str]]:
    """(table, group) -> the counts the page shows, in the columns `counts()` names."""
    out: dict[tuple[str, str], dict[str, str]] = {}
    for section in browser.find_elements(By.CSS_SELECTOR, "section.queue"):
        table = section.get_attribute("data-table") or ""
        for row in section.find_elements(By.CSS_SELECTOR, "tr[data-group]"):
            cells = {c.get_attribute("data-col") or "": c.text
                     for c in row.find_elements(By.CSS_SELECTOR, "td[data-col]")}
            dead = "dead" in (row.get_attribute("class") or "")
            keys = ("dead",) if dead else ("ready", "scheduled", "in_work", "finished")
            out[table, row.get_attribute("data-group") or ""] = {k: cells[k] for k in keys}
    return out


def oldest_shown(browser: WebDriver, table: str, group: str) -> float:
    cell = browser.find_element(
        By.CSS_SELECTOR, f'section[data-table="{table}"] tr[data-group="{group}"] '
                         f'td[data-col="oldest_ready"]')
    return float(cell.get_attribute("data-seconds") or "nan")


@pytest.fixture
def artifacts(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """Where a test's screenshots go: $INBOXGEN_ARTIFACTS/<test name>, else tmp_path."""
    base = os.environ.get("INBOXGEN_ARTIFACTS")
    folder = Path(base) / request.node.name if base else tmp_path / "artifacts"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[WebDriver]:
    """A headless Chromium (as root: no sandbox), driven by Debian's chromedriver, named
    explicitly so that selenium never looks for (or downloads) a driver of its own."""
    assert CHROMEDRIVER.is_file() and CHROMIUM.is_file(), \
        "install the Debian packages chromium and chromium-driver (scripts/test.sh does)"
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run", "--window-size=1280,1100",
                f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)),
                              options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@contextlib.contextmanager
def served(root: Path, env: dict[str, str], *args: str) -> Iterator[tuple[str, list[str]]]:
    """`inboxgen dashboard` run in the project's folder until the block ends: (its address,
    a list that receives its stderr and stdout once it has stopped)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "inboxgen", "dashboard", "--bind", f"127.0.0.1:{port}", *args],
        cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    output: list[str] = []
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if http("GET", f"{base}/api/status")[0] == 200:
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"the dashboard did not start: {proc.communicate()[1]}")
            time.sleep(0.1)
        yield base, output
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        output += [err, out]
    assert proc.returncode in (0, -signal.SIGTERM), err
    assert "Traceback" not in err, err


@pytest.fixture
def pg_project(fresh_database: Callable[[str], str],
               tmp_path: Path) -> Iterator[tuple[Path, Queue, str]]:
    """(project folder, its queue, a postgresql:// URL with a user and a password): the
    project's table on a fresh PostgreSQL database, which the role USER may use."""
    dsn = fresh_database("postgres")
    root = tmp_path / "app"
    q = Queue(cli_project(root, "postgres", LAYOUT, dsn), "postgres", dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (USER,)).fetchone()
        if not exists:  # roles belong to the server, which the session's tests share
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                sql.Identifier(USER), sql.Literal(PASSWORD)))
        conn.execute(sql.SQL("GRANT ALL ON ALL TABLES IN SCHEMA public TO {}").format(
            sql.Identifier(USER)))
        conn.execute(sql.SQL("GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {}").format(
            sql.Identifier(USER)))
    info = conninfo_to_dict(dsn)
    url = (f"postgresql://{USER}:{PASSWORD}@{info['host']}:{info['port']}/{info['dbname']}")
    try:
        yield root, q, url
    finally:
        q.close()


def test_the_dashboard_shows_what_status_counts_follows_a_drain_and_guards_its_actions(
        pg_project: tuple[Path, Queue, str], browser: WebDriver, artifacts: Path) -> None:
    """The page in Chromium against PostgreSQL holding jobs in every state: its numbers are
    `inboxgen status --json`'s, before and after jobs are finished; a dead job is looked up and
    requeued through the page's form (token typed in), a queued one cancelled over HTTP; a
    POST without the token (or with a wrong one) is refused with 403; no page, JSON answer or
    line the command prints holds the password. Screenshots: dashboard-*.png in `artifacts`
    ($INBOXGEN_ARTIFACTS/<test name>/, else the test's tmp_path/artifacts/)."""
    root, q, url = pg_project
    ids = mix(q, now())
    env = {**os.environ, "INBOXGEN_DATABASE_URL": url, "INBOXGEN_DASHBOARD_TOKEN": TOKEN}
    seen: list[str] = []  # every body the dashboard answered with

    def shot(name: str) -> None:
        seen.append(browser.page_source)
        browser.save_screenshot(str(artifacts / f"dashboard-{name}.png"))

    with served(root, env, "--allow-actions", "--sample-every", "0.5", "--refresh", "0"
                ) as (base, output):
        # Every state, as status counts it.
        browser.get(base + "/")
        expected = status_json(root, env)
        assert counts_shown(browser) == counts(expected)
        assert counts(expected)["jobs", "g"] == {"ready": "2", "scheduled": "1", "in_work": "1",
                                                 "finished": "1"}
        assert counts(expected)["jobs", "dead"] == {"dead": "1"}
        waited = expected[0]["groups"][1]["oldest_ready_waited_s"]
        assert abs(oldest_shown(browser, "jobs", "g") - waited) < 5
        label = expected[0]["database"]
        assert label.startswith("PostgreSQL at 127.0.0.1:") and f"user {USER}" in label
        assert browser.find_element(By.CSS_SELECTOR, ".database").text == label
        assert browser.find_element(By.CSS_SELECTOR, ".mode").text.startswith("actions on")
        assert browser.find_elements(By.CSS_SELECTOR, 'polyline[data-series="ready"]')
        # The dead letters are listed (the module's dead_letters()), payloads hidden.
        listed = browser.find_elements(By.CSS_SELECTOR, "table.dead-list tbody td:first-child")
        assert [c.text for c in listed] == [str(ids["dead"])]
        # With the first line of its last failure; the whole of it on hover.
        (error,) = browser.find_elements(By.CSS_SELECTOR, "table.dead-list tbody td.error")
        assert error.text == "ConnectionError: smtp down"
        assert error.get_attribute("title") == FAILURE
        assert "payload-dead" not in browser.page_source
        shot("overview")

        # The JSON endpoint: the same structure, the same counts.
        code, body = http("GET", f"{base}/api/status")
        seen.append(body)
        assert code == 200
        answered = json.loads(body)
        assert [sorted(t) for t in answered] == [sorted(t) for t in expected]
        assert counts(answered) == counts(expected)
        assert answered[0]["database"] == label

        # A drain: the ready jobs are claimed and finished by the generated functions.
        conn = q.connect()
        at = now()
        rows = q.claim(conn, now=at, until=at + dt.timedelta(seconds=60), limit=10)
        conn.commit()
        assert sorted(q.id_of(r) for r in rows) == [ids["ready-1"], ids["ready-2"]]
        for row in rows:
            assert q.settle("finish", conn, row, now=at)
        conn.commit()
        time.sleep(1.2)  # the sampler takes a few more samples for the chart
        browser.refresh()
        drained = status_json(root, env)
        assert counts_shown(browser) == counts(drained)
        assert counts(drained)["jobs", "g"] == {"ready": "0", "scheduled": "1", "in_work": "1",
                                                "finished": "3"}
        legend = browser.find_element(By.CSS_SELECTOR, "figcaption.legend").text
        assert "ready 0" in legend and "finished 3" in legend, legend
        samples = browser.find_element(By.CSS_SELECTOR, "figcaption .samples").text
        assert int(samples.split()[0]) >= 3, samples
        shot("drained")

        # The dead job, looked up by its id: its state and attempt; no payload by default.
        browser.find_element(By.CSS_SELECTOR, 'section[data-table="jobs"] input[name="id"]'
                             ).send_keys(str(ids["dead"]))
        browser.find_element(By.CSS_SELECTOR, "form.lookup button").click()
        assert _loaded(browser, ".state").get_attribute("data-state") == "dead"
        assert browser.find_element(By.CSS_SELECTOR, ".attempt").text == "1"
        assert browser.find_element(By.CSS_SELECTOR, "pre.error").text == FAILURE
        assert "payload-dead" not in browser.page_source
        assert browser.find_elements(By.CSS_SELECTOR, ".payload-hidden")
        assert not browser.find_elements(By.CSS_SELECTOR, 'form[action$="/actions/cancel"]')
        shot("dead-job")

        # Without the token, or with a wrong one: 403, and the job stays dead.
        requeue = {"table": "jobs", "id": str(ids["dead"]), "to_group": "g"}
        for extra in ({}, {"token": "wrong"}):
            code, body = http("POST", f"{base}/actions/requeue", form={**requeue, **extra})
            seen.append(body)
            assert code == 403, body
        code, body = http("POST", f"{base}/actions/requeue", form=requeue,
                          headers={"Authorization": "Bearer nope"})
        assert code == 403, body
        assert counts(status_json(root, env))["jobs", "dead"] == {"dead": "1"}

        # With it, typed into the page's form: back in group g (the queue's one group, chosen
        # for the operator), due now.
        into = Select(browser.find_element(By.CSS_SELECTOR, 'select[name="to_group"]'))
        assert into.first_selected_option.get_attribute("value") == "g"
        browser.find_element(By.CSS_SELECTOR, 'form[action$="/actions/requeue"] '
                                              'input[name="token"]').send_keys(TOKEN)
        browser.find_element(By.CSS_SELECTOR, 'button[value="requeue"]').click()
        result = _loaded(browser, ".result").text
        assert result == "jobs: put 1 dead letter(s) back into the queue (group g)", result
        shot("requeued")
        after = counts(status_json(root, env))
        assert ("jobs", "dead") not in after
        assert after["jobs", "g"]["ready"] == "1"
        assert q.mod.state(conn, id=ids["dead"], now=now()).error is None  # a fresh start
        conn.rollback()

        # Cancel the scheduled job: refused without the token, done with it.
        cancel = {"table": "jobs", "id": str(ids["scheduled"])}
        code, body = http("POST", f"{base}/actions/cancel", form=cancel)
        assert code == 403, body
        assert q.mod.state(conn, id=ids["scheduled"], now=now()).state == "scheduled"
        conn.rollback()
        code, body = http("POST", f"{base}/actions/cancel", form={**cancel, "token": TOKEN})
        seen.append(body)
        assert code == 200 and f"cancelled job {ids['scheduled']}" in body, body
        assert q.mod.state(conn, id=ids["scheduled"], now=now()) is None
        conn.rollback()
        browser.get(f"{base}/job?table=jobs&id={ids['scheduled']}")
        assert browser.find_element(By.CSS_SELECTOR, ".state").get_attribute("data-state") == ""
        seen.append(browser.page_source)

        # The job in work under its lease: neither cancel nor requeue is offered.
        browser.get(f"{base}/job?table=jobs&id={ids['work']}")
        assert browser.find_element(By.CSS_SELECTOR, ".state").get_attribute("data-state") \
            == "in_work"
        assert not browser.find_elements(By.CSS_SELECTOR, "form.action")
        seen.append(browser.page_source)

        browser.get(base + "/")
        assert counts_shown(browser) == counts(status_json(root, env))
        legend = browser.find_element(By.CSS_SELECTOR, "figcaption.legend").text
        assert "dead 0" in legend, legend  # the dead-letter group is empty, not gone
        shot("final")

    everything = "\n".join(seen + output)
    assert "inboxgen dashboard: http://127.0.0.1:" in output[0]
    assert PASSWORD not in everything
    assert f"{USER}:{PASSWORD}" not in everything and url not in everything
    assert TOKEN not in everything  # the token is typed in, never written into a page


@pytest.fixture
def sqlite_project(fresh_database: Callable[[str], str],
                   tmp_path: Path) -> Iterator[tuple[Path, Queue, str]]:
    """(project folder, its queue, the database file): dead letters in a table of their own."""
    path = fresh_database("sqlite")
    root = tmp_path / "app"
    layout = Layout(form="lease", group=True, dead="table")
    q = Queue(cli_project(root, "sqlite", layout, path), "sqlite", path)
    try:
        yield root, q, path
    finally:
        q.close()


def test_the_dashboard_shows_pauses_and_pauses_and_resumes_with_the_token(
        fresh_database: Callable[[str], str], tmp_path: Path, browser: WebDriver,
        artifacts: Path) -> None:
    """A table with a pause table ([flow] pauses) on MariaDB, in Chromium: the page says it
    runs; the queue is paused through the page's form (token typed in), then group g alone,
    then the queue resumed: the page, `inboxgen status --json` and the pause table agree at
    each step; without the token nothing changes (403)."""
    url = fresh_database("mysql")
    root = tmp_path / "app"
    q = Queue(cli_project(root, "mysql", Layout(form="lease", group=True, pauses=True), url),
              "mysql", url)
    conn = q.connect()
    for group in ("g", "h"):
        q.add(conn, retry_after=now() - dt.timedelta(seconds=5), **{q.group_attr: group})
    env = {**os.environ, "INBOXGEN_DATABASE_URL": url, "INBOXGEN_DASHBOARD_TOKEN": TOKEN}

    def shown() -> tuple[str, dict[str, bool]]:
        """What the page says of the pauses: its data-paused, and each group's badge."""
        state = browser.find_element(By.CSS_SELECTOR, ".pause-state")
        badges = {row.get_attribute("data-group") or "":
                  bool(row.find_elements(By.CSS_SELECTOR, ".paused"))
                  for row in browser.find_elements(By.CSS_SELECTOR, "tr[data-group]")}
        return state.get_attribute("data-paused") or "", badges

    def submit(group: str, verb: str) -> str:
        browser.get(base + "/")
        form = 'form[action$="/actions/pause"] '
        if group:
            browser.find_element(By.CSS_SELECTOR, form + 'input[name="group"]').send_keys(group)
        browser.find_element(By.CSS_SELECTOR, form + 'input[name="token"]').send_keys(TOKEN)
        browser.find_element(By.CSS_SELECTOR, form + f'button[value="{verb}"]').click()
        result: str = _loaded(browser, ".result").text
        browser.get(base + "/")
        return result

    with served(root, env, "--allow-actions", "--refresh", "0") as (base, _):
        browser.get(base + "/")
        assert browser.find_element(By.CSS_SELECTOR, ".pause-state").text == "running"
        assert shown() == ("", {"g": False, "h": False})
        code, body = http("POST", f"{base}/actions/pause", form={"table": "jobs"})
        assert code == 403, body
        assert q.mod.paused(conn) == []
        conn.rollback()

        assert submit("", "pause") == ("jobs: paused: no worker claims its jobs until it is "
                                       "resumed")
        assert shown() == ("queue", {"g": True, "h": True})
        assert status_json(root, env)[0]["paused"] == [None]
        browser.save_screenshot(str(artifacts / "dashboard-paused.png"))

        assert submit("g", "pause").startswith("jobs group g: paused")
        assert submit("", "resume") == "jobs: resumed"
        assert shown() == ("g", {"g": True, "h": False})
        assert [g["paused"] for g in status_json(root, env)[0]["groups"]] == [True, False]
        assert q.mod.paused(conn) == ["g"]
        conn.rollback()
        assert submit("", "resume") == "jobs: was not paused; nothing changed"

        code, body = http("POST", f"{base}/actions/pause",
                          form={"table": "jobs", "group": "g", "do": "resume", "token": TOKEN})
        assert code == 200 and "jobs group g: resumed" in body, body
        browser.get(base + "/")
        assert shown() == ("", {"g": False, "h": False})
    q.close()


@contextlib.contextmanager
def in_thread(app: Any) -> Iterator[str]:
    """`app` served by uvicorn on a thread of this process until the block ends."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=20)


def test_the_json_endpoint_of_an_app_mounted_in_an_asgi_app_on_sqlite(
        sqlite_project: tuple[Path, Queue, str]) -> None:
    """`dashboard.app()` mounted under /queues of a user's Starlette app, over plain HTTP on
    SQLite: /api/status is `inboxgen status --json`; read-only by default (no action form,
    every POST 403); payloads hidden unless asked for; links stay under the mount."""
    root, q, path = sqlite_project
    ids = mix(q, now())
    env = {**os.environ, "INBOXGEN_DATABASE_URL": path}
    board = dashboard.app(path, [q.mod], sample_every=0.2)
    shows = dashboard.app(path, [q.mod], show_payloads=True)
    outer = Starlette(routes=[Mount("/queues", app=board), Mount("/open", app=shows)])
    try:
        with in_thread(outer) as base:
            code, body = http("GET", f"{base}/queues/api/status")
            assert code == 200, body
            answered = json.loads(body)
            expected = status_json(root, env)
            assert [sorted(t) for t in answered] == [sorted(t) for t in expected]
            assert counts(answered) == counts(expected)
            assert answered[0]["database"] == expected[0]["database"] == f"SQLite file {path}"
            assert counts(answered)["jobs", "g"] == {"ready": "2", "scheduled": "1",
                                                     "in_work": "1", "finished": "1"}
            assert counts(answered)["jobs", "(dead-letter table)"] == {"dead": "1"}

            code, page = http("GET", f"{base}/queues/")
            assert code == 200
            assert 'action="/queues/job"' in page and "read-only" in page
            # The dead letter is listed from the dead-letter table, its payload hidden.
            assert f'id={ids["dead"]}">{ids["dead"]}</a>' in page
            assert "payload-dead" not in page
            time.sleep(0.5)  # the sampler, started by the first request, keeps sampling
            code, page = http("GET", f"{base}/queues/")
            samples = dashboard.dashboard_of(board).history
            assert len(samples) >= 4, len(samples)

            code, job = http("GET", f"{base}/queues/job?table=jobs&id={ids['dead']}")
            assert code == 200 and 'data-state="dead"' in job
            assert "payload-dead" not in job and "<form" not in job.split("</h1>", 1)[1]
            code, job = http("GET", f"{base}/open/job?table=jobs&id={ids['dead']}")
            assert code == 200 and "payload-dead" in job
            code, page = http("GET", f"{base}/open/")  # --show-payloads: the list shows it
            assert code == 200 and "payload-dead" in page

            for action in ("requeue", "cancel"):
                code, body = http("POST", f"{base}/queues/actions/{action}",
                                  form={"table": "jobs", "id": str(ids["ready-1"]),
                                        "token": "anything"})
                assert code == 403 and "read-only" in body
            code, body = http("GET", f"{base}/queues/job?table=jobs&id=not-a-number")
            assert code == 400 and "is not an id of table jobs" in body
            code, body = http("GET", f"{base}/queues/job?table=nope&id=1")
            assert code == 404
            assert counts(status_json(root, env)) == counts(expected)  # nothing changed
    finally:
        for web in (board, shows):
            dashboard.dashboard_of(web).database.close()


def test_a_batch_callbacks_page_says_how_its_batch_stands(fresh_database: Callable[[str], str],
                                                          tmp_path: Path) -> None:
    """On a table with `after`, the job page of a batch's callback says how many of the jobs
    it waits for are finished, dead (naming them) and waiting; a job that waits for none says
    nothing of it."""
    path = fresh_database("sqlite")
    q = Queue(cli_project(tmp_path / "app", "sqlite",
                          Layout(form="lease", group=True, dead="group", after=True), path),
              "sqlite", path)
    board = dashboard.app(path, [q.mod])
    try:
        conn = q.connect()
        parts, callback = q.mod.insert_batch(conn, [q.new() for _ in range(3)], then=q.new())
        conn.commit()
        assert q.mod.cancel(conn, id=parts[1], now=now())  # a dead letter now
        conn.commit()
        with in_thread(board) as base:
            code, page = http("GET", f"{base}/job?table=jobs&id={callback}")
            assert code == 200
            shown = re.sub(r"\s+", " ", page.split('class="after">', 1)[1].split("</dd>")[0])
            assert shown == f"0 finished, 1 dead ({parts[1]}), 2 waiting"
            code, page = http("GET", f"{base}/job?table=jobs&id={parts[0]}")
            assert code == 200 and 'class="after"' not in page
    finally:
        dashboard.dashboard_of(board).database.close()
        q.close()


# Every route of the dashboard: its pages (GET) and its actions (POST).
PAGES = ("/", "/job", "/api/status")
ACTIONS = ("/actions/requeue", "/actions/cancel", "/actions/pause")
READ_ONLY = '<p class="error">actions are off: this dashboard is read-only</p>'


def test_a_read_only_dashboard_answers_403_to_a_post_on_each_page_and_action(
        sqlite_project: tuple[Path, Queue, str]) -> None:
    """Actions off: a POST to any page or action, with or without a token, a form or a query,
    is answered 403 with the one-line page the token check gives, and the database is left as
    it was. (With actions on, a POST to a page is no action: 405.)"""
    _, q, path = sqlite_project
    ids = mix(q, now())
    before = q.snapshot()
    read_only = dashboard.app(path, [q.mod])
    acting = dashboard.app(path, [q.mod], allow_actions=True, token=TOKEN)
    outer = Starlette(routes=[Mount("/ro", app=read_only), Mount("/on", app=acting)])
    forms: list[dict[str, str] | None] = [
        None,
        {"table": "jobs", "id": str(ids["dead"]), "token": TOKEN},
        {"table": "jobs", "id": str(ids["ready-1"]), "token": "anything"},
    ]
    try:
        with in_thread(outer) as base:
            answers = {}
            for route in PAGES + ACTIONS:
                for form in forms:
                    for query in ("", f"?table=jobs&id={ids['ready-1']}"):
                        code, body = http("POST", f"{base}/ro{route}{query}", form=form,
                                          headers={"Authorization": f"Bearer {TOKEN}"})
                        answers[route, query, str(form)] = body
                        assert code == 403, (route, query, form, code, body)
                        assert READ_ONLY in body, body
            # One page for every refusal, the token check's.
            assert len(set(answers.values())) == 1, sorted(set(answers.values()))
            for route in PAGES:
                code, body = http("POST", f"{base}/on{route}")
                assert code == 405, (route, code, body)
            code, body = http("GET", f"{base}/ro/")
            assert code == 200 and "read-only" in body
    finally:
        for web in (read_only, acting):
            dashboard.dashboard_of(web).database.close()
    assert q.snapshot() == before  # nothing changed


def run(root: Path, env: dict[str, str], *args: str,
        python: tuple[str, ...] = ("-m", "inboxgen")) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *python, *args], cwd=root, env=env,
                          capture_output=True, text=True, check=False, timeout=60)


def test_mistakes_are_one_line(sqlite_project: tuple[Path, Queue, str], tmp_path: Path) -> None:
    """Actions without a token, a bad --bind, a missing database, a URL of another database,
    and starlette or uvicorn missing: each one line on stderr, no traceback, no server."""
    root, _, path = sqlite_project
    env = {k: v for k, v in os.environ.items() if not k.startswith("INBOXGEN_")}
    cases = [
        (["--database-url", path, "--allow-actions"], 2, "--allow-actions needs a token"),
        (["--database-url", path, "--bind", "localhost"], 2, "--bind 'localhost': give host:port"),
        (["--database-url", str(tmp_path / "none.db")], 1, "cannot open SQLite file"),
        (["--database-url", f"postgresql://{USER}:{PASSWORD}@127.0.0.1:1/x"], 2,
         "the table is on SQLite"),
        ([], 2, "give --database-url"),
    ]
    for args, code, message in cases:
        result = run(root, env, "dashboard", *args)
        assert result.returncode == code, (args, result.stderr)
        assert len(result.stderr.splitlines()) == 1 and message in result.stderr, result.stderr
        assert PASSWORD not in result.stderr
    hidden = ("-c", "import sys; sys.modules['starlette'] = None; "
                    "from inboxgen.cli import main; raise SystemExit(main(sys.argv[1:]))")
    result = run(root, env, "dashboard", "--database-url", path, python=hidden)
    assert result.returncode == 2
    assert result.stderr.strip() == ("inboxgen: inboxgen dashboard needs starlette and "
                                     "uvicorn: pip install 'inboxgen[dashboard]'")


# Every time a page shows reads like this (UTC, to the second).
SHOWN_TIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC")
EVENTS_SPEC = """\
table = "events"
dialect = "sqlite"
claim = "lease"

[columns]
id = { role = "id", generated = true }
queue = "group"
run_after = "retry_after"
attempt = { role = "attempt", generated = true }
finished_at = "processed_at"
locked_until = "locked_until"
outcome = "result"
progress = "progress"
payload = { role = "payload", codec = "json" }

[runtime]
max_attempts = 3

[dead_letter]
group = "dead"
"""
EVENTS_DDL = """\
CREATE TABLE events (
    id INTEGER PRIMARY KEY,
    queue TEXT NOT NULL,
    run_after TEXT NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 1,
    finished_at TEXT,
    locked_until TEXT,
    outcome TEXT,
    progress TEXT,
    payload TEXT NOT NULL
);
CREATE INDEX events_claim ON events (queue, run_after, id) WHERE finished_at IS NULL;
"""
BLOBS_SPEC = """\
table = "blobs"
dialect = "sqlite"
claim = "lease"

[columns]
id = { role = "id", generated = true }
run_after = "retry_after"
attempt = { role = "attempt", generated = true }
locked_until = "locked_until"
payload = { role = "payload", codec = "bytes" }

[runtime]
max_attempts = 3

[dead_letter]
table = "blobs_dead"
"""
BLOBS_DDL = """\
CREATE TABLE blobs (
    id INTEGER PRIMARY KEY,
    run_after TEXT NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 1,
    locked_until TEXT,
    payload BLOB NOT NULL
);
CREATE INDEX blobs_claim ON blobs (run_after, id);
CREATE TABLE blobs_dead (
    id INTEGER PRIMARY KEY,
    run_after TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    locked_until TEXT,
    payload BLOB NOT NULL
);
"""
# A JSON payload with markup and text beyond ASCII: shown as JSON, escaped, not as a repr.
EVENT = {"to": "ada@example.com", "subject": "<b>Your order</b> ünïcode", "lines": [1, 2.5]}
UTF8 = "line one\nzweite Zeile: grüße".encode()
BINARY = bytes([0, 255, 16, 128]) + b"tail"


def test_the_requeue_form_offers_the_groups_and_pages_read_plainly(
        fresh_database: Callable[[str], str], tmp_path: Path, browser: WebDriver,
        artifacts: Path) -> None:
    """A dead letter of a table whose dead letters go to a group is requeued through its page
    with nothing but the token typed: the form offers the queue's groups, the only one chosen
    (with several, the operator must choose). Every time on the pages reads one way
    (`2026-12-03 08:32:53 UTC`). A JSON payload is shown as indented JSON, escaped; bytes as
    their UTF-8 text, or as hex where they are not UTF-8; none as a Python repr."""
    from inboxgen.ops.connect import connect

    path = fresh_database("sqlite")
    events = build_module(tmp_path / "events", EVENTS_SPEC, EVENTS_DDL, "events")
    blobs = build_module(tmp_path / "blobs", BLOBS_SPEC, BLOBS_DDL, "blobs")
    apply_ddl("sqlite", path, EVENTS_DDL + BLOBS_DDL)
    conn, _ = connect("sqlite", path)
    at = now()

    def event(group: str, due: int) -> int:
        row = events.NewRow(queue=group, run_after=at + dt.timedelta(seconds=due),
                            payload=EVENT)
        return int(events.insert(conn, row))

    def blob(payload: bytes) -> int:
        return int(blobs.insert(conn, blobs.NewRow(run_after=at, payload=payload)))

    ids = {"ready": event("emails", -5), "finished": event("emails", -60),
           "dead": event("dead", -90), "utf8": blob(UTF8), "binary": blob(BINARY)}
    conn.execute("INSERT INTO blobs_dead SELECT * FROM blobs")  # both dead letters
    conn.execute("DELETE FROM blobs")
    conn.execute("UPDATE events SET finished_at = run_after, outcome = ?, progress = ? "
                 "WHERE id = ?", ('{"sent": "<b>ok</b>", "to": 2}',
                                  '{"fraction": 0.4, "note": "resizing 3 of 8"}', ids["finished"]))
    conn.execute("UPDATE events SET attempt = 3 WHERE queue = 'dead'")
    conn.commit()
    web = dashboard.app(path, [events, blobs], allow_actions=True, token=TOKEN,
                        show_payloads=True, refresh=0)
    pretty = json.dumps(EVENT, indent=2, ensure_ascii=False)

    def times_read_plainly() -> None:
        shown = [t.text for t in browser.find_elements(By.TAG_NAME, "time")]
        assert shown and all(SHOWN_TIME.fullmatch(t) for t in shown), shown
        text = browser.find_element(By.TAG_NAME, "body").text
        assert not re.search(r"\d\d:\d\d:\d\d[.+]|\d{4}-\d\d-\d\dT", text), text

    def payload_shown() -> str:
        return str(browser.find_element(By.CSS_SELECTOR, "pre.payload").text)

    try:
        with in_thread(web) as base:
            browser.get(base + "/")
            times_read_plainly()
            listed = browser.find_elements(By.CSS_SELECTOR, "table.dead-list pre.payload")
            # Newest first: the events' dead letter, then the blobs' (binary, then UTF-8 text).
            assert [p.text for p in listed] == [pretty, BINARY.hex(" "), UTF8.decode()]
            assert "{'to'" not in browser.page_source and "b'" not in browser.page_source
            browser.save_screenshot(str(artifacts / "overview.png"))

            browser.get(f"{base}/job?table=events&id={ids['finished']}")
            times_read_plainly()
            assert SHOWN_TIME.fullmatch(browser.find_element(By.CSS_SELECTOR, ".finished").text)
            # What its handler returned (the table's result column), as indented JSON, escaped.
            assert browser.find_element(By.CSS_SELECTOR, "pre.result").text == json.dumps(
                {"sent": "<b>ok</b>", "to": 2}, indent=2)
            assert "&lt;b&gt;ok&lt;/b&gt;" in browser.page_source
            # The last progress its handler reported.
            assert browser.find_element(By.CSS_SELECTOR, "dd.progress").text == \
                "40%: resizing 3 of 8"

            browser.get(f"{base}/job?table=events&id={ids['dead']}")
            times_read_plainly()
            assert payload_shown() == pretty
            assert "&lt;b&gt;Your order&lt;/b&gt;" in browser.page_source
            assert "<b>Your order" not in browser.page_source
            into = Select(browser.find_element(By.CSS_SELECTOR, 'select[name="to_group"]'))
            assert [o.text for o in into.options] == ["emails"]
            assert into.first_selected_option.get_attribute("value") == "emails"
            browser.save_screenshot(str(artifacts / "dead-job.png"))
            browser.find_element(By.CSS_SELECTOR, 'form[action$="/actions/requeue"] '
                                                  'input[name="token"]').send_keys(TOKEN)
            browser.find_element(By.CSS_SELECTOR, 'button[value="requeue"]').click()
            result = _loaded(browser, ".result").text
            assert result == "events: put 1 dead letter(s) back into the queue (group emails)"
            found = events.state(conn, id=ids["dead"], now=now() + dt.timedelta(seconds=1))
            conn.rollback()
            assert found is not None and found.state == "ready"  # due now, in group emails

            # Two groups: neither is chosen for the operator, who must pick one (or type one).
            ids["sms"], ids["dead-2"] = event("sms", -5), event("dead", -5)
            conn.commit()
            page = f"{base}/job?table=events&id={ids['dead-2']}"
            browser.get(page)
            into = Select(browser.find_element(By.CSS_SELECTOR, 'select[name="to_group"]'))
            assert [o.get_attribute("value") for o in into.options] == ["", "emails", "sms"]
            assert into.first_selected_option.get_attribute("value") == ""

            def requeue(choose: str | None) -> str:
                browser.get(page)
                if choose is not None:
                    Select(browser.find_element(By.CSS_SELECTOR, 'select[name="to_group"]')
                           ).select_by_value(choose)
                browser.find_element(By.CSS_SELECTOR, 'form[action$="/actions/requeue"] '
                                                      'input[name="token"]').send_keys(TOKEN)
                browser.find_element(By.CSS_SELECTOR, 'button[value="requeue"]').click()
                return str(_loaded(browser, ".error, .result").text)

            assert requeue(None) == (f"choose the group to put job {ids['dead-2']} back into "
                                     f"(events keeps its dead letters in group dead, which does "
                                     f"not remember their own)")
            assert events.state(conn, id=ids["dead-2"], now=now()).state == "dead"
            conn.rollback()
            assert requeue("sms") == ("events: put 1 dead letter(s) back into the queue "
                                      "(group sms)")

            for name, shown in (("utf8", UTF8.decode()), ("binary", BINARY.hex(" "))):
                browser.get(f"{base}/job?table=blobs&id={ids[name]}")
                times_read_plainly()
                assert payload_shown() == shown, name
                assert "b'" not in browser.page_source
            browser.save_screenshot(str(artifacts / "binary-job.png"))
    finally:
        dashboard.dashboard_of(web).database.close()
        conn.close()


TEMPLATES = Path(dashboard.__file__).parent / "templates"
# Run in a fresh venv with the wheel installed: the installed dashboard's templates, and its
# 404 page for a table it does not have, rendered from them (no database is read for it).
INSTALLED = """\
import asyncio, json, sys
import inboxgen.ops.dashboard as dashboard
from inboxgen.ops.dashboard import pages
sys.path.insert(0, ".")
import shop_emails

web = dashboard.app("unused.db", [shop_emails])
answer = {"body": b""}

async def receive():
    return {"type": "http.request", "body": b"", "more_body": False}

async def send(message):
    if message["type"] == "http.response.start":
        answer["status"] = message["status"]
    elif message["type"] == "http.response.body":
        answer["body"] += message.get("body", b"")

scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
         "scheme": "http", "path": "/job", "raw_path": b"/job",
         "query_string": b"table=nope&id=1", "root_path": "", "headers": [],
         "client": ("127.0.0.1", 1), "server": ("localhost", 80)}
asyncio.run(web(scope, receive, send))
names = pages.ENV.list_templates()
for name in names:
    pages.ENV.get_template(name)
print(json.dumps({"file": dashboard.__file__, "templates": names, "status": answer["status"],
                  "body": answer["body"].decode()}))
"""


@pytest.mark.parametrize("source", ["checkout", "sdist"])
def test_the_wheel_and_the_sdist_ship_the_dashboard_templates(source: str,
                                                              tmp_path: Path) -> None:
    """The dashboard's pages are template files of its package; the sdist carries them, and
    the wheel built from the checkout or from the sdist; installed from that wheel in a fresh
    venv, outside the checkout, the dashboard renders its pages from them."""
    import tarfile
    import zipfile

    repo = Path(__file__).resolve().parents[2]
    shipped = sorted(p.name for p in TEMPLATES.glob("*.html"))
    assert {"layout.html", "overview.html", "job.html", "done.html", "error.html"} <= set(
        shipped), shipped
    built = repo
    if source == "sdist":
        subprocess.run([sys.executable, "-c", "import sys; from hatchling.build import "
                        "build_sdist; build_sdist(sys.argv[1])", str(tmp_path / "sdist")],
                       cwd=repo, check=True, capture_output=True)
        (sdist,) = (tmp_path / "sdist").glob("inboxgen-*.tar.gz")
        with tarfile.open(sdist) as tar:
            inside = sorted(n.rsplit("/", 1)[1] for n in tar.getnames()
                            if "/inboxgen/ops/dashboard/templates/" in n)
            assert inside == shipped
            tar.extractall(tmp_path / "unpacked", filter="data")
        (built,) = (tmp_path / "unpacked").iterdir()
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp_path / "dist"), str(built)], check=True,
                   capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("inboxgen-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        inside = sorted(n.rsplit("/", 1)[1] for n in zf.namelist()
                        if n.startswith("inboxgen/ops/dashboard/templates/"))
    assert inside == shipped
    env_dir = tmp_path / "venv"
    python = make_venv(env_dir, with_pip=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall",
                    str(wheel)], check=True, capture_output=True)
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(repo / "generated_examples" / "shop_emails.py", project)
    ran = subprocess.run([str(python), "-c", INSTALLED], cwd=project, capture_output=True,
                         text=True, check=False, timeout=120)
    assert ran.returncode == 0, ran.stderr
    got = json.loads(ran.stdout)
    assert got["file"].startswith(str(env_dir)), "the wheel, not the checkout, must be imported"
    assert sorted(got["templates"]) == shipped
    assert got["status"] == 404
    assert "<p class=\"error\">no queue table &#39;nope&#39; here</p>" in got["body"], got
    assert '<h1><a href="/">inboxgen</a>' in got["body"]


def _loaded(browser: WebDriver, selector: str) -> Any:
    """The element `selector` of the page a click led to: waited for, as the answer is a new
    page and the old one may still be there when the click returns."""
    return WebDriverWait(browser, 15).until(
        expected_conditions.presence_of_element_located((By.CSS_SELECTOR, selector)))
