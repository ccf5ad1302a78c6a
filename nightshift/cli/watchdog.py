"""``nightshift watchdog``: one watchdog pass over the ledger, here and now, no Prefect needed."""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

from nightshift.cli import exits
from nightshift.cli.args import add_command, catalogue_flag
from nightshift.cli.exits import say

if TYPE_CHECKING:  # the parser imports this module: keep it light
    from nightshift.config.catalogue import Catalogue
    from nightshift.config.settings import Settings
    from nightshift.store.alert_log import AlertRecord
    from nightshift.watchdog.checks import Rules

__all__ = ["WATCHDOG_EXIT_CODES", "register", "run_watchdog"]

WATCHDOG_EXIT_CODES = exits.epilog(
    0,
    4,
    6,
    64,
    c0="the pass ran (whether or not it raised new alerts)",
    c64="bad command line (usage), e.g. a bad --stale-after",
)


def register(sub: Any) -> None:
    """Add ``watchdog`` to the subcommands."""
    watchdog = add_command(
        sub,
        "watchdog",
        "one watchdog pass: overstaying jobs, stopped nights, stale labels, failure streaks",
        _command,
        WATCHDOG_EXIT_CODES,
    )
    shown = "only this catalogue's jobs, and check its labels for staleness (default: all)"
    catalogue_flag(watchdog, shown, default=None)
    watchdog.add_argument(
        "--stale-after",
        default=None,
        metavar="DURATION",
        help="a label without a success or a run this long is stale (default: the interval "
        "of the catalogue's schedule in prefect.yaml plus a grace; daily: 30h)",
    )
    watchdog.add_argument(
        "--streak",
        type=int,
        default=3,
        metavar="N",
        help="alert after N nights not ok in a row (default 3)",
    )
    watchdog.add_argument("--json", action="store_true", help="print one object")


def _command(args: argparse.Namespace) -> int:
    from nightshift.config.durations import parse_duration
    from nightshift.config.loader import load_catalogue
    from nightshift.config.settings import load_settings
    from nightshift.watchdog.checks import Rules

    try:
        stale = args.stale_after
        stale_after_s = parse_duration(stale) if stale is not None else None
        rules = Rules(stale_after_s=stale_after_s, streak_nights=args.streak)
    except ValueError as exc:
        say(f"nightshift watchdog: --stale-after/--streak: {exc}")
        return exits.USAGE

    def one_pass() -> int:
        path = args.catalogue
        catalogue = load_catalogue(path) if path is not None else None
        return run_watchdog(load_settings(), catalogue, rules, as_json=args.json)

    return exits.guarded(one_pass)


class _PrintSink:
    """Each new alert as one line on stdout, as it is raised."""

    def send(self, alert: AlertRecord) -> None:
        print(f"{alert.level} {alert.kind}: {alert.detail}", flush=True)


class _Quiet:
    """--json prints one object at the end instead."""

    def send(self, alert: AlertRecord) -> None:
        pass


def run_watchdog(
    settings: Settings,
    catalogue: Catalogue | None,
    rules: Rules,
    *,
    as_json: bool = False,
    now: datetime | None = None,
) -> int:
    """One pass, as the deployed flow makes it (outbox, Slack, metrics); print its new alerts
    and a headline (or one JSON object); return 0.

    The ledger's errors propagate for the caller to name.
    """
    from nightshift.watchdog.full_pass import watchdog_pass

    sink = _Quiet() if as_json else _PrintSink()
    labels = [job.label for job in catalogue.jobs] if catalogue is not None else None
    report = watchdog_pass(settings, catalogue, labels, rules, sink, now=now).report
    if as_json:
        print(json.dumps(report.as_dict()))
        return 0
    repeated = len(report.found) - len(report.raised)
    tail = f" ({repeated} raised before)" if repeated else ""
    print(report.headline() + tail)
    if catalogue is None:
        print("stale labels not checked: give --catalogue to check its labels")
    return 0
