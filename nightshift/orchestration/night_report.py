"""The night report: one page for the on-call engineer at 07:00 (pure: no I/O, no Prefect).

``build_report`` gathers the night's facts into a plain dict (what ``summary.json`` keeps under
``report``); ``render_report`` draws that dict as markdown (the ``nightly-report`` artifact and
``nightshift report``): the headline, jobs worst first against their usual duration, why each
job that was not ok failed with a few lines of its log, the night's watches and alerts, what
Slack was told, and the plot of tonight's durations against the budgets.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from nightshift.config.durations import format_duration
from nightshift.engine.outcomes import (
    JobOutcome,
    NightSummary,
    Outcome,
    retry_line,
    state_name,
    worst_first,
)

__all__ = ["REPORT_KEY", "SlackLine", "Usual", "WatchLine", "build_report", "render_report"]

REPORT_KEY = "nightly-report"
EXCERPT_LINES = 8


@dataclass(frozen=True)
class Usual:
    """A job's usual duration, submit to end: the budgets' p50 and p95 seconds."""

    p50_s: float
    p95_s: float


@dataclass(frozen=True)
class WatchLine:
    """A watch or an alert raised tonight."""

    label: str
    level: str  # watch | alert
    kind: str  # dwell | stopped | stale | streak
    state: str
    dwell_s: float | None
    p95_s: float | None
    raised_by: str


@dataclass(frozen=True)
class SlackLine:
    """A message the night kept for Slack."""

    channel: str
    kind: str  # digest | alert | recovered
    first_line: str
    thread: str | None  # the ts of the thread it replied in; None: top-level
    ts: str | None  # Slack's id of it once accepted
    sent: bool


def build_report(
    summary: NightSummary,
    *,
    night: str,
    catalogue: str,
    usual: Mapping[str, Usual] | None = None,
    excerpts: Mapping[str, list[str]] | None = None,
    watches: Iterable[WatchLine] = (),
    slack: Iterable[SlackLine] | None = None,
) -> dict[str, Any]:
    """The report's fields, JSON-ready; ``slack`` None: the catalogue has no ``notify:``."""
    usual = usual or {}
    excerpts = excerpts or {}
    tonight = {job.label: _tonight(job) for job in summary.jobs}
    ratios = {
        job.label: job.duration_s / usual[job.label].p95_s
        for job in summary.jobs
        if job.label in usual and usual[job.label].p95_s > 0 and tonight[job.label] == "ran"
    }
    jobs = []
    for job in worst_first(summary.jobs, ratios):
        seen = usual.get(job.label)
        jobs.append(
            {
                "label": job.label,
                "state": job.state.value,
                "shown_as": state_name(job),
                # a kept job did not run tonight: its duration is the earlier run's
                "duration_s": round(job.duration_s, 3),
                "usual_p50_s": None if seen is None else round(seen.p50_s, 3),
                "usual_p95_s": None if seen is None else round(seen.p95_s, 3),
                "ratio": None if job.label not in ratios else round(ratios[job.label], 2),
                "attempts": job.attempts,
                "tonight": tonight[job.label],
                "external_id": job.external_id,
                "reason": None if job.ok else (job.detail or "no reason recorded"),
                "excerpt": [] if job.ok else list(excerpts.get(job.label, []))[:EXCERPT_LINES],
                "log_tail_path": job.log_tail_path,
            }
        )
    return {
        "catalogue": catalogue,
        "night": night,
        "severity": summary.severity.value,
        "headline": summary.message(),
        "retry": retry_line(summary),
        "started_at": summary.started_at,
        "finished_at": summary.finished_at,
        "jobs": jobs,
        "watches": [vars(w) for w in watches],
        "slack": None if slack is None else [vars(s) for s in slack],
    }


def _tonight(job: JobOutcome) -> str:
    """``ran``, ``kept`` (succeeded in an earlier run of the night) or ``not run`` (skipped,
    or never reached)."""
    if job.kept:
        return "kept"
    if job.state is Outcome.SKIPPED or (job.attempts == 0 and job.external_id is None):
        return "not run"
    return "ran"


def _when(night: str, started_at: str, finished_at: str | None) -> str:
    """``Ran 02:00:00-02:20:00 UTC (20m)``: times alone on the night's date, else with dates."""
    try:
        start = datetime.fromisoformat(started_at).astimezone(UTC)
        end = datetime.fromisoformat(finished_at).astimezone(UTC) if finished_at else None
    except ValueError:
        return f"Started {started_at}, finished {finished_at or '?'}"
    dated = any(t.date().isoformat() != night for t in (start, end) if t is not None)
    shown = "%Y-%m-%d %H:%M:%S" if dated else "%H:%M:%S"
    if end is None:
        return f"Started {start:{shown}} UTC, no end recorded"
    took = format_duration((end - start).total_seconds())
    dash = " - " if dated else "-"
    return f"Ran {start:{shown}}{dash}{end:{shown}} UTC ({took})"


def render_report(report: Mapping[str, Any], plot: str | None = None) -> str:
    """The report as markdown; ``plot`` is the image's URL (a ``data:`` URI inline)."""
    out = [f"# Night {report['night']} · {report['catalogue']}", "", f"**{report['headline']}**"]
    if report.get("started_at"):
        out += ["", _when(report["night"], report["started_at"], report.get("finished_at"))]
    out += ["", "## Jobs, worst first", ""]
    out += [
        "| job | state | took | usual (p50 / p95) | x p95 | attempts | tonight | external id |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for job in report["jobs"]:
        out.append(_job_row(job))
    bad = [job for job in report["jobs"] if job["reason"] is not None]
    if bad:
        out += ["", "## Why"]
        for job in bad:
            out += ["", f"**{_cell(job['label'])}** ({job['shown_as']}): {_cell(job['reason'])}"]
            if job.get("log_tail_path"):
                out.append(f"tail: `{job['log_tail_path']}`")
            if job["excerpt"]:
                out += ["", "```", *(line.replace("```", "'''") for line in job["excerpt"]), "```"]
    out += ["", "## Watches and alerts", ""]
    out += [_watch_line(w) for w in report["watches"]] or ["None tonight."]
    out += ["", "## What Slack was told", ""]
    if report["slack"] is None:
        out.append("Nothing: the catalogue has no `notify:` section.")
    elif not report["slack"]:
        out.append("Nothing: the night's route is silent.")
    else:
        out += ["| channel | kind | first line | thread | sent |", "|---|---|---|---|---|"]
        for s in report["slack"]:
            thread = f"reply in {s['thread']}" if s["thread"] else "top-level"
            sent = f"yes ({s['ts']})" if s["sent"] else "not yet (outbox)"
            out.append(
                f"| {_cell(s['channel'])} | {s['kind']} | {_cell(s['first_line'])} "
                f"| {thread} | {sent} |"
            )
    if plot:
        out += ["", "## Tonight against the budgets", "", f"![durations against budgets]({plot})"]
    return "\n".join(out) + "\n"


def _job_row(job: Mapping[str, Any]) -> str:
    usual = "learning"
    if job["usual_p50_s"] is not None:
        usual = f"{format_duration(job['usual_p50_s'])} / {format_duration(job['usual_p95_s'])}"
    ratio = "" if job["ratio"] is None else f"x{job['ratio']:.1f}"
    took = format_duration(job["duration_s"])
    if job["tonight"] == "kept":
        took = f"({took} earlier)"
    elif job["tonight"] == "not run":
        took = "-"
    cells = [
        f"`{_cell(job['label'])}`",
        job["shown_as"],
        took,
        usual,
        ratio,
        str(job["attempts"]),
        job["tonight"],
        f"`{_cell(job['external_id'])}`" if job["external_id"] else "",
    ]
    return "| " + " | ".join(cells) + " |"


def _watch_line(w: Mapping[str, Any]) -> str:
    what = f"- **{w['level']}** `{_cell(w['label'])}` {w['kind']}"
    if w["state"]:
        what += f" in {w['state']}"
    if w["dwell_s"] is not None and w["p95_s"]:
        ratio = w["dwell_s"] / w["p95_s"]
        what += (
            f" for {format_duration(w['dwell_s'])} (p95 {format_duration(w['p95_s'])}, "
            f"x{ratio:.1f})"
        )
    return f"{what}, by the {w['raised_by']}"


def _cell(text: Any) -> str:
    """Text safe inside a markdown table cell: one line, no pipes."""
    return str(text).splitlines()[0].replace("|", "\\|") if str(text) else ""
