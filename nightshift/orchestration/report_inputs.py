"""What the night report is drawn from, read from the ledger's database and the run folder.

The budgets' usual durations (the latest snapshot, never built here), tonight's watches and
alerts (the alert log), what Slack was told (the outbox) and the head of each saved log tail.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nightshift.config.catalogue import Catalogue
from nightshift.engine.explain import tail_head
from nightshift.engine.outcomes import NightSummary
from nightshift.orchestration.night_report import (
    EXCERPT_LINES,
    SlackLine,
    Usual,
    WatchLine,
    build_report,
)
from nightshift.store.alert_log import AlertLog
from nightshift.store.ledger import Ledger
from nightshift.store.outbox import Outbox

__all__ = ["catalogue_name", "gather_report"]


def catalogue_name(catalogue: Catalogue) -> str:
    """The catalogue as a person names it: its ``name``, else its file's stem."""
    if catalogue.name:
        return catalogue.name
    return catalogue.path.stem if catalogue.path else "nightshift"


def gather_report(
    summary: NightSummary, catalogue: Catalogue, ledger: Ledger, night: str
) -> dict[str, Any]:
    """The night's report (``build_report``) with every input read."""
    key = catalogue.key
    return build_report(
        summary,
        night=night,
        catalogue=catalogue_name(catalogue),
        usual=_usual(ledger, key),
        excerpts={
            job.label: tail_head(_read(job.log_tail_path), EXCERPT_LINES)
            for job in summary.not_ok
            if job.log_tail_path
        },
        watches=[
            WatchLine(a.label, a.level, a.kind, a.state, a.dwell_s, a.p95_s, a.raised_by)
            for a in AlertLog(ledger.engine).alerts(catalogue=key, night=night)
        ],
        slack=None if catalogue.notify is None else _slack(ledger, key, night),
    )


def _usual(ledger: Ledger, catalogue: str) -> dict[str, Usual]:
    from nightshift.budgets.snapshots import BudgetSnapshots

    stored = BudgetSnapshots(ledger.engine).latest_budgets(catalogue)  # rows: no pandas
    if stored is None:
        return {}
    budgets = stored[1]
    return {
        label: Usual(budget.p50, budget.p95)
        for (cat, label), budget in budgets.jobs.items()
        if cat == catalogue
    }


def _slack(ledger: Ledger, catalogue: str, night: str) -> list[SlackLine]:
    outbox = Outbox(ledger.engine)
    first = outbox.first_digest(catalogue, night)
    lines = []
    for item in outbox.items(catalogue):
        if item.night != night:
            continue
        channel = str(item.destination.get("channel") or "webhook")
        thread: str | None = None
        if item.thread and item.destination.get("channel"):
            thread = outbox.thread_ts(catalogue, night, channel)
        elif item.kind == "digest" and first is not None and item.id > first.id:
            thread = first.ts  # a retry's digest: a reply to the night's first
        thread = None if thread == item.ts else thread  # a thread's first message is top-level
        line = next((ln for ln in item.text.splitlines() if ln.strip()), "")
        lines.append(
            SlackLine(channel, item.kind, line[:200], thread, item.ts, item.sent_at is not None)
        )
    return lines


def _read(path: str | None) -> str | None:
    if not path:
        return None
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return f"(could not read the tail: {exc})"
