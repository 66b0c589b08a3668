"""The `inboxgen` command: build and verify; status, requeue, cancel, prune, pause and resume on
a live database, and a web dashboard of it; run a worker or a service.

Exit codes: 0 clean; 1 a failed check or a difference; 2 a usage or configuration error.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from inboxgen.errors import BuildCrashed, ConfigError, GeneratorBug, WorkerError, WriteFailed
from inboxgen.generate.build import (
    Generated,
    compare,
    generate,
    shown_path,
    spec_files,
    write,
)
from inboxgen.generate.config import Project, find_project

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"inboxgen: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="inboxgen", description="Job queues in your own SQL tables.")
    parser.add_argument("--version", action="version", version=f"inboxgen {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    build = sub.add_parser("build", help="check specs against their DDL and write the modules")
    build.add_argument("specs", nargs="*", help="spec files or folders (default: "
                                                "[tool.inboxgen] specs)")
    verify = sub.add_parser("verify", help="fail when generated modules are stale or the DDL "
                                           "drifted")
    verify.add_argument("specs", nargs="*", help="spec files or folders (default: "
                                                 "[tool.inboxgen] specs)")
    verify.add_argument("--database-url", default=None,
                        help="also check the modules against this live database: every "
                             "statement prepares, each claim has an index serving its order, "
                             "the tables match the migrations")
    status = sub.add_parser("status", help="count each queue's jobs by state on a live "
                                           "database")
    _database_url(status)
    status.add_argument("specs", nargs="*", help="spec files or folders (default: "
                                                 "[tool.inboxgen] specs)")
    status.add_argument("--json", action="store_true", help="print JSON for scripts")
    dashboard = sub.add_parser("dashboard", help="serve a web page of each queue's counts, "
                                                 "read-only unless told otherwise")
    _database_url(dashboard)
    dashboard.add_argument("specs", nargs="*", help="spec files or folders (default: "
                                                    "[tool.inboxgen] specs)")
    dashboard.add_argument("--bind", default="127.0.0.1:8080",
                           help="host:port to listen on (default 127.0.0.1:8080: this machine "
                                "only)")
    dashboard.add_argument("--allow-actions", action="store_true",
                           help="show requeue and cancel buttons; each use needs the token")
    dashboard.add_argument("--token", default=os.environ.get("INBOXGEN_DASHBOARD_TOKEN"),
                           help="the token actions must carry (default: "
                                "$INBOXGEN_DASHBOARD_TOKEN, which keeps it out of the process "
                                "list)")
    dashboard.add_argument("--show-payloads", action="store_true",
                           help="show a job's payload when it is looked up (default: hidden)")
    dashboard.add_argument("--sample-every", type=float, default=5.0,
                           help="seconds between the chart's samples (default 5)")
    dashboard.add_argument("--refresh", type=float, default=10.0,
                           help="seconds between the page's reloads; 0: never (default 10)")
    requeue = sub.add_parser("requeue", help="put dead letters back into the queue")
    _database_url(requeue)
    requeue.add_argument("spec", help="the spec of the queue table")
    requeue.add_argument("--id", action="append", dest="ids",
                         help="only this row (repeat for more); default: every dead letter")
    requeue.add_argument("--to-group", help="the group to put them back into (tables whose "
                                            "dead letters go to a group)")
    requeue.add_argument("--reset-attempts", action="store_true",
                         help="start their attempt count again (default: keep it)")
    requeue.add_argument("--dry-run", action="store_true", help="say what would change, "
                                                                "change nothing")
    cancel = sub.add_parser("cancel", help="delete queued jobs that no worker holds")
    _database_url(cancel)
    cancel.add_argument("spec", help="the spec of the queue table")
    cancel.add_argument("--id", action="append", dest="ids", required=True,
                        help="the job's row id (repeat for more)")
    for verb, says in (("pause", "stop every worker's claims of a queue or one group (jobs in "
                                 "work finish)"),
                       ("resume", "lift a pause: workers claim again")):
        paused = sub.add_parser(verb, help=says)
        _database_url(paused)
        paused.add_argument("spec", help="the spec of the queue table (its [flow] pauses)")
        paused.add_argument("--group", help="only this group (default: the whole queue; "
                                            "resuming it leaves groups paused on their own)")
    prune = sub.add_parser("prune", help="delete processed rows older than an age, in batches")
    _database_url(prune)
    prune.add_argument("spec", help="the spec of the queue table")
    prune.add_argument("--older-than", required=True, metavar="AGE",
                       help="delete rows processed longer ago than this, given with its unit: "
                            "30d (days), 12h (hours), 45m (minutes) or 90s (seconds); a bare "
                            "number is refused")
    prune.add_argument("--batch", type=int, default=1000, help="rows per transaction "
                                                               "(default 1000)")
    prune.add_argument("--dry-run", action="store_true",
                       help="say how many rows would go and the cutoff time; delete nothing")
    prune.add_argument("--partitions", action="store_true",
                       help="PostgreSQL, a partitioned table: drop whole each partition whose "
                            "rows were all processed before the cutoff (detached without "
                            "blocking claims), instead of deleting rows")
    asyncapi = sub.add_parser("asyncapi", help="print an AsyncAPI 3.0 document of the queues")
    asyncapi.add_argument("specs", nargs="*", help="spec files or folders (default: "
                                                   "[tool.inboxgen] specs)")
    asyncapi.add_argument("--database-url", default=None,
                          help="describe this server too (host and port only; nothing is "
                               "connected to)")
    worker = sub.add_parser("worker", help="run a worker defined in your code")
    worker.add_argument("target", help="module:attribute naming a Worker, or a function "
                                       "returning one (e.g. myapp.queues:mailer)")
    worker.add_argument("--log-level", default="INFO",
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    serve = sub.add_parser("serve", help="run a service (several queues) defined in your code")
    serve.add_argument("target", help="module:attribute naming a Service, or a function "
                                      "returning one (e.g. myapp.queues:service)")
    serve.add_argument("--log-level", default="INFO",
                       choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return parser


def _database_url(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--database-url", default=os.environ.get("INBOXGEN_DATABASE_URL"),
                        help="postgresql://..., mysql://... or a SQLite file (default: "
                             "$INBOXGEN_DATABASE_URL, which keeps a password out of the "
                             "shell's history)")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("inboxgen")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "(not installed)"


def _run_worker(target: str, level: str, *, service: bool = False) -> int:
    from inboxgen.errors import WorkerError
    from inboxgen.ops.user_code import load_service, load_worker

    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        runs = (load_service if service else load_worker)(target, Path.cwd())
        runs.run()
    except WorkerError as err:
        print(f"inboxgen: {type(err).__name__}: {err}", file=sys.stderr)
        return EXIT_FAILED
    from inboxgen.runtime.signals import exit_past_abandoned_threads

    exit_past_abandoned_threads(runs.name, runs.abandoned_threads, EXIT_OK)
    return EXIT_OK


def _one_line(text: str) -> str:
    """`text` as one printable line: line breaks, other control characters and undecodable
    bytes (in names taken from specs, migrations and file names) are written as escapes."""
    if text.isprintable():
        return text
    return "".join(repr(ch)[1:-1] if unicodedata.category(ch) in ("Cc", "Cs", "Zl", "Zp")
                   and ch != "\t" else ch for ch in text)


def _say(text: str) -> None:
    print(_one_line(text), file=sys.stderr)


def _report(generated: Generated) -> None:
    for d in generated.diagnostics:
        _say(d.format())


def _build(project: Project, targets: Sequence[str]) -> int:
    generated = generate(project, spec_files(project, targets))
    _report(generated)
    if not generated.ok:
        _say("inboxgen: build failed; nothing was written")
        return EXIT_FAILED
    try:
        done = write(generated)
    except WriteFailed as err:
        _say(f"{shown_path(project, err.path)}: cannot write: {err.reason}")
        _say("inboxgen: build failed while writing the modules")
        return EXIT_FAILED
    for path, changed in done:
        print(_one_line(f"{'wrote' if changed else 'up to date'} {shown_path(project, path)}"))
    return EXIT_OK


def _verify(project: Project, targets: Sequence[str], url: str | None = None) -> int:
    generated = generate(project, spec_files(project, targets))
    _report(generated)
    status = EXIT_OK if generated.ok else EXIT_FAILED
    for diff in compare(project, generated, full_run=not targets):
        shown = shown_path(project, diff.path)
        status = EXIT_FAILED
        if diff.kind == "changed":
            _say(f"{shown}: stale: differs from what its spec generates (run inboxgen build)")
            sys.stdout.write(diff.diff)
        elif diff.kind == "missing":
            _say(f"{shown}: missing: its spec generates it but it is not on disk "
                 f"(run inboxgen build)")
        elif diff.kind == "unreadable":
            _say(f"{shown}: cannot be read: {diff.diff}")
        else:
            _say(f"{shown}: extra: carries the inboxgen header but no spec generates it "
                 f"(delete it, or restore its spec)")
    if status == EXIT_OK:
        print(f"verified {len(generated.outputs)} module(s): up to date")
    if url and status == EXIT_OK:
        status = _verify_live(project, generated, url)
    return status


def _verify_live(project: Project, generated: Generated, url: str) -> int:
    from inboxgen.ops import live
    from inboxgen.ops.modules import load_one

    failed = False
    labels = set()
    with _connections(url) as connected:
        for path in sorted(generated.outputs):
            module = load_one(project, path, generated.queues[path])
            conn, label = connected(module)
            labels.add(label)
            for finding in live.check(module, generated.queues[path], conn, label):
                _say(f"{shown_path(project, path)}: {finding}")
                failed = True
    if failed:
        return EXIT_FAILED
    print(f"verified {len(generated.outputs)} module(s) against {', '.join(sorted(labels))}")
    return EXIT_OK


def _connected(module: Any, url: str | None) -> tuple[Any, str]:
    from inboxgen.ops.connect import connect

    if not url:
        raise ConfigError("give --database-url (or set INBOXGEN_DATABASE_URL)")
    d = module.DESCRIPTOR
    try:
        return connect(d.dialect, url)
    except ConfigError as err:  # a URL of another database: say which table it was given for
        raise ConfigError(f"{err} (table {d.qualified_name})") from None


@contextlib.contextmanager
def _connections(url: str | None) -> Iterator[Callable[[Any], tuple[Any, str]]]:
    """One connection to `url` for all the modules of a dialect (each module's reads end in a
    rollback, so the next finds the connection clean), closed at the end."""
    opened: dict[str, tuple[Any, str]] = {}

    def connected(module: Any) -> tuple[Any, str]:
        dialect = module.DESCRIPTOR.dialect
        if dialect not in opened:
            opened[dialect] = _connected(module, url)
        return opened[dialect]

    try:
        yield connected
    finally:
        for conn, _ in opened.values():
            conn.close()


def _status(project: Project, args: argparse.Namespace) -> int:
    import datetime as dt
    import json

    from inboxgen.ops import status
    from inboxgen.ops.modules import load

    tables = []
    now = dt.datetime.now(dt.UTC)
    with _connections(args.database_url) as connected:
        for module in load(project, args.specs):
            tables.append(status.read(module, *connected(module), now))
    if args.json:
        print(json.dumps(status.as_json(tables), indent=2))
    else:
        sys.stdout.write(status.as_text(tables, now))
    return EXIT_OK


def _one_module(project: Project, spec: str) -> Any:
    from inboxgen.ops.modules import load

    (module,) = load(project, [spec])
    return module


def _requeue(project: Project, args: argparse.Namespace) -> int:
    import datetime as dt

    from inboxgen.ops.maintenance import requeue

    module = _one_module(project, args.spec)
    conn, label = _connected(module, args.database_url)
    try:
        moved = requeue(module, conn, now=dt.datetime.now(dt.UTC), ids=args.ids,
                        to_group=args.to_group, reset_attempt=args.reset_attempts,
                        dry_run=args.dry_run)
    finally:
        conn.close()
    table = module.DESCRIPTOR.qualified_name
    verb = "would put" if args.dry_run else "put"
    print(f"{table}: {verb} {moved} dead letter(s) back into the queue"
          + (f" (group {args.to_group})" if args.to_group else "")
          + (", attempts reset" if args.reset_attempts else ""))
    return EXIT_OK


def _cancel(project: Project, args: argparse.Namespace) -> int:
    import datetime as dt

    from inboxgen.ops.maintenance import cancel

    module = _one_module(project, args.spec)
    conn, label = _connected(module, args.database_url)
    try:
        done, left = cancel(module, conn, now=dt.datetime.now(dt.UTC), ids=args.ids)
    finally:
        conn.close()
    table = module.DESCRIPTOR.qualified_name
    print(_one_line(f"{table}: cancelled {len(done)} job(s)" + (
        f"; not cancelled: {', '.join(f'{i} ({why})' for i, why in left)}" if left else "")))
    return EXIT_OK if not left else EXIT_FAILED


def _pause(project: Project, args: argparse.Namespace) -> int:
    from inboxgen.ops import maintenance

    module = _one_module(project, args.spec)
    conn, label = _connected(module, args.database_url)
    try:
        if args.command == "pause":
            maintenance.pause(module, conn, group=args.group)
            lifted = True
        else:
            lifted = maintenance.resume(module, conn, group=args.group)
    finally:
        conn.close()
    what = module.DESCRIPTOR.qualified_name + (f" group {args.group}" if args.group else "")
    if args.command == "pause":
        print(_one_line(f"{what}: paused on {label}: no worker claims its jobs until "
                        f"inboxgen resume"))
    elif lifted:
        print(_one_line(f"{what}: resumed on {label}"))
    else:
        print(_one_line(f"{what}: was not paused on {label}; nothing changed"))
    return EXIT_OK


def _prune(project: Project, args: argparse.Namespace) -> int:
    import datetime as dt

    from inboxgen.ops.maintenance import parse_age, prune

    if args.batch < 1:
        raise ConfigError("--batch must be at least 1")
    age = parse_age(args.older_than)
    module = _one_module(project, args.spec)
    conn, label = _connected(module, args.database_url)
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)  # the cutoff, printed, is exact
    if args.partitions:
        return _prune_partitions(module, conn, before=now - age, dry_run=args.dry_run)
    try:
        n = prune(module, conn, now=now, older_than=age, batch=args.batch, dry_run=args.dry_run)
    finally:
        conn.close()
    said = (f"{n} row(s) processed before {now - age:%Y-%m-%d %H:%M:%S} UTC (more than "
            f"{args.older_than.strip()} ago)")
    if args.dry_run:
        print(f"{module.DESCRIPTOR.qualified_name}: would delete {said}; nothing was deleted")
    else:
        print(f"{module.DESCRIPTOR.qualified_name}: deleted {said}")
    return EXIT_OK


def _prune_partitions(module: Any, conn: Any, *, before: Any, dry_run: bool) -> int:
    from inboxgen.ops.partitions import prune_partitions

    name = module.DESCRIPTOR.qualified_name
    if module.DESCRIPTOR.dialect != "postgres":
        conn.close()
        raise ConfigError(f"table {name}: prune --partitions is for partitioned PostgreSQL "
                          f"tables; prune --older-than deletes rows")
    try:
        outcomes = prune_partitions(module, conn, before=before, dry_run=dry_run)
    finally:
        conn.close()
    for o in outcomes:
        print(_one_line(f"{name}: partition {o.partition.shown} ({o.partition.bounds}): "
                        f"{o.done}"))
    if dry_run:
        print(f"{name}: nothing was dropped (--dry-run)")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    # inboxgen reports statements sqlglot cannot parse itself, with file and line.
    logging.getLogger("sqlglot").setLevel(logging.ERROR)
    try:
        if args.command in ("worker", "serve"):  # need no project settings
            return _run_worker(args.target, args.log_level, service=args.command == "serve")
        project = find_project(Path.cwd())
        if args.command == "build":
            return _build(project, args.specs)
        if args.command in _OPERATIONS:
            return _OPERATIONS[args.command](project, args)
        return _verify(project, args.specs, args.database_url)
    except ConfigError as err:
        _say(f"inboxgen: {err}")
        return EXIT_USAGE
    except WorkerError as err:  # a database that cannot be reached, named without a password
        _say(f"inboxgen: {err}")
        return EXIT_FAILED
    except (GeneratorBug, BuildCrashed) as err:
        _say(f"inboxgen: internal error, please report it: {err}")
        return EXIT_FAILED
    except Exception as err:
        if args.command in ("worker", "serve"):  # the service's own code: its traceback
            raise
        if args.command in _OPERATIONS and _from_driver(err):
            # The database refused a statement (a table its migrations have not made yet, a
            # permission): its own message says what, and it is no bug of inboxgen's.
            _say(f"inboxgen {args.command}: the database refused it: {type(err).__name__}: "
                 + next(iter(str(err).splitlines()), ""))
            return EXIT_FAILED
        # build and verify: the last resort, one line and never a traceback
        first = next(iter(str(err).splitlines()), "")
        _say(f"inboxgen: internal error, please report it: {type(err).__name__}"
             + (f": {first}" if first else ""))
        return EXIT_FAILED


def _from_driver(err: BaseException) -> bool:
    """Whether `err` is a database driver's error (sqlite3, psycopg, PyMySQL)."""
    return any(c.__module__.partition(".")[0] in ("sqlite3", "psycopg", "pymysql")
               for c in type(err).__mro__)


def _asyncapi(project: Project, args: argparse.Namespace) -> int:
    import json
    import tomllib

    from inboxgen.ops.asyncapi import document
    from inboxgen.ops.modules import load

    meta: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        meta = tomllib.loads((project.root / "pyproject.toml").read_text(encoding="utf-8")
                             ).get("project", {})
    doc = document(load(project, args.specs), title=str(meta.get("name") or project.root.name),
                   version=str(meta.get("version") or "0.0.0"), database_url=args.database_url)
    print(json.dumps(doc, indent=2))
    return EXIT_OK


def _dashboard(project: Project, args: argparse.Namespace) -> int:
    import importlib.util

    if not all(importlib.util.find_spec(name) for name in ("starlette", "uvicorn")):
        raise ConfigError("inboxgen dashboard needs starlette and uvicorn: pip install "
                          "'inboxgen[dashboard]'")
    import socket

    import uvicorn

    from inboxgen.ops import dashboard
    from inboxgen.ops.modules import load

    host, port = _bind_address(args.bind)
    if not args.database_url:
        raise ConfigError("give --database-url (or set INBOXGEN_DATABASE_URL)")
    web = dashboard.app(args.database_url, load(project, args.specs),
                        allow_actions=args.allow_actions, token=args.token,
                        show_payloads=args.show_payloads, sample_every=args.sample_every,
                        refresh=args.refresh)
    board = dashboard.dashboard_of(web)
    try:
        tables = board.check()  # a wrong or unreachable database fails here, before serving
    except dashboard.ReadFailed as err:
        _say(f"inboxgen: cannot read the queues: {err}")
        return EXIT_FAILED
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise ConfigError(f"--bind {args.bind}: cannot listen there: {err.strerror or err}"
                          ) from None
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    labels = ", ".join(sorted({t.database for t in tables}))
    mode = "actions on, token required" if args.allow_actions else "read-only"
    print(_one_line(f"inboxgen dashboard: http://{shown}:{sock.getsockname()[1]}/ ({mode}; "
                    f"{len(tables)} table(s) on {labels})"), file=sys.stderr, flush=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: "
                                                   "%(message)s")
    server = uvicorn.Server(uvicorn.Config(web, log_level="warning", access_log=False))
    server.run(sockets=[sock])  # until SIGINT or SIGTERM
    return EXIT_OK


def _bind_address(text: str) -> tuple[str, int]:
    """`host:port` (`[::1]:8080` for IPv6) as (host, port)."""
    host, sep, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"--bind {text!r}: give host:port, e.g. 127.0.0.1:8080")
    return host, int(port)


_OPERATIONS = {"status": _status, "requeue": _requeue, "cancel": _cancel, "prune": _prune,
               "pause": _pause, "resume": _pause,
               "asyncapi": _asyncapi, "dashboard": _dashboard}

if __name__ == "__main__":
    raise SystemExit(main())
