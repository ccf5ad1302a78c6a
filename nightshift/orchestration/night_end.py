"""How a night ends, finished or early: summary.json, Slack, the report, the ledger closed.

The order is the point: summary.json is written first (what follows may wait on the Prefect
API, which may be gone), then Slack and the report page while the ledger is open, then the
ledger is closed and ``stop.end()`` said (a caller bounding a stop waits for that), then the
UI's progress flushed, and only then the artifacts published. Last, a budget snapshot older
than a week is learned again, so the next night's first submit never waits for pandas.

``end_night`` and ``end_early`` are ``with`` blocks: the flow posts Slack's digest inside
(``Ending.tell``, with its own task), so nothing here calls back up into the flow.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from prefect.runtime import flow_run
from prefect.states import Failed, State

from nightshift.engine.outcomes import JobOutcome, NightSummary, Outcome, join
from nightshift.engine.stopping import INTERRUPTED
from nightshift.errors import LockHeldError
from nightshift.metrics.export import export_ledger_metrics
from nightshift.notify.notifier import Notifier
from nightshift.notify.slow import SlowJob, slow_jobs
from nightshift.orchestration.night_setup import NightSetup, stamp
from nightshift.orchestration.progress import ProgressSink
from nightshift.orchestration.report import not_run, report, why
from nightshift.orchestration.report_inputs import gather_report
from nightshift.orchestration.states import night_result

__all__ = ["EXIT_LOCKED", "PROGRESS_FLUSH_S", "Ending", "Tell", "end_early", "end_night"]

EXIT_LOCKED = 3  # as the CLI's: another night of the catalogue holds its lease
PROGRESS_FLUSH_S = 2.0


@dataclass(frozen=True)
class Tell:
    """What Slack's digest of the night says: the flow's ``notify`` task posts it."""

    notifier: Notifier
    summary: NightSummary
    night: str
    run_id: str | None
    slow: list[SlowJob]


class Ending:
    """A night's end under way: ``tell`` (None: Slack hears nothing of it), to post inside the
    ``with`` block; once it ended, the flow run's ``state``."""

    def __init__(self, tell: Tell | None) -> None:
        self.tell = tell
        self.state: State | list[State] | None = None


@contextmanager
def end_night(setup: NightSetup, summary: NightSummary, progress: ProgressSink) -> Iterator[Ending]:
    """A night that ran to its end, or was stopped (Ctrl-C, SIGTERM): its state, once the
    block (where the flow tells Slack) ended."""
    logger, stop = setup.logger, setup.stop
    if (flow_run.run_count or 1) > 1:  # a retry of the night's flow run (the UI's Retry)
        summary = replace(summary, rerun=True)
    ended: str | None = None
    stopped_code: int | None = None
    if stop.requested:
        left = [o for o in summary.jobs if o.state is Outcome.LEFT_RUNNING]
        ended, stopped_code = INTERRUPTED, stop.exit_code
        logger.warning("interrupted: %d job(s) left running, a rerun re-attaches", len(left))
    with _closing(
        setup,
        summary,
        reason=ended,
        exit_code=stopped_code,
        tell=not stop.requested,  # an interrupted night has no verdict to send
        # the UI's progress reaches its end (bounded: the API may be gone)
        progress=None if stop.requested else progress,
    ) as ending:
        yield ending
    if stop.requested:
        ending.state = Failed(name="Interrupted", message=f"{ended}: {summary.headline()}")
    else:
        ending.state = night_result(summary)


@contextmanager
def end_early(
    setup: NightSetup,
    exc: BaseException,
    results: Mapping[str, JobOutcome],
    started_at: str,
) -> Iterator[Ending]:
    """A night that ended early still says why, where a finished night says how it went (and
    tells Slack inside the block)."""
    reason = why(exc)
    summary = join(
        [
            results.get(x) or not_run(setup.prepared.catalogue, x, reason)
            for x in setup.prepared.plan.labels
        ],
        started_at,
        stamp(),
    )
    locked = isinstance(exc, LockHeldError)  # a refused second night is not a bad night
    with _closing(
        setup,
        summary,
        reason=reason,
        exit_code=EXIT_LOCKED if locked else summary.exit_code,
        tell=not locked,
        said=f"the night ended early: {reason}",
    ) as ending:
        yield ending


@contextmanager
def _closing(
    setup: NightSetup,
    summary: NightSummary,
    *,
    reason: str | None,
    exit_code: int | None,
    tell: bool,
    progress: ProgressSink | None = None,
    said: str | None = None,
) -> Iterator[Ending]:
    """The end, in the order the module's docstring gives; Slack is told in the block."""
    # summary.json first: what follows may wait on the Prefect API, which may be gone
    report(setup.prepared.run_path, summary, reason=reason, exit_code=exit_code, publish=False)
    if said is not None:
        setup.logger.warning("%s", said)
    page = None
    ending = Ending(_telling(setup, summary) if tell else None)
    try:
        yield ending  # the flow posts Slack's digest here, with its task
        if tell:  # metrics: like Slack, they cannot change the night's verdict
            prepared = setup.prepared
            export_ledger_metrics(prepared.ledger.engine, prepared.settings, logger=setup.logger)
        # after Slack: the report says what Slack was told
        page = _page(setup, summary)
    finally:
        setup.prepared.ledger.close()
        setup.stop.end()
    if progress is not None:
        progress.flush(timeout=PROGRESS_FLUSH_S)
    # an interrupted night's jobs still run (its rerun draws their picture), and the CLI
    # leaves GRACE_S after ``stop.end()``: a second Python drawing it (a second or more) would
    # leave the flow run Running in the Prefect UI, its end never said
    plot = setup.prepared.settings.report_plot and not setup.stop.requested
    report(
        setup.prepared.run_path,
        summary,
        reason=reason,
        exit_code=exit_code,
        page=page,
        plot=plot,
    )
    if tell:  # last, when nobody waits for it: tomorrow's night starts without learning first
        _learn(setup)


def _learn(setup: NightSetup) -> None:
    """A stale budget snapshot (older than a week) rebuilt from the last 30 days, this night's
    dwells included; a failure is one warning (the next night's end tries again)."""
    from datetime import UTC, datetime

    from nightshift.budgets.current import refresh_budgets, starting_budgets
    from nightshift.store.ledger import Ledger

    prepared = setup.prepared
    key, least = prepared.catalogue.key, prepared.catalogue.defaults.min_samples
    try:
        ledger = Ledger(prepared.settings.ledger_url(), key)
        try:
            now = datetime.now(UTC)
            built = refresh_budgets(ledger, now)
            usable = 0
            if built is not None:
                budgets = starting_budgets(ledger, now, least)
                usable = sum(k[0] == key for k in (*budgets.states, *budgets.backends))
        finally:
            ledger.close()
    except Exception as exc:  # a view of the past: the night is over and said so
        setup.logger.warning("the budgets could not be learned again: %s", exc)
        return
    if built is None:
        return
    if usable:
        setup.logger.info(
            "budgets learned again from %d dwells (snapshot %d): tomorrow's night watches "
            "with them",
            built.dwells,
            built.id,
        )
    else:  # said as it is: nothing has min_samples yet, the night watches with its timers
        setup.logger.info(
            "budgets learned again from %d dwells (snapshot %d): every one still learning "
            "(fewer than %d samples): tomorrow's night has only its fixed timers",
            built.dwells,
            built.id,
            least,
        )


def _telling(setup: NightSetup, summary: NightSummary) -> Tell | None:
    """What Slack's digest says of the night (None: no ``notify:`` in the catalogue)."""
    if setup.notifier is None:
        return None
    run_id = str(flow_run.id) if flow_run.id else None
    return Tell(setup.notifier, summary, setup.prepared.night, run_id, _slow(setup, summary))


def _slow(setup: NightSetup, summary: NightSummary) -> list[SlowJob]:
    """Tonight's slow jobs against the latest budgets snapshot (the report's usual), for the
    digest; none (and a warning) when the budgets cannot be read."""
    from nightshift.budgets.snapshots import BudgetSnapshots

    key = setup.prepared.catalogue.key
    min_samples = setup.prepared.catalogue.defaults.min_samples
    try:
        stored = BudgetSnapshots(setup.prepared.ledger.engine).latest_budgets(
            key, min_samples=min_samples
        )
    except Exception as exc:  # the digest goes out without its slow line
        setup.logger.warning("the budgets could not be read: %s: %s", type(exc).__name__, exc)
        return []
    if stored is None:
        return []
    budgets = stored[1]
    return slow_jobs(summary, lambda label: budgets.job(key, label))


def _page(setup: NightSetup, summary: NightSummary) -> dict[str, Any] | None:
    """The night report's fields; None (and a warning) when they cannot be read."""
    try:
        prepared = setup.prepared
        return gather_report(summary, prepared.catalogue, prepared.ledger, prepared.night)
    except Exception as exc:  # the report never changes the night's verdict
        setup.logger.warning(
            "the night report could not be gathered: %s: %s", type(exc).__name__, exc
        )
        return None
