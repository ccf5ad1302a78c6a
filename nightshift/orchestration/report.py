"""What a night leaves behind: summary.json and the table artifact, also when it ends early."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prefect.artifacts import create_table_artifact

from nightshift.config.catalogue import Catalogue
from nightshift.engine.outcomes import JobOutcome, NightSummary, Outcome
from nightshift.errors import LockHeldError, NightEndedEarly
from nightshift.files import write_atomic

__all__ = [
    "SUMMARY_FILE",
    "not_run",
    "publish_summary",
    "report",
    "summary_json",
    "why",
]

SUMMARY_FILE = "summary.json"


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
    publish: bool = True,
) -> None:
    """summary.json and (``publish``) the table artifact: what happened, and why a night
    ended early (``interrupted``: stopped by Ctrl-C or SIGTERM, jobs left running)."""
    data = summary_json(summary)
    if exit_code is not None:
        data["exit_code"] = exit_code
    data["reason"] = reason
    write_atomic(run_path / SUMMARY_FILE, json.dumps(data, indent=2) + "\n")
    if publish:
        publish_summary(summary, reason)


def summary_json(summary: NightSummary) -> dict[str, Any]:
    """The summary object of ``nightshift run --json``."""
    return {
        "severity": summary.severity.value,
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
    }


def publish_summary(summary: NightSummary, reason: str | None = None) -> None:
    """The summary as a table artifact on the flow run."""
    rows = [
        {
            "job": job.label,
            "state": job.state.value,
            "duration": job.line().split(" (", 1)[1].split(",")[0],
            "attempts": job.attempts,
            "detail": job.detail or "",
        }
        for job in summary.jobs
    ]
    headline = summary.headline()
    description = f"{headline}. {reason}" if reason else headline
    create_table_artifact(rows, key="nightly-summary", description=description)
