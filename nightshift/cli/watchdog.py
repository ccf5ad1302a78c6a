"""``nightshift watchdog``: one watchdog pass over the ledger, here and now, no Prefect needed."""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the parser imports this module: keep it light
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
    url: str,
    catalogue: str | None,
    labels: list[str] | None,
    rules: Rules,
    *,
    as_json: bool = False,
    now: datetime | None = None,
) -> int:
    """One pass; print its new alerts and a headline (or one JSON object); return 0.

    The ledger's errors propagate for the caller to name.
    """
    from nightshift.watchdog.run import watch_once

    sink = _Quiet() if as_json else _PrintSink()
    report = watch_once(url, catalogue=catalogue, labels=labels, rules=rules, sink=sink, now=now)
    if as_json:
        print(json.dumps(report.as_dict()))
        return 0
    repeated = len(report.found) - len(report.raised)
    tail = f" ({repeated} raised before)" if repeated else ""
    print(report.headline() + tail)
    if catalogue is None:
        print("stale labels not checked: give --catalogue to check its labels")
    return 0
