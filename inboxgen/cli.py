"""The `inboxgen` command: build and verify.

Exit codes: 0 clean; 1 a failed check or a difference; 2 a usage or configuration error.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from inboxgen.build import Generated, compare, generate, spec_files, write
from inboxgen.config import Project, find_project
from inboxgen.errors import ConfigError, GeneratorBug

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"inboxgen: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="inboxgen", description="Job queues in your own SQL tables.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    build = sub.add_parser("build", help="check specs against their DDL and write the modules")
    build.add_argument("specs", nargs="*", help="spec files or folders (default: "
                                                "[tool.inboxgen] specs)")
    verify = sub.add_parser("verify", help="fail when generated modules are stale or the DDL "
                                           "drifted")
    verify.add_argument("specs", nargs="*", help="spec files or folders (default: "
                                                 "[tool.inboxgen] specs)")
    worker = sub.add_parser("worker", help="run a worker defined in your code")
    worker.add_argument("target", help="module:attribute naming a Worker, or a function "
                                       "returning one (e.g. myapp.queues:mailer)")
    worker.add_argument("--log-level", default="INFO",
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return parser


def _load_worker(target: str) -> Any:
    import importlib

    from inboxgen.worker import Worker

    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"worker target must look like package.module:name, not {target!r}")
    sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ConfigError(f"cannot import {module_name}: {err}") from None
    try:
        obj = getattr(module, attr)
    except AttributeError:
        raise ConfigError(f"{module_name} has no attribute {attr!r}") from None
    if not isinstance(obj, Worker) and callable(obj):
        obj = obj()
    if not isinstance(obj, Worker):
        raise ConfigError(f"{target} is not an inboxgen Worker (nor a function returning one)")
    return obj


def _run_worker(target: str, level: str) -> int:
    from inboxgen.errors import WorkerError

    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        worker = _load_worker(target)
        worker.run()
    except WorkerError as err:
        print(f"inboxgen: {type(err).__name__}: {err}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _report(generated: Generated) -> None:
    for d in generated.diagnostics:
        print(d.format(), file=sys.stderr)


def _build(project: Project, targets: Sequence[str]) -> int:
    generated = generate(project, spec_files(project, targets))
    _report(generated)
    if not generated.ok:
        print("inboxgen: build failed; nothing was written", file=sys.stderr)
        return EXIT_FAILED
    for path, changed in write(generated):
        print(f"{'wrote' if changed else 'up to date'} {project.display(path)}")
    return EXIT_OK


def _verify(project: Project, targets: Sequence[str]) -> int:
    generated = generate(project, spec_files(project, targets))
    _report(generated)
    status = EXIT_OK if generated.ok else EXIT_FAILED
    for diff in compare(project, generated, full_run=not targets):
        shown = project.display(diff.path)
        status = EXIT_FAILED
        if diff.kind == "changed":
            print(f"{shown}: stale: differs from what its spec generates "
                  f"(run inboxgen build)", file=sys.stderr)
            sys.stdout.write(diff.diff)
        elif diff.kind == "missing":
            print(f"{shown}: missing: its spec generates it but it is not on disk "
                  f"(run inboxgen build)", file=sys.stderr)
        else:
            print(f"{shown}: extra: carries the inboxgen header but no spec generates it "
                  f"(delete it, or restore its spec)", file=sys.stderr)
    if status == EXIT_OK:
        print(f"verified {len(generated.outputs)} module(s): up to date")
    return status


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    # inboxgen reports statements sqlglot cannot parse itself, with file and line.
    logging.getLogger("sqlglot").setLevel(logging.ERROR)
    try:
        if args.command == "worker":  # needs no project settings
            return _run_worker(args.target, args.log_level)
        project = find_project(Path.cwd())
        if args.command == "build":
            return _build(project, args.specs)
        return _verify(project, args.specs)
    except ConfigError as err:
        print(f"inboxgen: {err}", file=sys.stderr)
        return EXIT_USAGE
    except GeneratorBug as err:
        print(f"inboxgen: internal error, please report it: {err}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    raise SystemExit(main())
