"""The `inboxgen` command: build and verify.

Exit codes: 0 clean; 1 a failed check or a difference; 2 a usage or configuration error.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

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
    return parser


def _report(generated: Generated) -> None:
    for d in generated.diagnostics:
        print(d.format(), file=sys.stderr)


def _build(project: Project, targets: Sequence[str]) -> int:
    generated = generate(project, spec_files(project, targets))
    _report(generated)
    if not generated.ok:
        print("inboxgen: build failed; nothing was written", file=sys.stderr)
        return EXIT_FAILED
    for path in write(generated):
        print(f"wrote {project.display(path)}")
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
