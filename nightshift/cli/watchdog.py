"""``nightshift watchdog``: one watchdog pass over the ledger, here and now, no Prefect needed."""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the parser imports this module: keep it light
    from nightshift.config.catalogue import Catalogue
    from nightshift.config.settings import Settings
    from nightshift.store.alert_log import AlertRecord
    from nightshift.watchdog.checks import Rules

__all__ = ["WATCHDOG_EXIT_CODES", "run_watchdog"]

WATCHDOG_EXIT_CODES = """\
exit codes:
  0   the pass ran (whether or not it raised new alerts)
  4   invalid --catalogue
  6   the ledger database could not be opened (NIGHTSHIFT_DATABASE_URL)
  64  bad command line (usage), e.g. a bad --stale-after
"""


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
