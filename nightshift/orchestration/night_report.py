"""The night report: one page for the on-call engineer at 07:00 (pure: no I/O, no Prefect).

``build_report`` gathers the night's facts into a plain dict (what ``summary.json`` keeps under
``report``); ``render_report`` draws that dict as markdown (the ``nightly-report`` artifact and
``nightshift report``): the headline, when each run of the night ran, jobs worst first against
their usual duration, why each job that was not ok failed (and, after a retry, why each that is
ok now failed earlier tonight) with a few lines of its log, the night's watches and alerts, what
Slack was told, and the plot of tonight's durations against the budgets.

Its tables fit the Prefect UI's artifact card at a 1,400 px window (about 830 px: cells do not
wrap there): long ids and labels are shortened in them, the full ones listed below.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from nightshift.config.durations import format_duration, job_time
from nightshift.engine.outcomes import (
    JobOutcome,
    NightSummary,
    retry_line,
    state_name,
    worst_first,
)
from nightshift.orchestration.forecast_report import forecast_lines
from nightshift.orchestration.night_runs import RunSpan, Try, runs_line, tries_line, try_words
from nightshift.states import JobState

__all__ = ["REPORT_KEY", "SlackLine", "Usual", "WatchLine", "build_report", "render_report"]

REPORT_KEY = "nightly-report"
EXCERPT_LINES = 8
# a table cell longer than this is shortened to its first SHORT_KEEP characters and "…"
ID_CELL, SHORT_KEEP = 10, 8  # external ids, Slack's ts
LABEL_CELL, LABEL_KEEP = 24, 22  # job labels
CHANNEL_CELL, FIRST_LINE_CELL = 20, 44  # a Slack message's channel and first line


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
    runs: Sequence[RunSpan] | None = None,
    tries: Mapping[str, Sequence[Try]] | None = None,
    forecast: Mapping[str, Any] | None = None,
    incidents: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The report's fields, JSON-ready; ``slack`` None: the catalogue has no ``notify:``.

    ``runs``: the night's runs, oldest first (None: the summary's alone); more than one makes
    the headline a retry's. ``tries``: each job's tries tonight (``night_runs``); the excerpt
    of a job ok now that failed earlier tonight is of that failure's tail. ``forecast``: the
    run's forecast against what happened (``forecast_report.forecast_section``), None: none kept.
    ``incidents``: the night's incidents, one line each (None: the summary's).
    """
    usual = usual or {}
    excerpts = excerpts or {}
    tries = tries or {}
    if runs is None:
        runs = [RunSpan(summary.started_at, summary.finished_at)] if summary.started_at else []
    if len(runs) > 1 and not summary.rerun:  # a rerun that kept nothing is a retry too
        summary = replace(summary, rerun=True)
    tonight = {job.label: _tonight(job) for job in summary.jobs}
    ratios = {
        job.label: job.duration_s / usual[job.label].p95_s
        for job in summary.jobs
        if job.label in usual and usual[job.label].p95_s > 0 and tonight[job.label] == "ran"
    }
    jobs = []
    for job in worst_first(summary.jobs, ratios):
        seen = usual.get(job.label)
        failure = _last_failure(tries.get(job.label, ()))
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
                "excerpt": (
                    list(excerpts.get(job.label, []))[:EXCERPT_LINES]
                    if not job.ok or failure is not None
                    else []
                ),
                "log_tail_path": job.log_tail_path,
                "tries": [asdict(t) for t in tries.get(job.label, ())],
                "last_failure": None if failure is None else asdict(failure),
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
        "runs": [asdict(r) for r in runs],
        "jobs": jobs,
        "watches": [vars(w) for w in watches],
        "slack": None if slack is None else [vars(s) for s in slack],
        "forecast": None if forecast is None else dict(forecast),
        # tonight's spend on paid jobs and its cap: one line (None: no paid job, no cap)
        "spend": None if summary.spend is None else summary.spend.line(),
        # a night that ran late, and the nights missed before it (None: on time, none missed)
        "late": summary.late,
        # several jobs of one backend stalled together: one line each, above the jobs (the
        # alert log's, every run of the night's; else this run's)
        "incidents": list(summary.incidents if incidents is None else incidents),
        # the run's trace in the team's tracing (None: untraced), and its link
        "trace": summary.trace,
        "trace_url": summary.trace_url,
    }


def _tonight(job: JobOutcome) -> str:
    """``ran``, ``kept`` (succeeded in an earlier run of the night) or ``not run`` (skipped,
    or never reached)."""
    if job.kept:
        return "kept"
    return "ran" if job.ran else "not run"


def _last_failure(tries: Iterable[Try]) -> Try | None:
    """The job's last try tonight that did not succeed (a skip is no try of its own)."""
    failed = [t for t in tries if t.state not in (JobState.SUCCEEDED, JobState.SKIPPED)]
    return failed[-1] if failed else None


def render_report(report: Mapping[str, Any], plot: str | None = None) -> str:
    """The report as markdown; ``plot`` is the image's URL (a ``data:`` URI inline)."""
    night = report["night"]
    out = [f"# Night {night} · {report['catalogue']}", "", f"**{report['headline']}**"]
    runs = report.get("runs")
    if runs is None and report.get("started_at"):  # a report kept before runs were
        runs = [{"started_at": report["started_at"], "finished_at": report.get("finished_at")}]
    if runs and (when := runs_line(night, runs)):
        out += ["", when]
    if report.get("late"):  # a night that ran late, and the nights missed before it
        late = str(report["late"]).replace("_", "\\_").replace("*", "\\*")
        out += ["", f"**{late}**"]
    if report.get("forecast"):
        out += ["", *forecast_lines(report["forecast"])]
    if report.get("spend"):
        # a label's `_` or `*` is text, not emphasis
        spend = str(report["spend"]).replace("_", "\\_").replace("*", "\\*")
        out += ["", f"**{spend[:1].upper()}{spend[1:]}**"]
    if report.get("trace"):  # the run's trace in the team's tracing
        trace = str(report["trace"])
        link = f"[{trace}]({report['trace_url']})" if report.get("trace_url") else f"`{trace}`"
        out += ["", f"Trace: {link}"]
    for line in report.get("incidents") or ():  # one backend's jobs stalled together
        out += ["", "**Incident: " + str(line).replace("_", "\\_").replace("*", "\\*") + "**"]
    out += ["", "## Jobs, worst first", ""]
    out += [
        "| job | state | took | usual p50 / p95 | x p95 | attempts | external id |",
        "|---|---|---|---|---|---|---|",
    ]
    out += [_job_row(job) for job in report["jobs"]]
    out += _full_names(report["jobs"])
    why = [job for job in report["jobs"] if job["reason"] is not None or job.get("last_failure")]
    if why:
        out += ["", "## Why"]
        for job in why:
            out += ["", *_why(night, job)]
    out += ["", "## Watches and alerts", ""]
    out += [_watch_line(w) for w in report["watches"]] or ["None tonight."]
    out += ["", "## What Slack was told", ""]
    if report["slack"] is None:
        out.append("Nothing: the catalogue has no `notify:` section.")
    elif not report["slack"]:
        out.append("Nothing: the night's route is silent.")
    else:
        out += _slack(report["slack"])
    if plot:
        out += ["", "## Tonight against the budgets", "", f"![durations against budgets]({plot})"]
    return "\n".join(out) + "\n"


def _job_row(job: Mapping[str, Any]) -> str:
    usual = "learning"
    if job["usual_p50_s"] is not None:
        usual = f"{format_duration(job['usual_p50_s'])} / {format_duration(job['usual_p95_s'])}"
    ratio = "" if job["ratio"] is None else f"x{job['ratio']:.1f}"
    # whether it ran tonight is in its time: a kept job's is the earlier run's
    took = job_time(job["duration_s"])  # as JobOutcome.took says it
    if job["tonight"] == "kept":
        took = f"{took} earlier"
    elif job["tonight"] == "not run":
        took = "not run"
    cells = [
        f"`{_short(_cell(job['label']), LABEL_CELL, LABEL_KEEP)}`",
        job["shown_as"],
        took,
        usual,
        ratio,
        str(job["attempts"]),
        f"`{_short(_cell(job['external_id']))}`" if job["external_id"] else "",
    ]
    return "| " + " | ".join(cells) + " |"


def _full_names(jobs: Iterable[Mapping[str, Any]]) -> list[str]:
    """Below the table: each label and external id the table shortened, in full."""
    lines = []
    for job in jobs:
        label, ext = _cell(job["label"]), _cell(job["external_id"] or "")
        if _short(label, LABEL_CELL, LABEL_KEEP) != label or _short(ext) != ext:
            lines.append(f"- `{label}`: " + (f"`{ext}`" if ext else "no external id"))
    return ["", "Full labels and external ids:", "", *lines] if lines else []


def _why(night: str, job: Mapping[str, Any]) -> list[str]:
    """Why a job is not ok, or why it was not earlier tonight; its tries after a retry, the
    reason of its last failure and its tail as a list under it (one line each on the page)."""
    label, shown = _cell(job["label"]), job["shown_as"]
    tries, failure = job.get("tries") or [], job.get("last_failure")
    if job["reason"] is not None:
        out = [f"**{label}** ({shown}): {_cell(job['reason'])}"]
        if len(tries) > 1:
            out.append(f"- tonight: {tries_line(night, tries)}")
    else:  # ok now, after a failure earlier tonight
        out = [f"**{label}** ({shown}): {tries_line(night, tries)}"]
    if failure is not None and failure.get("reason") and failure["reason"] != job["reason"]:
        said = try_words(night, failure)
        out.append(f"- last failure ({said}): {_cell(failure['reason'])}")
    tail = job.get("log_tail_path") if job["reason"] is not None else None
    tail = tail or (failure or {}).get("log_tail_path")
    if tail:
        out.append(f"- tail: `{tail}`")
    if job["excerpt"]:
        out += ["", "```", *(line.replace("```", "'''") for line in job["excerpt"]), "```"]
    return out


def _slack(messages: Iterable[Mapping[str, Any]]) -> list[str]:
    """What Slack was told, as a table that fits the card; below it, each message's ids (ts,
    the thread it replied in) and its channel and first line in full where the table cut them."""
    out = ["| channel | kind | first line | thread | sent |", "|---|---|---|---|---|"]
    below = []
    for s in messages:
        channel, line = _cell(s["channel"]), _cell(s["first_line"])
        cut = _short(line, FIRST_LINE_CELL, FIRST_LINE_CELL - 2)
        thread = "reply" if s["thread"] else "top-level"
        sent = "yes" if s["sent"] else "not yet (outbox)"
        out.append(
            f"| {_short(channel, CHANNEL_CELL, CHANNEL_CELL - 2)} | {s['kind']} | {cut} "
            f"| {thread} | {sent} |"
        )
        said = [f"ts `{s['ts']}`"] if s["ts"] else ["not sent yet"]
        said += [f"in thread `{s['thread']}`"] if s["thread"] else []
        full = f": {line}" if cut != line else ""
        below.append(f"- {channel} {s['kind']}: {', '.join(said)}{full}")
    return [*out, "", "Slack's ids:", "", *below]


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


def _short(text: str, longest: int = ID_CELL, keep: int = SHORT_KEEP) -> str:
    """``text`` as a table cell shows it: past ``longest`` characters, its first ``keep``
    and "…" (the full one is listed below the table)."""
    return text if len(text) <= longest else text[:keep].rstrip("\\") + "…"
