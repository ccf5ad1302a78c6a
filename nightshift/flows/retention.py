"""The retention flow: delete history older than the window, as ``nightshift prune`` does."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from prefect import flow, get_run_logger

from nightshift.config.durations import parse_duration
from nightshift.config.settings import load_settings
from nightshift.store.retention import prune, retention_scope

__all__ = ["retention"]


@flow(name="ledger-retention")
def retention(
    keep: str = "90d", catalog: str | None = None, dry_run: bool = False
) -> dict[str, Any]:
    """Prune ledger rows, command-job folders (and, with ``catalog``, its Gemini manifests).

    Returns what was removed (or would be, with ``dry_run``); a bad ``keep`` fails the run
    before anything is deleted.
    """
    logger = get_run_logger()
    keep_s = parse_duration(keep)
    settings = load_settings()
    key, outputs = retention_scope(catalog)
    report = prune(
        settings.ledger_url(),
        settings.state_dir,
        keep_s,
        catalogue=key,
        outputs=outputs,
        dry_run=dry_run,
    )
    verb = "would remove" if dry_run else "removed"
    logger.info(
        "%s %d transitions, %d job rows and %d forecasts before %s, %d command-job folders (%d "
        "bytes)%s",
        verb,
        report.transitions,
        report.jobs,
        report.forecasts,
        report.cutoff.isoformat(),
        report.folders,
        report.folder_bytes,
        "" if report.manifests is None else f", {report.manifests} Gemini submit manifests",
    )
    out = asdict(report)
    out["cutoff"] = report.cutoff.isoformat()
    return out
