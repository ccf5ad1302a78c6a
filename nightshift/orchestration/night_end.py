"""How a night ends, finished or early: summary.json, Slack, the report, the ledger closed.

The order is the point: summary.json is written first (what follows may wait on the Prefect
API, which may be gone), then Slack and the report page while the ledger is open, then the
ledger is closed and ``stop.over`` set (a caller bounding a stop waits for that), then the
UI's progress flushed, and only then the artifacts published.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from prefect.runtime import flow_run
from prefect.states import Failed, State

from nightshift.config.catalogue import Catalogue
from nightshift.config.settings import Settings
from nightshift.engine.outcomes import JobOutcome, NightSummary, Outcome, join
from nightshift.engine.plan import plan_night
from nightshift.engine.stopping import INTERRUPTED, NightStop
from nightshift.errors import LockHeldError
from nightshift.metrics.export import export_ledger_metrics
from nightshift.notify.notifier import Notifier
from nightshift.orchestration.night_setup import stamp
from nightshift.orchestration.progress import ProgressSink
from nightshift.orchestration.report import not_run, report, why
from nightshift.orchestration.report_inputs import gather_report
from nightshift.orchestration.states import night_result
from nightshift.store.ledger import Ledger

__all__ = ["EXIT_LOCKED", "PROGRESS_FLUSH_S", "NightEnd", "end_early", "end_night"]

EXIT_LOCKED = 3  # as the CLI's: another night of the catalogue holds its lease
PROGRESS_FLUSH_S = 2.0


@dataclass(frozen=True)
class NightEnd:
    """What a night's end writes to, tells and closes."""

    catalogue: Catalogue
    settings: Settings
    ledger: Ledger
    night: str
    run_path: Path
    stop: NightStop
    notifier: Notifier | None
    # the Slack task (``tasks/notify.py``), handed in: this layer does not import tasks
    notify: Callable[..., Any]
    logger: Any


def end_night(end: NightEnd, summary: NightSummary, progress: ProgressSink) -> State | list[State]:
    """A night that ran to its end, or was stopped (Ctrl-C, SIGTERM): its state."""
    logger, stop = end.logger, end.stop
    if (flow_run.run_count or 1) > 1:  # a retry of the night's flow run (the UI's Retry)
        summary = replace(summary, rerun=True)
    ended: str | None = None
    stopped_code: int | None = None
    if stop.requested:
        left = [o for o in summary.jobs if o.state is Outcome.LEFT_RUNNING]
        ended, stopped_code = INTERRUPTED, stop.exit_code
        logger.warning("interrupted: %d job(s) left running, a rerun re-attaches", len(left))
    _close(
        end,
        summary,
        reason=ended,
        exit_code=stopped_code,
        tell=not stop.requested,  # an interrupted night has no verdict to send
        # the UI's progress reaches its end (bounded: the API may be gone)
        progress=None if stop.requested else progress,
    )
    if stop.requested:
        return Failed(name="Interrupted", message=f"{ended}: {summary.headline()}")
    return night_result(summary)


def end_early(
    end: NightEnd,
    exc: BaseException,
    only: list[str] | None,
    results: Mapping[str, JobOutcome],
    started_at: str,
) -> None:
    """A night that ended early still says why, where a finished night says how it went."""
    reason = why(exc)
    labels = plan_night(end.catalogue, only).labels
    summary = join(
        [results.get(x) or not_run(end.catalogue, x, reason) for x in labels],
        started_at,
        stamp(),
    )
    locked = isinstance(exc, LockHeldError)  # a refused second night is not a bad night
    _close(
        end,
        summary,
        reason=reason,
        exit_code=EXIT_LOCKED if locked else summary.exit_code,
        tell=not locked,
        said=f"the night ended early: {reason}",
    )


def _close(
    end: NightEnd,
    summary: NightSummary,
    *,
    reason: str | None,
    exit_code: int | None,
    tell: bool,
    progress: ProgressSink | None = None,
    said: str | None = None,
) -> None:
    """The end, in the order the module's docstring gives."""
    # summary.json first: what follows may wait on the Prefect API, which may be gone
    report(end.run_path, summary, reason=reason, exit_code=exit_code, publish=False)
    if said is not None:
        end.logger.warning("%s", said)
    page = None
    try:
        if tell:
            _tell(end, summary)
        # after Slack: the report says what Slack was told
        page = _page(end, summary)
    finally:
        end.ledger.close()
        end.stop.over.set()
    if progress is not None:
        progress.flush(timeout=PROGRESS_FLUSH_S)
    report(end.run_path, summary, reason=reason, exit_code=exit_code, page=page)


def _tell(end: NightEnd, summary: NightSummary) -> None:
    """Slack (the ``notify`` task) and metrics; neither can change the night's verdict."""
    if end.notifier is not None:
        run_id = str(flow_run.id) if flow_run.id else None
        end.notify(end.notifier, summary, end.night, run_id, return_state=True)
    export_ledger_metrics(end.ledger.engine, end.settings, logger=end.logger)


def _page(end: NightEnd, summary: NightSummary) -> dict[str, Any] | None:
    """The night report's fields; None (and a warning) when they cannot be read."""
    try:
        return gather_report(summary, end.catalogue, end.ledger, end.night)
    except Exception as exc:  # the report never changes the night's verdict
        end.logger.warning(
            "the night report could not be gathered: %s: %s", type(exc).__name__, exc
        )
        return None
