"""The watchdog flow: from the ledger alone, what no night is watching. Flows wire."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import State, flow, get_run_logger
from prefect.states import Failed

from nightshift.config.durations import parse_duration
from nightshift.config.loader import load_catalogue
from nightshift.config.settings import load_settings
from nightshift.errors import CatalogueError
from nightshift.watchdog.checks import Rules
from nightshift.watchdog.full_pass import watchdog_pass
from nightshift.watchdog.run import FindingSink, LogFindingSink

__all__ = ["watchdog"]


@flow(name="watchdog")
def watchdog(
    catalog: str | None = None,
    stale_after: str | None = None,
    streak_nights: int = 3,
    sink: Any = None,
    catalogue: str | None = None,
) -> dict[str, Any] | list[State]:
    """One pass: jobs past 2 x p95, nights that stopped watching, stale labels, failure streaks.

    ``catalogue`` (or ``catalog``, its earlier name): a catalogue file (its jobs only, and its
    stale labels); None: every catalogue
    in the ledger, without the stale check (which needs the file's labels). ``sink``: a
    ``FindingSink`` handed in by code (Slack, a test), not a deployment parameter; None logs.
    """
    logger = get_run_logger()
    path = catalogue or catalog
    loaded = None
    if path is not None:
        try:  # a deployed run reads it from the folder it was deployed from: say which file
            loaded = load_catalogue(Path(path).absolute())
        except CatalogueError as exc:
            logger.error("%s", exc.one_line())  # one line, no traceback
            return [Failed(message="invalid catalogue: no pass made")]
    labels = [job.label for job in loaded.jobs] if loaded is not None else None
    # no stale_after: the catalogue's schedule interval plus a grace (daily: 30 h)
    stale_after_s = parse_duration(stale_after) if stale_after is not None else None
    rules = Rules(stale_after_s=stale_after_s, streak_nights=streak_nights)
    done = watchdog_pass(load_settings(), loaded, labels, rules, _sink(sink, logger), logger=logger)
    for error in done.report.sink_errors:
        logger.warning("announcing an alert failed (it is kept in the ledger): %s", error)
    logger.info("%s", done.report.headline())
    return done.report.as_dict()


def _sink(sink: Any, logger: Any) -> FindingSink:
    """Typed as Any in the signature: Prefect builds a parameter schema from it."""
    return sink if sink is not None else LogFindingSink(logger)
