"""The ``nightshift`` command: run a night locally, validate a catalogue, or run the demo."""

from __future__ import annotations

import argparse
import logging
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
from nightshift.cli.args import HelpFormatter, Parser
from nightshift.cli.exits import INTERRUPTED, INTERRUPTED_LINE, USAGE, say
from nightshift.cli.run import RUN_EXIT_CODES

__all__ = ["build_parser", "main"]

DESCRIPTION = """\
Nightshift runs a team's nightly batch of external async jobs on Prefect: run a
night locally, validate a catalogue, forecast it, read its report, or run the
sandboxed demo. `nightshift COMMAND --help` says more of one command."""


class _Version(argparse.Action):
    """``--version``: the package metadata is read only when asked (not on every command)."""

    def __call__(self, parser: argparse.ArgumentParser, *_args: object) -> None:
        print(f"nightshift {_version()}")
        parser.exit()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nightshift")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


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
        _say_at_once("nightshift.ledger")
        _say_at_once("nightshift.tracing", logging.WARNING)
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    # the temporary server takes ~15 s on a new database, more on a busy 2-core machine
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    try:
        code: int = args.handler(args)
    except KeyboardInterrupt:  # Ctrl-C outside a night's own handling (which stops the night):
        say(INTERRUPTED_LINE)  # its start (the server starting, Prefect imported), another command
        return INTERRUPTED
    return code


def _say_at_once(name: str, level: int = logging.ERROR) -> None:
    """Lines of logger ``name`` from ``level`` up on the terminal as they happen, one line each
    (a ledger that cannot write names its disk at once, not only in the run's logs and its
    summary; a collector that is down is said once, at the night's end)."""
    logger = logging.getLogger(name)
    if any(isinstance(h, _Terminal) for h in logger.handlers):
        return  # set up by an earlier command in this process: each line is said once
    handler = _Terminal()
    handler.setLevel(level)
    handler.setFormatter(logging.Formatter("nightshift: %(message)s"))
    logger.addHandler(handler)


class _Terminal(logging.StreamHandler):  # type: ignore[type-arg]
    """The terminal's stderr as it is when a line is said (not when the handler was made)."""

    @property  # type: ignore[override]
    def stream(self) -> object:
        return sys.stderr

    @stream.setter
    def stream(self, _value: object) -> None:
        pass


def build_parser() -> argparse.ArgumentParser:
    """The ``nightshift`` parser: one module per subcommand adds its own."""
    parser = Parser(
        prog="nightshift",
        description=DESCRIPTION,
        epilog=RUN_EXIT_CODES,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="show Prefect's logs")
    parser.add_argument(
        "--version", action=_Version, nargs=0, help="print the installed version and exit"
    )
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
