"""What every subcommand's parser shares: the usage exit code, -v, --catalogue."""

from __future__ import annotations

import argparse
import sys
from typing import Any, NoReturn

from nightshift.cli.exits import USAGE

__all__ = ["HelpFormatter", "Parser", "add_command", "catalogue_flag"]


class Parser(argparse.ArgumentParser):
    """argparse with its own exit code for usage errors (argparse's 2 means "partial" here)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(USAGE, f"{self.prog}: error: {message}\n")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs as written; each option's default said in its help (a default of
    None, False or [] is no value to say, and a help that names its default already is kept)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        quiet = default in (None, False, [], argparse.SUPPRESS) or "default" in text.lower()
        if quiet or not action.option_strings or text == argparse.SUPPRESS:
            return text
        return f"{text} (default: %(default)s)"


def add_command(
    sub: Any, name: str, help: str, handler: Any, epilog: str | None = None
) -> argparse.ArgumentParser:
    """A subcommand whose ``args.handler(args)`` runs it, with -v and its exit codes in --help;
    its one-line help is its description too (``nightshift run --help`` says what it does)."""
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        help=help,
        description=help[:1].upper() + help[1:] + ".",
        epilog=epilog,
        formatter_class=HelpFormatter,
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
