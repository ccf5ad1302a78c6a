"""What the night report is drawn from, read from the ledger's database and the run folder.

The budgets' usual durations (the latest snapshot, never built here), tonight's watches and
alerts (the alert log), what Slack was told (the outbox), the head of each saved log tail, and
the night's runs and each job's tries (``night_runs``: the ledger's rows and the summaries the
night's earlier runs left in their run folders), and the run's forecast (``store/forecasts``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from nightshift.config.catalogue import Catalogue
from nightshift.engine.explain import tail_end
from nightshift.engine.forecast_check import check_night
from nightshift.engine.night_forecast import unknown_jobs
from nightshift.engine.outcomes import NightSummary
from nightshift.orchestration.forecast_report import forecast_section
from nightshift.orchestration.night_report import (
    EXCERPT_LINES,
    SlackLine,
    Usual,
    WatchLine,
    build_report,
)
from nightshift.orchestration.night_runs import (
    RunRecord,
    Try,
    night_runs,
    record_from_json,
    record_of,
)
from nightshift.store.alert_log import INCIDENT, AlertLog, AlertRecord
from nightshift.store.forecasts import Forecasts
from nightshift.store.ledger import Ledger, Transition
from nightshift.store.outbox import Outbox

__all__ = ["SUMMARY_FILE", "catalogue_name", "earlier_records", "gather_report"]

SUMMARY_FILE = "summary.json"  # what each run leaves in its run folder


def catalogue_name(catalogue: Catalogue) -> str:
    """The catalogue as a person names it: its ``name``, else its file's stem."""
    if catalogue.name:
        return catalogue.name
    return catalogue.path.stem if catalogue.path else "nightshift"


def gather_report(
    summary: NightSummary,
    catalogue: Catalogue,
    ledger: Ledger,
    night: str,
    runs_folder: Path | None = None,
) -> dict[str, Any]:
    """The night's report (``build_report``) with every input read.

    ``runs_folder`` holds the night's run folders (default: the state folder's
    ``runs/<night>``): the summaries of its earlier runs are read from there.
    """
    key = catalogue.key
    if runs_folder is None:
        runs_folder = _runs_folder(night)
    records = [r for r in [record_of(summary)] if r is not None]
    if runs_folder is not None:
        labels = {job.label for job in catalogue.jobs}
        records += earlier_records(runs_folder, catalogue_name(catalogue), labels)
    rows = ledger.dwells(night)
    runs, tries = night_runs(records, rows)
    raised = AlertLog(ledger.engine).alerts(catalogue=key, night=night)
    return build_report(
        summary,
        night=night,
        catalogue=catalogue_name(catalogue),
        usual=_usual(ledger, key, catalogue.defaults.min_samples),
        excerpts=_excerpts(summary, tries),
        watches=[
            WatchLine(a.label, a.level, a.kind, a.state, a.dwell_s, a.p95_s, a.raised_by)
            for a in raised
            if a.kind != INCIDENT
        ],
        incidents=incident_lines(raised),
        slack=None if catalogue.notify is None else _slack(ledger, key, night),
        runs=runs,
        tries=tries,
        forecast=_forecast(ledger, key, night, summary.started_at, rows),
    )


def incident_lines(raised: Iterable[AlertRecord]) -> list[str]:
    """The night's incidents as the alert log keeps them, one line each (the latest said of
    each: its end, else its opening), in the order they opened (every run of the night's)."""
    lines: dict[str, str] = {}
    for row in raised:
        if row.kind == INCIDENT and row.detail:
            lines[row.label] = row.detail
    return list(lines.values())


def earlier_records(folder: Path, name: str, labels: set[str]) -> list[RunRecord]:
    """The summaries the runs in ``folder`` left, of catalogue ``name`` (a summary of a night
    that ended early names none: its jobs must all be the catalogue's)."""
    records = []
    for path in sorted(folder.glob(f"*/{SUMMARY_FILE}")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict):
            continue
        record = record_from_json(data)
        if record is None or not record.jobs:
            continue
        if data.get("catalogue", name) != name or not set(record.jobs) <= labels:
            continue
        records.append(record)
    return records


def _runs_folder(night: str) -> Path | None:
    """The state folder's ``runs/<night>``, where each run of the night has its folder."""
    from nightshift.config.settings import load_settings

    try:
        return load_settings().state_dir / "runs" / night
    except ValueError:  # settings that do not load: the report goes on without earlier runs
        return None


def _excerpts(summary: NightSummary, tries: dict[str, list[Try]]) -> dict[str, list[str]]:
    """The end of each job's tail (where the why is): of tonight's try when it is not ok and
    kept one, else of its last failure earlier tonight that did."""
    paths: dict[str, str | None] = {}
    for job in summary.jobs:
        if not job.ok and job.log_tail_path:
            paths[job.label] = job.log_tail_path
        elif failed := [t for t in tries.get(job.label, ()) if t.log_tail_path]:
            paths[job.label] = failed[-1].log_tail_path
    return {label: tail_end(_read(path), EXCERPT_LINES) for label, path in paths.items()}


def _usual(ledger: Ledger, catalogue: str, min_samples: int) -> dict[str, Usual]:
    from nightshift.budgets.snapshots import BudgetSnapshots

    snapshots = BudgetSnapshots(ledger.engine)
    stored = snapshots.latest_budgets(catalogue, min_samples=min_samples)  # rows: no pandas
    if stored is None:
        return {}
    budgets = stored[1]
    return {
        label: Usual(budget.p50, budget.p95)
        for (cat, label), budget in budgets.jobs.items()
        if cat == catalogue
    }


def _forecast(
    ledger: Ledger, catalogue: str, night: str, started_at: str | None, rows: list[Transition]
) -> dict[str, Any] | None:
    """This run's forecast (the night's latest, made since the run started) against the run's
    ledger rows; None when it kept none."""
    forecasts = Forecasts(ledger.engine, catalogue).of_night(night)
    if started_at:
        since = datetime.fromisoformat(started_at) - timedelta(seconds=1)  # kept to the second
        forecasts = [f for f in forecasts if f.made_at >= since]
    if not forecasts:
        return None
    made = forecasts[-1]
    jobs, kept = made.body.get("jobs", []), made.body.get("kept", [])
    unknown = unknown_jobs(jobs, kept)
    if unknown:  # nothing to hold the night against: no figure rests on 0 s guesses
        return {"unknown": unknown, "jobs": len(jobs)}
    return forecast_section(check_night(made, rows))


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
