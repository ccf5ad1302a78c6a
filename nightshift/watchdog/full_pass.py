"""The whole watchdog pass, as the flow and ``nightshift watchdog`` both run it (no Prefect).

Deliver what waits in the Slack outbox, check the ledger (``watch_once``), announce each new
alert to the given sink and, when the catalogue has a ``notify:`` section, to Slack too, then
export the metrics. Only the checks' ledger errors propagate: Slack and metrics log and go on.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING

from nightshift.budgets.lookup import FLOOR_S, dwell_floor
from nightshift.config.catalogue import MIN_SAMPLES, Catalogue
from nightshift.config.settings import Settings
from nightshift.config.timers import nightly_crons, schedule_interval
from nightshift.metrics.export import export_ledger_metrics
from nightshift.notify.notifier import Notifier, flush_outbox
from nightshift.notify.sinks import SlackFindingSink
from nightshift.store.alert_log import AlertRecord
from nightshift.store.ledger import Ledger
from nightshift.store.outbox import FlushReport, Outbox
from nightshift.watchdog.checks import Rules
from nightshift.watchdog.run import FindingSink, WatchReport, watch_once

if TYPE_CHECKING:
    Logger = logging.Logger | logging.LoggerAdapter  # type: ignore[type-arg]

__all__ = ["PassResult", "watchdog_pass"]


@dataclass(frozen=True)
class PassResult:
    """What one pass did: the checks' report and the outbox flush."""

    report: WatchReport
    flushed: FlushReport


class _Both:
    """Announce to each sink in turn; one that raises does not keep the next from hearing."""

    def __init__(self, *sinks: FindingSink) -> None:
        self._sinks = sinks

    def send(self, alert: AlertRecord) -> None:
        errors = []
        for sink in self._sinks:
            try:
                sink.send(alert)
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0]


def watchdog_pass(
    settings: Settings,
    catalogue: Catalogue | None,
    labels: list[str] | None,
    rules: Rules,
    sink: FindingSink,
    *,
    logger: Logger | None = None,
    now: datetime | None = None,
) -> PassResult:
    """One pass over ``settings``' ledger (``catalogue``'s jobs only when given)."""
    log: Logger = logger or logging.getLogger("nightshift.watchdog")
    url = settings.ledger_url()
    floor_s, min_samples = FLOOR_S, MIN_SAMPLES
    schedule: list[tuple[str, str | None]] | None = None
    if catalogue is not None and catalogue.path is not None:
        schedule = nightly_crons(catalogue.path)  # its nights that never started are missed
    if catalogue is not None:
        # stale follows the catalogue's schedule (prefect.yaml beside it, else daily), and the
        # watchdog's dwell alerts keep the night's floor
        if catalogue.path is not None:
            rules = replace(rules, interval_s=schedule_interval(catalogue.path)[0])
        floor_s = dwell_floor(catalogue.defaults.poll.max)
        min_samples = catalogue.defaults.min_samples
    key = catalogue.key if catalogue is not None else None
    ledger = Ledger(url, key or "")  # upgrades the schema the outbox needs
    try:
        outbox = Outbox(ledger.engine)
        flushed = flush_outbox(outbox)  # every catalogue's waiting messages, oldest first
        if flushed.sent or flushed.kept:
            log.info("outbox: %d delivered, %d still waiting", len(flushed.sent), len(flushed.kept))
        if catalogue is not None and catalogue.notify is not None:
            notifier = Notifier(catalogue.notify, catalogue=key or "", outbox=outbox, logger=log)
            sink = _Both(sink, SlackFindingSink(notifier))
        report = watch_once(
            url,
            catalogue=key,
            labels=labels,
            rules=rules,
            sink=sink,
            now=now,
            floor_s=floor_s,
            min_samples=min_samples,
            schedule=schedule,
        )
        export_ledger_metrics(ledger.engine, settings, logger=log)
    finally:
        ledger.close()
    return PassResult(report, flushed)
