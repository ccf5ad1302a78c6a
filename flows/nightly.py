"""The nightly flow: plan, fan out, watch, join, report. Flows wire; tasks do."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import uuid
from collections.abc import Coroutine
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, tags
from prefect.context import AsyncClientContext
from prefect.runtime import flow_run
from prefect.states import State

from flows.chain import chain
from nightshift.config.catalogue import Catalogue, load_catalogue
from nightshift.config.settings import Settings, load_settings
from nightshift.engine.admission import Admission
from nightshift.engine.context import NightContext
from nightshift.engine.events import LogSink, Sink
from nightshift.engine.night import (
    build_parts,
    expected_durations,
    finish_night,
    open_night,
    watcher_stopped,
)
from nightshift.engine.outcomes import JobOutcome, NightSummary, join
from nightshift.engine.plan import Plan, parse_night, plan_night, tonight
from nightshift.engine.steps import JobPools
from nightshift.engine.watcher import Watcher
from nightshift.errors import LockHeldError
from nightshift.metrics.export import export_ledger_metrics
from nightshift.notify.notifier import Notifier, SlackAlertSink
from nightshift.notify.sinks import NoticeSink
from nightshift.orchestration.leases import slot_lease_s
from nightshift.orchestration.limits import limit_scope, prefect_slots
from nightshift.orchestration.progress import ProgressSink
from nightshift.orchestration.report import not_run, report, why
from nightshift.orchestration.report_inputs import gather_report
from nightshift.orchestration.states import name_the_night, night_result, quiet_job_finish
from nightshift.store.lease import Lease
from nightshift.store.ledger import Ledger
from nightshift.store.outbox import Outbox
from tasks.jobs import NIGHTS, Night, job_task, outcome_of, with_retries
from tasks.notify import notify

__all__ = ["LIVE_SINKS", "nightly", "run_dir_for"]

# the local CLI adds its live table here: a sink of the night's events
LIVE_SINKS: list[Sink] = []
EXIT_LOCKED = 3  # as the CLI's: another night of the catalogue holds its lease


@flow(name="nightly", on_failure=[name_the_night])
def nightly(
    catalog: str = "nightshift.yaml",
    only: list[str] | None = None,
    night: str | None = None,
    run_dir: str | None = None,
) -> State | list[State]:
    """One night of the catalogue: Completed only when every job succeeded.

    A night that did not fully succeed ends Failed, named by its verdict (``Partial`` or
    ``Failed``) with the headline and worst jobs as its message (``orchestration/states``).
    The jobs are async tasks awaited together on the night's event loop, each its own task
    run: a job in flight holds no thread. The flow itself stays sync for its callers.
    """
    logger = get_run_logger()
    settings = load_settings()
    catalogue = load_catalogue(catalog)
    night = parse_night(night) if night else tonight(flow_run.scheduled_start_time)
    run_path = Path(run_dir) if run_dir else run_dir_for(settings, night)
    run_path.mkdir(parents=True, exist_ok=True)
    started_at = _stamp()
    results: dict[str, JobOutcome] = {}
    logger.info("state folder %s, run folder %s", settings.state_dir, run_path)
    ledger = Ledger(settings.ledger_url(), catalogue.key)
    notifier = _notifier(catalogue, ledger, logger)
    try:
        # a deployment's tags are on the flow run only: jobs and chains carry them too
        with tags(*(flow_run.tags or [])):
            lease = Lease(ledger.engine, catalogue.key, ttl_s=settings.lease_ttl)
            with lease:
                summary = _run_night(
                    catalogue, only, night, run_path, ledger, settings, lease, results, notifier
                )
    except Exception as exc:
        # a night that ends early still says why, where a finished night says how it went
        reason = why(exc)
        labels = plan_night(catalogue, only).labels
        summary = join(
            [results.get(x) or not_run(catalogue, x, reason) for x in labels],
            started_at,
            _stamp(),
        )
        code = EXIT_LOCKED if isinstance(exc, LockHeldError) else summary.exit_code
        logger.warning("the night ended early: %s", reason)
        if not isinstance(exc, LockHeldError):  # a refused second night is not a bad night
            _night_end(notifier, summary, night, ledger, settings)
        report(
            run_path,
            summary,
            reason=reason,
            exit_code=code,
            page=_page(summary, catalogue, ledger, night, logger),
        )
        ledger.close()
        raise  # the CLI reads a LockHeldError from the flow run's result (exit 3)
    if (flow_run.run_count or 1) > 1:  # a retry of the night's flow run (the UI's Retry)
        summary = replace(summary, rerun=True)
    try:
        _night_end(notifier, summary, night, ledger, settings)
        # after Slack: the report says what Slack was told
        report(run_path, summary, page=_page(summary, catalogue, ledger, night, logger))
    finally:
        ledger.close()
    return night_result(summary)


def _page(
    summary: NightSummary, catalogue: Catalogue, ledger: Ledger, night: str, logger: Any
) -> dict[str, Any] | None:
    """The night report's fields; None (and a warning) when they cannot be read."""
    try:
        return gather_report(summary, catalogue, ledger, night)
    except Exception as exc:  # the report never changes the night's verdict
        logger.warning("the night report could not be gathered: %s: %s", type(exc).__name__, exc)
        return None


def _notifier(catalogue: Catalogue, ledger: Ledger, logger: Any) -> Notifier | None:
    """The catalogue's Slack notifier, its outbox in the ledger; None without ``notify:``."""
    if catalogue.notify is None:
        return None
    outbox = Outbox(ledger.engine)
    return Notifier(catalogue.notify, catalogue=catalogue.key, outbox=outbox, logger=logger)


def _night_end(
    notifier: Notifier | None,
    summary: NightSummary,
    night: str,
    ledger: Ledger,
    settings: Settings,
) -> None:
    """Slack (the ``notify`` task) and metrics; neither can change the night's verdict."""
    if notifier is not None:
        run_id = str(flow_run.id) if flow_run.id else None
        notify(notifier, summary, night, run_id, return_state=True)
    export_ledger_metrics(ledger.engine, settings, logger=get_run_logger())


def run_dir_for(settings: Settings, night: str) -> Path:
    """Where a night's summary and log tails go by default."""
    stamp = datetime.now(UTC).strftime("%H%M%S")
    return settings.state_dir / "runs" / night / f"{stamp}-{uuid.uuid4().hex[:6]}"


def _run_night(
    catalogue: Catalogue,
    only: list[str] | None,
    night: str,
    run_path: Path,
    ledger: Ledger,
    settings: Settings,
    lease: Lease,
    results: dict[str, JobOutcome],
    notifier: Notifier | None = None,
) -> NightSummary:
    logger = get_run_logger()
    started_at = _stamp()
    plan = plan_night(catalogue, only, expected_durations(catalogue, ledger))
    sinks: list[Sink] = [*LIVE_SINKS, ProgressSink(plan.labels), LogSink(logger)]
    if notifier is not None:
        sinks.append(NoticeSink(notifier))  # fallbacks, stuck queues, timeouts, as they happen
    parts = build_parts(
        catalogue,
        settings,
        ledger,
        sinks=sinks,
        logger=logger,
        # caps as Prefect global concurrency limits; both by this module's names, which a
        # test of the flow may swap
        slots=lambda caps: prefect_slots(
            caps, scope=limit_scope(catalogue), lease_s=slot_lease_s(settings.lease_ttl)
        ),
        admission=Admission,
    )
    if notifier is not None:
        parts.alerts = SlackAlertSink(notifier)  # dwell alerts into the night's Slack thread
    key = f"{night}:{uuid.uuid4().hex[:8]}"
    run_id = str(flow_run.id or key)
    with open_night(
        catalogue,
        parts,
        plan,
        night=night,
        run_id=run_id,
        run_dir=run_path,
        # a night whose lease ran out (taken, or not renewed in time) must not submit beside
        # the night that may hold it now, nor write to the ledger rows that night owns
        stop_reason=lambda watcher: _stop_reason(lease, watcher),
        owns_night=lambda: lease.lost_reason is None,
        outcomes=results,
    ) as ctx:
        pools = JobPools()
        kept = {r.label for r in ledger.jobs_of(night) if r.state == "succeeded" and r.external_id}
        NIGHTS[key] = Night(ctx, pools, kept)
        try:
            logger.info(
                "night %s: %d jobs, %d independent, %d chains",
                night,
                len(plan.labels),
                len(plan.independent),
                len(plan.chains),
            )
            with quiet_job_finish():
                _on_a_loop(_run_jobs(ctx, plan, key, pools))
        finally:
            NIGHTS.pop(key, None)
            pools.shutdown()
    return finish_night(ctx, plan, started_at)


async def _run_jobs(ctx: NightContext, plan: Plan, key: str, pools: JobPools) -> None:
    """Every job of the night as an async task run and every chain as an async subflow run,
    awaited together."""
    runner = with_retries(ctx)
    night = NIGHTS[key]

    async def job(label: str) -> None:
        ran = await job_task(night, label, runner)(label, key, return_state=True)
        await outcome_of(ctx, label, ran, pools)

    # one API client on this loop for every task run (else each task run makes its own)
    async with AsyncClientContext.get_or_create():
        chains = [chain(" → ".join(c), c, key, return_state=True) for c in plan.chains]
        await asyncio.gather(*(job(label) for label in plan.independent), *chains)


def _on_a_loop(work: Coroutine[Any, Any, None]) -> None:
    """Run ``work`` on an event loop of its own (the flow run's context goes with it); on a
    thread of its own if this one already runs a loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(work)
        return
    errors: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(work)
        except BaseException as exc:  # handed to the flow's thread
            errors.append(exc)

    context = contextvars.copy_context()
    thread = threading.Thread(target=context.run, args=(run,), name="night-loop")
    thread.start()
    thread.join()
    if errors:
        raise errors[0]


def _stop_reason(lease: Lease, watcher: Watcher) -> str | None:
    """Why no more jobs may be submitted tonight, if there is a reason."""
    if (lost := lease.lost_reason) is not None:
        return f"not submitted: {lost}"
    return watcher_stopped(watcher)


def _stamp() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
