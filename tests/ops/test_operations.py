"""`inboxgen status`, `requeue` and `prune` on real PostgreSQL, MariaDB and SQLite: counts after
a scripted mix of jobs in every state, dead letters back to the queue, processed rows deleted
in batches (100,000 of them). Run as a user runs them: the command in the project's folder."""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from dbcases import Layout, Queue, at, cli_project, mysql_connect

DIALECTS = ["postgres", "mysql", "sqlite"]
NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)


@pytest.fixture(autouse=True)
def now() -> None:
    """Each test's "now": the real time as it starts (status reads the real clock)."""
    global NOW
    NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)


def when(seconds: float) -> dt.datetime:
    return NOW + dt.timedelta(seconds=seconds)


Project = tuple[Path, Queue, str]  # project folder, its queue, the database URL


@pytest.fixture
def project(fresh_database: Callable[[str], str], tmp_path: Path) -> Callable[..., Project]:
    made: list[Queue] = []

    def make(dialect: str, layout: Layout) -> Project:
        url = fresh_database(dialect)
        root = tmp_path / "app"
        module = cli_project(root, dialect, layout, url)
        q = Queue(module, dialect, url)
        made.append(q)
        return root, q, url

    yield make
    for q in made:
        q.close()


def run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "inboxgen", *args], cwd=root,
                          capture_output=True, text=True, check=False, timeout=120)


def mix(q: Queue) -> dict[str, int]:
    """Jobs in every state, in group g: two ready, one scheduled, one in work (leased), one
    finished, one dead (in group "dead")."""
    conn = q.connect()
    ids = {name: q.add(conn, payload=name, retry_after=when(due), group="g") for name, due in
           (("ready-1", -120), ("ready-2", -30), ("scheduled", 3600), ("work", -200),
            ("done", -300), ("dead", -400))}
    for name in ("dead", "done", "work"):  # claim order: the oldest due first
        row = q.claim_one(conn, now=NOW, until=when(600))
        conn.commit()
        assert q.id_of(row) == ids[name]
        if name == "done":
            assert q.settle("finish", conn, row, now=when(-1))
        elif name == "dead":
            assert q.settle("dead_letter", conn, row)
        conn.commit()
    return ids


@pytest.mark.parametrize("dialect", DIALECTS)
def test_status_counts_each_state_of_each_group(project: Callable[..., Project],
                                                dialect: str) -> None:
    root, q, url = project(dialect, Layout(form="lease", group=True, dead="group"))
    mix(q)
    result = run(root, "status", "--database-url", url, "--json")
    assert result.returncode == 0, result.stderr
    (table,) = json.loads(result.stdout)
    groups = {g["group"]: g for g in table["groups"]}
    g = groups["g"]
    assert (g["ready"], g["scheduled"], g["in_work"], g["finished"]) == (2, 1, 1, 1)
    assert 115 <= g["oldest_ready_waited_s"] < 300  # ready-1, due two minutes ago
    assert groups["dead"]["dead"] and groups["dead"]["ready"] == 1
    assert not g["dead"]
    assert table["database"].startswith(("PostgreSQL at", "MySQL/MariaDB at", "SQLite file"))
    text = run(root, "status", "--database-url", url)
    assert text.returncode == 0, text.stderr
    header, *rows = text.stdout.splitlines()
    assert header.split()[:3] == ["table", "group", "ready"]
    assert any(r.split()[:6] == ["jobs", "g", "2", "1", "1", "1"] for r in rows), text.stdout


@pytest.mark.parametrize("dead", ["group", "table"])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_status_says_why_the_newest_dead_letter_died(project: Callable[..., Project],
                                                     dialect: str, dead: str) -> None:
    """A table with an error column: status names the newest dead letter and the first line
    of its last failure; requeue clears it, and status then names none."""
    root, q, url = project(dialect, Layout(form="lease", group=dead == "group", dead=dead,
                                           error="TEXT"))
    conn = q.connect()
    for n in range(2):  # both first: SQLite would give an id the queue no longer has again
        q.add(conn, payload=f"p{n}", retry_after=when(-60 + n), group="g")
    for n in range(2):
        row = q.claim_one(conn, now=NOW, until=when(600))
        conn.commit()
        assert q.settle("dead_letter", conn, row,
                        error=f"ConnectionError: smtp down ({n})\n  File \"mail.py\", line 9")
        conn.commit()
    newest = q.id_of(row)
    conn.close()
    result = run(root, "status", "--database-url", url, "--json")
    assert result.returncode == 0, result.stderr
    (table,) = json.loads(result.stdout)
    assert table["newest_dead"] == {"id": str(newest), "error": "ConnectionError: smtp down (1)"}
    text = run(root, "status", "--database-url", url)
    assert f"jobs: newest dead letter {newest}: ConnectionError: smtp down (1)\n" in text.stdout
    into = ["--to-group", "g"] if dead == "group" else []
    back = run(root, "requeue", "--database-url", url, "specs/jobs.toml", *into)
    assert back.returncode == 0, back.stderr
    (table,) = json.loads(run(root, "status", "--database-url", url, "--json").stdout)
    assert table["newest_dead"] is None
    assert all(r["last_error"] is None for r in q.rows()), q.rows()


@pytest.mark.parametrize("dialect", DIALECTS)
def test_status_says_what_the_limits_allow_and_how_many_are_in_work(
        project: Callable[..., Project], dialect: str) -> None:
    """A table with [flow] limits: status names them, with the jobs in work now (two leased
    rows of three), in its JSON and under the table."""
    root, q, url = project(dialect, Layout(form="lease", processed=False, concurrency=5,
                                           key_concurrency=2, rate=(100, 1.5)))
    conn = q.connect()
    due = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=60)
    ids = [q.add(conn, payload=f"p{n}", retry_after=due) for n in range(3)]
    leased = (dt.datetime.now(dt.UTC) + dt.timedelta(minutes=10)).strftime("%Y-%m-%d %H:%M:%S.%f")
    sql = (f"UPDATE jobs SET locked_until = '{leased}{'+00' if dialect == 'postgres' else ''}' "
           f"WHERE id IN ({ids[0]}, {ids[1]})")
    (conn.cursor() if dialect == "mysql" else conn).execute(sql)
    conn.commit()
    conn.close()
    result = run(root, "status", "--database-url", url, "--json")
    assert result.returncode == 0, result.stderr
    (table,) = json.loads(result.stdout)
    assert table["limits"] == {"concurrency": 5, "key": "account", "key_concurrency": 2,
                               "rate": 100, "rate_seconds": 1.5, "rate_per_key": False,
                               "fair": False, "weights_table": None, "in_work": 2}
    text = run(root, "status", "--database-url", url)
    assert ("jobs: limits: at most 5 in work at once (2 now), at most 2 per account, at most "
            "100 claims in any 1.5 s") in text.stdout, text.stdout


@pytest.mark.parametrize(("form", "dialect"), [("row_lock", "postgres"), ("row_lock", "mysql"),
                                             ("advisory", "sqlite")])
def test_status_says_what_a_seated_tables_limits_allow(
        project: Callable[..., Project], form: str, dialect: str) -> None:
    """A row-lock or advisory table's limits are seats: status names them, and where the
    database cannot tell how many jobs are in work, gives no count rather than a wrong one."""
    root, q, url = project(dialect, Layout(form=form, processed=False, concurrency=5,
                                           key="job-{id}",
                                           key_concurrency=2 if form == "advisory" else None))
    result = run(root, "status", "--database-url", url, "--json")
    assert result.returncode == 0, result.stderr
    (table,) = json.loads(result.stdout)
    assert table["limits"] == {"concurrency": 5, "key": "account" if form == "advisory" else None,
                               "key_concurrency": 2 if form == "advisory" else None,
                               "rate": None, "rate_seconds": None, "rate_per_key": False,
                               "fair": False, "weights_table": None, "in_work": None}
    text = run(root, "status", "--database-url", url)
    words = "jobs: limits: at most 5 in work at once" + (
        ", at most 2 per account" if form == "advisory" else "")
    assert words + "\n" in text.stdout, text.stdout


@pytest.mark.parametrize("dialect", DIALECTS)
def test_status_says_a_fair_table_takes_turns_across_its_key(
        project: Callable[..., Project], dialect: str) -> None:
    root, _, url = project(dialect, Layout(form="lease", processed=False, fair=True))
    result = run(root, "status", "--database-url", url, "--json")
    assert result.returncode == 0, result.stderr
    (table,) = json.loads(result.stdout)
    assert table["limits"]["fair"] is True and table["limits"]["key"] == "account"
    text = run(root, "status", "--database-url", url)
    assert "jobs: limits: claims take turns across account" in text.stdout, text.stdout
    assert "weighted" not in text.stdout


def test_status_names_a_fair_tables_weights(project: Callable[..., Project]) -> None:
    root, _, url = project("sqlite", Layout(form="lease", processed=False, fair=True,
                                            weights=True))
    result = run(root, "status", "--database-url", url, "--json")
    assert result.returncode == 0, result.stderr
    (table,) = json.loads(result.stdout)
    assert table["limits"]["weights_table"] == "jobs_weights"
    text = run(root, "status", "--database-url", url)
    assert ("jobs: limits: claims take turns across account, weighted by jobs_weights"
            in text.stdout), text.stdout


def test_status_shows_dead_rows_hot_updates_and_autovacuum_on_postgres(
        project: Callable[..., Project]) -> None:
    root, q, url = project("postgres", Layout(form="lease", group=True, dead="group"))
    ids = mix(q)  # claims (HOT: the lease is in no index), a finish and a dead letter (not HOT)
    conn = q.connect()
    conn.execute(f"DELETE FROM jobs WHERE id = {ids['ready-2']}")
    conn.commit()
    for c in q.connections:  # each session's counts, for status to read
        c.execute("SELECT pg_stat_force_next_flush()")
        c.commit()
    result = run(root, "status", "--database-url", url, "--json")
    assert result.returncode == 0, result.stderr
    (table,) = json.loads(result.stdout)
    assert table["dead_tuples"] > 0  # the deleted row and the old versions of updated ones
    assert table["live_tuples"] >= 0
    assert 0 < table["hot_update_share"] < 1
    assert table["last_autovacuum"] is None  # far below the table's vacuum threshold
    text = run(root, "status", "--database-url", url)
    assert text.returncode == 0, text.stderr
    notes = [line for line in text.stdout.splitlines() if "dead row version" in line]
    assert len(notes) == 1 and notes[0].startswith("jobs: "), text.stdout
    assert "% of updates HOT, never autovacuumed" in notes[0], notes


@pytest.mark.parametrize("dialect", ["mysql", "sqlite"])
def test_status_elsewhere_shows_no_table_health(project: Callable[..., Project],
                                                dialect: str) -> None:
    root, q, url = project(dialect, Layout(form="lease", group=True, dead="group"))
    mix(q)
    result = run(root, "status", "--database-url", url, "--json")
    assert result.returncode == 0, result.stderr
    (table,) = json.loads(result.stdout)
    assert (table["dead_tuples"], table["hot_update_share"], table["last_autovacuum"]) == (
        None, None, None)
    text = run(root, "status", "--database-url", url)
    assert text.returncode == 0, text.stderr
    assert "dead row version" not in text.stdout


@pytest.mark.parametrize("dialect", DIALECTS)
def test_requeue_puts_dead_letters_back_and_dry_run_changes_nothing(
        project: Callable[..., Project], dialect: str) -> None:
    root, q, url = project(dialect, Layout(form="lease", group=True, dead="group"))
    ids = mix(q)
    before = q.rows()
    dry = run(root, "requeue", "specs/jobs.toml", "--database-url", url, "--to-group", "g",
              "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would put 1 dead letter(s) back" in dry.stdout
    assert q.rows() == before
    missing = run(root, "requeue", "specs/jobs.toml", "--database-url", url)
    assert missing.returncode == 2 and "--to-group" in missing.stderr
    done = run(root, "requeue", "specs/jobs.toml", "--database-url", url, "--to-group", "g",
               "--reset-attempts")
    assert done.returncode == 0, done.stderr
    assert "put 1 dead letter(s) back into the queue (group g), attempts reset" in done.stdout
    row = q.row(ids["dead"])
    assert row is not None
    assert (row[q.roles["group"]], row[q.roles["attempt"]]) == ("g", 1)  # the DDL's DEFAULT 1
    assert row[q.roles["locked_until"]] is None
    conn = q.connect()
    claimed = [q.id_of(r) for r in q.claim(conn, now=dt.datetime.now(dt.UTC) +
                                           dt.timedelta(seconds=5), limit=10)]
    assert ids["dead"] in claimed  # due again


@pytest.mark.parametrize("dialect", DIALECTS)
def test_requeue_by_id_from_a_dead_letter_table(project: Callable[..., Project],
                                                dialect: str) -> None:
    root, q, url = project(dialect, Layout(form="lease", group=True, dead="table"))
    conn = q.connect()
    ids = [q.add(conn, payload=f"p{i}", retry_after=at(-60 + i), group="g") for i in range(3)]
    for _ in ids:
        row = q.claim_one(conn, now=at(0), until=at(600))
        conn.commit()
        assert q.settle("dead_letter", conn, row)
        conn.commit()
    assert q.rows() == [] and len(q.rows("jobs_dead")) == 3
    dead_attempt = next(r[q.roles["attempt"]] for r in q.rows("jobs_dead")
                        if r[q.roles["id"]] == ids[1])
    done = run(root, "requeue", "specs/jobs.toml", "--database-url", url, "--id", str(ids[1]))
    assert done.returncode == 0, done.stderr
    assert "put 1 dead letter(s) back" in done.stdout
    assert q.ids() == [ids[1]]
    assert sorted(r[q.roles["id"]] for r in q.rows("jobs_dead")) == [ids[0], ids[2]]
    kept = q.row(ids[1])
    assert kept is not None and kept[q.roles["attempt"]] == dead_attempt  # kept as it was
    assert kept[q.roles["group"]] == "g"  # its own group, which the dead-letter table keeps


def fill_processed(q: Queue, n: int, processed: dt.datetime) -> None:
    """n rows processed at `processed`, written by the database itself in one statement."""
    t = q.table_sql()
    stamp = processed.strftime("%Y-%m-%d %H:%M:%S")
    if q.dialect == "postgres":
        sql = (f"INSERT INTO {t} (priority, retry_after, processed_at, account, payload) "
               f"SELECT 0, now(), '{stamp}+00', 'a', 'p' FROM generate_series(1, {n})")
    elif q.dialect == "mysql":
        sql = (f"INSERT INTO {t} (priority, retry_after, processed_at, account, payload) "
               f"WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < {n}) "
               f"SELECT 0, UTC_TIMESTAMP(), '{stamp}', 'a', 'p' FROM s")
    else:
        sql = (f"WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < {n}) "
               f"INSERT INTO {t} (priority, retry_after, processed_at, account, payload) "
               f"SELECT 0, '{stamp}.000000', '{stamp}.000000', 'a', 'p' FROM s")
    if q.dialect == "mysql":
        conn = mysql_connect(q.target, autocommit=True)
        with conn.cursor() as cur:
            cur.execute("SET SESSION max_recursive_iterations = 1000000")
            cur.execute(sql)
        conn.close()
        return
    conn = q.connect()
    conn.execute(sql)
    conn.commit()


@pytest.mark.parametrize("dialect", DIALECTS)
def test_prune_deletes_old_processed_rows_in_batches(project: Callable[..., Project],
                                                     dialect: str) -> None:
    root, q, url = project(dialect, Layout(form="lease"))
    fill_processed(q, 100_000, dt.datetime.now(dt.UTC) - dt.timedelta(days=40))
    conn = q.connect()
    recent = q.add(conn, payload="recent", retry_after=when(-60))
    row = q.claim_one(conn, now=dt.datetime.now(dt.UTC), until=when(600))
    conn.commit()
    assert q.settle("finish", conn, row, now=dt.datetime.now(dt.UTC))  # processed just now
    conn.commit()
    open_job = q.add(conn, payload="open", retry_after=when(-60))
    started = dt.datetime.now(dt.UTC)
    dry = run(root, "prune", "specs/jobs.toml", "--database-url", url, "--older-than", "30d",
              "--dry-run")
    assert dry.returncode == 0, dry.stderr
    # The count, and the cutoff it counted from (30 days before the command ran), in UTC.
    said = re.fullmatch(r"jobs: would delete 100000 row\(s\) processed before (\S+ \S+) UTC "
                        r"\(more than 30d ago\); nothing was deleted\n", dry.stdout)
    assert said is not None, dry.stdout
    cutoff = dt.datetime.fromisoformat(said[1]).replace(tzinfo=dt.UTC)
    assert abs((started - dt.timedelta(days=30) - cutoff).total_seconds()) < 60
    assert len(q.ids()) == 100_002
    done = run(root, "prune", "specs/jobs.toml", "--database-url", url, "--older-than", "30d",
               "--batch", "7000")
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(r"jobs: deleted 100000 row\(s\) processed before \S+ \S+ UTC "
                        r"\(more than 30d ago\)\n", done.stdout), done.stdout
    assert sorted(q.ids()) == sorted([recent, open_job])


@pytest.mark.parametrize("age", ["1", "30", "1.5", "30 days", "1w", "d"])
def test_prune_refuses_an_age_without_its_unit(project: Callable[..., Project],
                                               age: str) -> None:
    """A bare number is no age: prune deletes rows, so it never guesses the unit."""
    root, q, url = project("sqlite", Layout(form="lease"))
    fill_processed(q, 3, dt.datetime.now(dt.UTC) - dt.timedelta(days=2))
    for extra in ([], ["--dry-run"]):
        result = run(root, "prune", "specs/jobs.toml", "--database-url", url, "--older-than",
                     age, *extra)
        assert result.returncode == 2, (age, result.stdout, result.stderr)
        assert result.stderr == (
            f"inboxgen: --older-than {age!r}: give the age with its unit: 30d (days), 12h "
            f"(hours), 45m (minutes) or 90s (seconds)\n"), result.stderr
        assert result.stdout == ""
    assert len(q.ids()) == 3


def test_a_password_never_shows_and_a_refusal_is_one_line(project: Callable[..., Project],
                                                          pg_server: Any) -> None:
    root, q, url = project("postgres", Layout(form="lease"))
    bad = f"postgresql://nobody:hunter2-secret@127.0.0.1:{pg_server.port}/no_such_db"
    result = run(root, "status", "--database-url", bad)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "hunter2" not in result.stderr + result.stdout
    assert f"127.0.0.1:{pg_server.port}" in result.stderr and "no_such_db" in result.stderr


def test_a_url_of_another_database_is_refused_in_one_line(
        project: Callable[..., Project]) -> None:
    root, _, _ = project("sqlite", Layout(form="lease"))
    for url in ("postgresql://app@db/app", "mysql://app:s3cret@db/app",
                "mysql+asyncmy://app:s3cret@db/app", "mariadb://app@db/app",
                "redis://app:s3cret@cache/0"):
        result = run(root, "status", "--database-url", url)
        assert result.returncode != 0, url
        assert "the table is on SQLite" in result.stderr, (url, result.stderr)
        assert "(table jobs)" in result.stderr, result.stderr
        assert result.stderr.count("\n") == 1 and "s3cret" not in result.stderr


UUID_DDL = """
CREATE TABLE jobs (
    id UUID PRIMARY KEY DEFAULT gen_random_uuid(),
    attempt INTEGER NOT NULL DEFAULT 1,
    locked_until TIMESTAMPTZ,
    payload TEXT NOT NULL
);
CREATE TABLE jobs_dead (LIKE jobs INCLUDING ALL);
"""
UUID_SPEC = """table = "jobs"
dialect = "postgres"
ddl = "jobs.sql"

[columns]
id = { role = "id", generated = true }
attempt = { role = "attempt", generated = true }
locked_until = "locked_until"
payload = "payload"

[runtime]
max_attempts = 3

[dead_letter]
table = "jobs_dead"
"""


def test_requeue_by_id_takes_the_tables_id_type(pg_dsn: str, tmp_path: Path) -> None:
    """A table whose ids are UUIDs (or text) is requeued by its own ids; an id of another type
    is one line naming the table and what its ids are."""
    import psycopg

    root = tmp_path / "app"
    (root / "specs").mkdir(parents=True)
    (root / "specs" / "jobs.sql").write_text(UUID_DDL, encoding="utf-8")
    (root / "specs" / "jobs.toml").write_text(UUID_SPEC, encoding="utf-8")
    (root / "pyproject.toml").write_text('[tool.inboxgen]\nout = "generated"\n',
                                         encoding="utf-8")
    built = run(root, "build")
    assert built.returncode == 0, built.stderr
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(UUID_DDL)
        ids = [conn.execute("INSERT INTO jobs_dead (payload) VALUES (%s) RETURNING id",
                            (f"p{i}",)).fetchone()[0] for i in range(2)]
    done = run(root, "requeue", "specs/jobs.toml", "--database-url", pg_dsn, "--id", str(ids[1]))
    assert done.returncode == 0, done.stderr
    assert "put 1 dead letter(s) back" in done.stdout
    with psycopg.connect(pg_dsn) as conn:
        assert [r[0] for r in conn.execute("SELECT id FROM jobs")] == [ids[1]]
    bad = run(root, "requeue", "specs/jobs.toml", "--database-url", pg_dsn, "--id", "17")
    assert bad.returncode == 2
    assert bad.stderr.strip() == ("inboxgen: --id '17' is not an id of table jobs (its ids are "
                                  "UUIDs)")


@pytest.mark.parametrize("dialect", DIALECTS)
def test_cancel_deletes_queued_jobs_and_names_those_it_left(
        project: Callable[..., Project], dialect: str) -> None:
    root, q, url = project(dialect, Layout(form="lease", group=True, dead="group"))
    ids = mix(q)
    result = run(root, "cancel", "specs/jobs.toml", "--database-url", url,
                 "--id", str(ids["ready-1"]), "--id", str(ids["scheduled"]),
                 "--id", str(ids["work"]), "--id", str(ids["done"]), "--id", "999999")
    # The leased and the finished job stay, and one not there is none; the command says which
    # is which, and fails.
    assert result.returncode == 1, result.stderr
    assert result.stdout.strip() == (
        f"jobs: cancelled 2 job(s); not cancelled: {ids['work']} (held by a worker), "
        f"{ids['done']} (finished), 999999 (not there)")
    left = {r["id"] for r in q.rows()}
    assert left == {ids["ready-2"], ids["work"], ids["done"], ids["dead"]}
    again = run(root, "cancel", "specs/jobs.toml", "--database-url", url,
                "--id", str(ids["ready-2"]))
    assert again.returncode == 0 and again.stdout.strip() == "jobs: cancelled 1 job(s)"
    wrong = run(root, "cancel", "specs/jobs.toml", "--database-url", url, "--id", "x")
    assert wrong.returncode == 2 and "is not an id of table jobs" in wrong.stderr


def test_a_malformed_postgres_address_is_one_line_naming_the_option(
        project: Callable[..., Project]) -> None:
    """The command's own option is named, not an argument of the Python API, and the address
    (which may hold a password) is not quoted."""
    root, _, _ = project("postgres", Layout(form="lease"))
    result = run(root, "status", "--database-url", "host=db password=s3cret dbname")
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        "inboxgen: --database-url: the database address is neither a PostgreSQL connection "
        "string (host=... dbname=...) nor a URL (postgresql://user@host/db) (table jobs)\n")


def test_cancel_names_a_job_held_under_a_row_lock_and_a_dead_letter(
        project: Callable[..., Project]) -> None:
    """A row lock's job in work looks ready from outside its transaction (state() cannot see
    the lock), and a job in the dead-letter table is no queued job: each is named as what it
    is."""
    root, q, url = project("postgres", Layout(form="row_lock", dead="table"))
    conn = q.connect()
    held, dead, free = (q.add(conn, payload=p, retry_after=when(-60 + i))
                        for i, p in enumerate(("held", "dead", "free")))
    conn.commit()
    row = q.claim_one(conn, now=dt.datetime.now(dt.UTC))  # held: its transaction stays open
    assert q.id_of(row) == held
    other = q.connect()
    row = q.claim_one(other, now=dt.datetime.now(dt.UTC))
    assert q.id_of(row) == dead and q.settle("dead_letter", other, row)
    other.commit()
    result = run(root, "cancel", "specs/jobs.toml", "--database-url", url,
                 "--id", str(held), "--id", str(dead), "--id", str(free))
    assert result.returncode == 1, result.stderr
    assert result.stdout == (f"jobs: cancelled 1 job(s); not cancelled: {held} (held by a "
                             f"worker), {dead} (a dead letter)\n")
    conn.rollback()


def test_status_says_a_table_has_no_rows_and_that_groups_without_rows_are_not_listed(
        project: Callable[..., Project]) -> None:
    """Groups are not declared anywhere: status finds them in the rows. A group whose last row
    was pruned has no line, and status says so rather than leaving the reader to wonder."""
    root, q, url = project("sqlite", Layout(form="lease", group=True))
    note = ("jobs: groups are found in the rows: a group with no row left (all finished and "
            "deleted, or pruned) is not listed")
    conn = q.connect()
    q.add(conn, payload="sent", retry_after=when(-60), **{q.group_attr: "emails"})
    row = q.claim_one(conn, now=dt.datetime.now(dt.UTC), group="emails")
    conn.commit()
    assert q.settle("finish", conn, row, now=dt.datetime.now(dt.UTC) - dt.timedelta(hours=2))
    conn.commit()
    before = run(root, "status", "--database-url", url)
    assert before.returncode == 0, before.stderr
    header, *lines = before.stdout.splitlines()
    assert [r.split() for r in lines] == [["jobs", "emails", "0", "0", "0", "1"], note.split()]
    pruned = run(root, "prune", "specs/jobs.toml", "--database-url", url, "--older-than", "1h")
    assert pruned.returncode == 0 and "deleted 1 row(s)" in pruned.stdout, pruned.stderr
    after = run(root, "status", "--database-url", url)
    assert after.returncode == 0, after.stderr
    header, *lines = after.stdout.splitlines()
    assert [r.split() for r in lines] == [["jobs", "(no", "rows)"], note.split()], after.stdout
    (table,) = json.loads(run(root, "status", "--database-url", url, "--json").stdout)
    assert table["groups"] == [] and table["grouped"] is True
