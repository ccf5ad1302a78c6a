"""The watchdog flow: from the ledger alone, what no night is watching. Flows wire."""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger

from nightshift.config.catalogue import load_catalogue
from nightshift.config.durations import parse_duration
from nightshift.config.settings import load_settings
from nightshift.metrics.export import export_ledger_metrics
from nightshift.notify.notifier import Notifier, flush_outbox
from nightshift.notify.sinks import SlackFindingSink
from nightshift.store.ledger import Ledger
from nightshift.store.outbox import Outbox
from nightshift.watchdog.checks import Rules
from nightshift.watchdog.run import FindingSink, LogFindingSink, watch_once
from nightshift.watchdog.scope import catalogue_labels

__all__ = ["watchdog"]


@flow(name="watchdog")
def watchdog(
    catalog: str | None = None,
    stale_after: str = "24h",
    streak_nights: int = 3,
    sink: Any = None,
) -> dict[str, Any]:
    """One pass: jobs past 2 x p95, nights that stopped watching, stale labels, failure streaks.

    ``catalog``: a catalogue file (its jobs only, and its stale labels); None: every catalogue
    in the ledger, without the stale check (which needs the file's labels). ``sink``: a
    ``FindingSink`` handed in by code (Slack, a test), not a deployment parameter; None logs.
    """
    logger = get_run_logger()
    key, labels = catalogue_labels(catalog)
    rules = Rules(stale_after_s=parse_duration(stale_after), streak_nights=streak_nights)
    settings = load_settings()
    ledger = Ledger(settings.ledger_url(), key or "")  # upgrades the schema the outbox needs
    try:
        outbox = Outbox(ledger.engine)
        # what Slack did not take earlier (any catalogue's), oldest first, each once
        flushed = flush_outbox(outbox)
        if flushed.sent or flushed.kept:
            logger.info(
                "outbox: %d delivered, %d still waiting", len(flushed.sent), len(flushed.kept)
            )
        notifier = _notifier(catalog, outbox, logger)
        if sink is None and notifier is not None:
            sink = SlackFindingSink(notifier)
        report = watch_once(
            settings.ledger_url(),
            catalogue=key,
            labels=labels,
            rules=rules,
            sink=_sink(sink, logger),
        )
        for error in report.sink_errors:
            logger.warning("announcing an alert failed (it is kept in the ledger): %s", error)
        logger.info("%s", report.headline())
        export_ledger_metrics(ledger.engine, settings, logger=logger)
    finally:
        ledger.close()
    return report.as_dict()


def _notifier(path: str | None, outbox: Outbox, logger: Any) -> Notifier | None:
    """The catalogue's Slack notifier, when it has a ``notify:`` section."""
    if path is None:
        return None
    catalogue = load_catalogue(path)
    if catalogue.notify is None:
        return None
    return Notifier(catalogue.notify, catalogue=catalogue.key, outbox=outbox, logger=logger)


def _sink(sink: Any, logger: Any) -> FindingSink:
    """Typed as Any in the signature: Prefect builds a parameter schema from it."""
    return sink if sink is not None else LogFindingSink(logger)
