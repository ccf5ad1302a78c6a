"""What a night leaves behind: summary.json, the table artifact and the night report (markdown
artifact ``nightly-report``, ``report.png`` in the run folder), also when it ends early."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from prefect.artifacts import create_markdown_artifact, create_table_artifact

from nightshift.config.catalogue import Catalogue
from nightshift.engine.outcomes import (
    JobOutcome,
    NightSummary,
    Outcome,
    state_name,
    worst_first,
)
from nightshift.engine.spend import SpendTotals
from nightshift.errors import LockHeldError, NightEndedEarly
from nightshift.files import write_atomic
from nightshift.orchestration.artifact_tries import described
from nightshift.orchestration.night_report import REPORT_KEY, render_report
from nightshift.orchestration.report_inputs import SUMMARY_FILE
from nightshift.orchestration.report_plot import draw_apart

__all__ = [
    "PLOT_FILE",
    "SUMMARY_FILE",
    "not_run",
    "publish_summary",
    "report",
    "spend_json",
    "summary_json",
    "why",
]

PLOT_FILE = "report.png"


def why(exc: BaseException) -> str:
    """An early end in one line."""
    if isinstance(exc, LockHeldError | NightEndedEarly):
        return f"not run: {exc}"
    return f"the night ended early: {type(exc).__name__}: {exc}"


def not_run(catalogue: Catalogue, label: str, reason: str) -> JobOutcome:
    """A job the night never reached; nothing of it is in the ledger."""
    return JobOutcome(
        label=label, state=Outcome.FAILED, backend=catalogue.job(label).backend, detail=reason
    )


def report(
    run_path: Path,
    summary: NightSummary,
    *,
    reason: str | None = None,
    exit_code: int | None = None,
    page: Mapping[str, Any] | None = None,
    publish: bool = True,
    plot: bool = True,
) -> None:
    """summary.json and (``publish``) the artifacts: what happened, and why a night ended early
    (``interrupted``: stopped by Ctrl-C or SIGTERM, jobs left running).

    ``page`` is the night report (``build_report``): kept in summary.json under ``report``,
    drawn as ``report.png`` (unless not ``plot``: ``NIGHTSHIFT_REPORT_PLOT=false``) and
    published as the ``nightly-report`` markdown artifact, its plot inline.
    """
    data = summary_json(summary)
    if exit_code is not None:
        data["exit_code"] = exit_code
    data["reason"] = reason
    if page is not None:
        data["catalogue"] = page["catalogue"]
        data["report"] = dict(page)
    write_atomic(run_path / SUMMARY_FILE, json.dumps(data, indent=2) + "\n")
    png = None
    if page is not None and plot:  # a second Python with matplotlib: about 1 s of CPU
        png = draw_apart(page)
        (run_path / PLOT_FILE).write_bytes(png)
    if not publish:
        return
    publish_summary(summary, reason)
    if page is not None:
        inline = None if png is None else "data:image/png;base64," + base64.b64encode(png).decode()
        markdown = render_report(page, plot=inline)
        if reason:
            markdown = f"> {reason}\n\n{markdown}"
        create_markdown_artifact(markdown, key=REPORT_KEY, description=described(page["headline"]))


def summary_json(summary: NightSummary) -> dict[str, Any]:
    """The summary object of ``nightshift run --json``."""
    return {
        "severity": summary.severity.value,
        "headline": summary.message(),
        "exit_code": summary.exit_code,
        "started_at": summary.started_at,
        "finished_at": summary.finished_at,
        "jobs": [job.to_json() for job in summary.jobs],
        # jobs an interrupted night stopped watching: still running out there, in flight in
        # the ledger; `nightshift run` for the night re-attaches, `nightshift cancel` stops them
        "left_running": [
            {"label": job.label, "backend": job.backend, "external_id": job.external_id}
            for job in summary.jobs
            if job.state is Outcome.LEFT_RUNNING
        ],
        # tonight's spend on paid jobs (runs of the night before this one included), its cap
        "spend": None if summary.spend is None else spend_json(summary.spend),
        # a night that ran late: its slot, its start, the nights missed before it
        "late": summary.late,
        # several jobs of one backend stalled together: one line per incident
        "incidents": list(summary.incidents),
        # what the ledger could not keep tonight (its disk full), None: everything
        "ledger": summary.ledger,
        # the night run's trace in the team's tracing (None: untraced), and its link
        "trace": summary.trace,
        "trace_url": summary.trace_url,
    }


def spend_json(spend: SpendTotals) -> dict[str, Any]:
    """The spend as summary.json and the report keep it."""
    return {
        "cap_usd": spend.cap_usd,
        "spent_usd": round(spend.spent_usd, 6),
        "committed_usd": round(spend.committed_usd, 6),
        "total_usd": round(spend.total_usd, 6),
        "refused": list(spend.refused),
        "unknown": list(spend.unknown),
        "line": spend.line(),
    }


def publish_summary(summary: NightSummary, reason: str | None = None) -> None:
    """The summary as a table artifact on the flow run, worst first as the report is."""
    rows = [
        {
            "job": job.label,
            "state": state_name(job),
            # one figure on every page: a kept job's is the earlier run's, said so
            "duration": job.took(),
            "attempts": job.attempts,
            "detail": job.detail or "",
        }
        for job in worst_first(summary.jobs)
    ]
    headline = summary.headline()
    description = f"{headline}. {reason}" if reason else headline
    create_table_artifact(rows, key="nightly-summary", description=described(description))
