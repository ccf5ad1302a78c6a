"""What every subcommand's parser shares: the usage exit code, -v, --catalogue."""

from __future__ import annotations

import argparse
import sys
from typing import Any, NoReturn

from nightshift.cli.exits import USAGE

__all__ = ["Parser", "add_command", "catalogue_flag"]


class Parser(argparse.ArgumentParser):
    """argparse with its own exit code for usage errors (argparse's 2 means "partial" here)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(USAGE, f"{self.prog}: error: {message}\n")


def add_command(
    sub: Any, name: str, help: str, handler: Any, epilog: str | None = None
) -> argparse.ArgumentParser:
    """A subcommand whose ``args.handler(args)`` runs it, with -v and its exit codes in --help."""
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help=help, epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.set_defaults(handler=handler)
    parser.add_argument("-v", "--verbose", action="store_true", help="show Prefect's logs")
    return parser


def catalogue_flag(
    parser: argparse.ArgumentParser,
    help: str = "the catalogue file",
    default: str | None = "nightshift.yaml",
) -> None:
    """``--catalogue FILE``; the old spelling ``--catalog`` still works and is not shown."""
    parser.add_argument("--catalogue", default=default, metavar="FILE", help=help)
    # scripts and crontabs still say --catalog; --help shows only one spelling
    parser.add_argument(
        "--catalog", dest="catalogue", default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )
