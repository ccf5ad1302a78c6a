"""``nightshift``: run a night locally, validate a catalogue, or run the sandboxed demo."""

from __future__ import annotations

import argparse
import os
import sys

from nightshift.cli import (
    backfill,
    budgets,
    cancel,
    demo,
    init,
    notify,
    plan,
    prune,
    report,
    run,
    status,
    validate,
    watchdog,
)
from nightshift.cli.args import Parser
from nightshift.cli.exits import USAGE
from nightshift.cli.run import RUN_EXIT_CODES

__all__ = ["build_parser", "main"]


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``nightshift`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return USAGE
    if not args.verbose:
        # the live table and the summary are the display; Prefect's own lines (and the
        # flow's per-job warnings, which the summary repeats) stay in the run's logs
        # (only the console's level: the run's logs in the Prefect UI keep everything);
        # our own one-line errors say what went wrong, so no engine traceback without -v
        os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "CRITICAL")
        os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    # the temporary server takes ~15 s on a new database, more on a busy 2-core machine
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    code: int = args.handler(args)
    return code


def build_parser() -> argparse.ArgumentParser:
    """The ``nightshift`` parser: one module per subcommand adds its own."""
    parser = Parser(
        prog="nightshift",
        description=__doc__,
        epilog=RUN_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="show Prefect's logs")
    sub = parser.add_subparsers(dest="command")
    # the order of `nightshift --help`
    for command in (
        init,
        run,
        backfill,
        validate,
        demo,
        status,
        cancel,
        report,
        budgets,
        plan,
        prune,
        watchdog,
        notify,
    ):
        command.register(sub)
    return parser


if __name__ == "__main__":
    sys.exit(main())
