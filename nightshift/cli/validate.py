"""``nightshift validate``: check a catalogue and its batch inputs without running anything."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from nightshift.cli import exits
from nightshift.cli.args import add_command, catalogue_flag
from nightshift.cli.exits import say

__all__ = ["register", "validate"]


def register(sub: Any) -> None:
    """Add ``validate`` to the subcommands."""
    check = add_command(
        sub,
        "validate",
        "validate a catalogue and its batch inputs (exit 4 when invalid)",
        _command,
    )
    catalogue_flag(check)


def _command(args: argparse.Namespace) -> int:
    return validate(args.catalogue)


def validate(path: str) -> int:
    """Print ``FILE: ok, N jobs`` (and any warnings) and return 0, or the problems and 4."""
    from nightshift.backends.gemini.batch_input import catalogue_input_problems
    from nightshift.config.loader import load_catalogue
    from nightshift.config.timers import schedule_warnings
    from nightshift.errors import CatalogueError

    try:
        catalogue = load_catalogue(path)
    except CatalogueError as exc:
        print(exc, file=sys.stderr)
        return exits.BAD_CATALOGUE
    errors, notes = catalogue_input_problems(catalogue)
    for line in [*schedule_warnings(catalogue), *notes]:
        say(line)
    if errors:
        say("invalid batch input:\n  " + "\n  ".join(errors))
        return exits.BAD_CATALOGUE
    print(f"{path}: ok, {len(catalogue.jobs)} jobs")
    return exits.OK
