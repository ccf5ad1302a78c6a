"""``status`` and ``cancel``: one night of one catalogue, from the ledger; their shared checks."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

from nightshift.cli import exits
from nightshift.cli.exits import say

if TYPE_CHECKING:
    from nightshift.config.catalogue import Catalogue
    from nightshift.config.settings import Settings

__all__ = ["run_for_night"]

NightCommand = Callable[["Settings", "Catalogue", str, "list[str] | None"], int]


def run_for_night(args: argparse.Namespace, command: NightCommand) -> int:
    """Read --catalogue, --night and --only (exit 4 when bad, in one line), then run ``command``
    on the ledger (exit 4 for a night with no rows, 6 when the database cannot be read)."""
    from nightshift.cli.status import NoSuchNight
    from nightshift.config.loader import load_catalogue
    from nightshift.config.settings import load_settings
    from nightshift.engine.plan import plan_night, which_night
    from nightshift.errors import CatalogueError

    try:
        catalogue = load_catalogue(args.catalogue)
        night = which_night(args.night)
        only = getattr(args, "only", None)
        if only:
            plan_night(catalogue, only)  # an unknown label is bad input
    except CatalogueError as exc:  # one line, however many problems it names
        say(" ".join(line.strip() for line in str(exc).splitlines()))
        return exits.BAD_CATALOGUE
    except ValueError as exc:  # a bad --night, an unknown --only label
        say(f"{args.catalogue}: {exc}")
        return exits.BAD_CATALOGUE
    settings = load_settings()
    url = settings.ledger_url()
    try:
        return command(settings, catalogue, night, only)
    except NoSuchNight as exc:
        say(f"{args.catalogue}: {exc}")
        return exits.BAD_CATALOGUE
    except exits.DATABASE_ERRORS as exc:
        say(exits.ledger_problem(url, exc))
        return exits.NO_LEDGER
