"""The nightly flow: plan, fan out, watch, join, report. Flows wire; tasks do."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import uuid
from collections.abc import Coroutine
from contextvars import ContextVar
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, tags
from prefect.context import AsyncClientContext
from prefect.logging.loggers import flow_run_logger
from prefect.runtime import flow_run
from prefect.states import Failed, State

from flows.chain import chain
from nightshift.config.catalogue import Catalogue
from nightshift.config.loader import load_catalogue
from nightshift.config.settings import Settings, load_settings
from nightshift.engine.admission import Admission
from nightshift.engine.alerts import NoAlertSink
from nightshift.engine.cancelling import cancel_night
from nightshift.engine.context import NightContext
from nightshift.engine.events import LogSink, Sink
from nightshift.engine.night import (
    build_parts,
    expected_durations,
    finish_night,
    open_night,
    watcher_stopped,
)
from nightshift.engine.outcomes import JobOutcome, NightSummary, Outcome, join
from nightshift.engine.plan import Plan, parse_night, plan_night, tonight
from nightshift.engine.steps import JobPools
from nightshift.engine.stopping import INTERRUPTED, NightStop
from nightshift.engine.watcher import Watcher
from nightshift.errors import CatalogueError, LockHeldError
from nightshift.metrics.export import export_ledger_metrics
from nightshift.notify.notifier import Notifier, SlackAlertSink
from nightshift.notify.sinks import NoticeSink
from nightshift.orchestration.leases import slot_lease_s
from nightshift.orchestration.limits import limit_scope, night_slots
from nightshift.orchestration.progress import ProgressSink
from nightshift.orchestration.report import not_run, report, why
from nightshift.orchestration.report_inputs import gather_report
from nightshift.orchestration.states import name_the_night, night_result, quiet_job_finish
from nightshift.store.lease import Lease, default_owner
from nightshift.store.ledger import Ledger
from nightshift.store.outbox import Outbox
from nightshift.store.slot_holders import SlotHolders
from tasks.jobs import NIGHTS, Night, job_task, outcome_of, with_retries
from tasks.notify import notify

__all__ = ["LIVE_SINKS", "NIGHT_STOP", "cancel_in_flight", "nightly", "run_dir_for"]

# the local CLI adds its live table here: a sink of the night's events
LIVE_SINKS: list[Sink] = []
# the local CLI's Ctrl-C/SIGTERM: the night stops submitting and watching, and says when it
# is over (summary written, lease given back); without one the night makes its own
NIGHT_STOP: ContextVar[NightStop | None] = ContextVar("nightshift_night_stop", default=None)
EXIT_LOCKED = 3  # as the CLI's: another night of the catalogue holds its lease
PROGRESS_FLUSH_S = 2.0
STOP_GRACE_S = 3.0  # a signalled night's jobs let go of, before the signal goes on


def cancel_in_flight(flow: Any, flow_run: Any, state: State) -> None:  # Prefect's names
    """``on_cancellation`` (the UI's Cancel): the night's external jobs still in flight are
    cancelled (they cost money), from the ledger, whatever became of the night's process."""
    run = flow_run  # the FlowRun handed in, not prefect.runtime's
    logger = flow_run_logger(run, flow)
    params = run.parameters or {}
    settings = load_settings()
    catalogue = load_catalogue(params.get("catalog") or "nightshift.yaml")
    night = params.get("night")
    night = parse_night(night) if night else tonight(run.expected_start_time)
    reason = f"cancelled in Prefect: flow run {run.name} was cancelled"
    ledger = Ledger(settings.ledger_url(), catalogue.key)
    try:
        done = cancel_night(
            catalogue, settings, ledger, night, only=params.get("only"), reason=reason
        )
    finally:
        ledger.close()
    for job in done.jobs:
        what = f"not cancelled: {job.error}" if job.error else "cancelled"
        logger.warning("%s (%s %s): %s", job.label, job.backend, job.external_id, what)


@flow(name="nightly", on_failure=[name_the_night], on_cancellation=[cancel_in_flight])
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
    if (catalogue := _catalogue_or_none(catalog, logger)) is None:
        return [Failed(message="invalid catalogue: nothing was run")]
    night = parse_night(night) if night else tonight(flow_run.scheduled_start_time)
    run_path = Path(run_dir) if run_dir else run_dir_for(settings, night)
    run_path.mkdir(parents=True, exist_ok=True)
    started_at = _stamp()
    results: dict[str, JobOutcome] = {}
    logger.info("state folder %s, run folder %s", settings.state_dir, run_path)
    ledger = Ledger(settings.ledger_url(), catalogue.key)
    notifier = _notifier(catalogue, ledger, logger)
    stop = NIGHT_STOP.get() or NightStop()
    try:
        # a deployment's tags are on the flow run only: jobs and chains carry them too
        with tags(*(flow_run.tags or [])):
            # the owner names the flow run too: `nightshift status` shows it
            owner = default_owner() + (f":{flow_run.id}" if flow_run.id else "")
            lease = Lease(ledger.engine, catalogue.key, owner=owner, ttl_s=settings.lease_ttl)
            with lease:
                summary, progress = _run_night(
                    catalogue,
                    only,
                    night,
                    run_path,
                    ledger,
                    settings,
                    lease,
                    results,
                    stop,
                    notifier,
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
        report(run_path, summary, reason=reason, exit_code=code, publish=False)
        logger.warning("the night ended early: %s", reason)
        page = None
        try:
            if not isinstance(exc, LockHeldError):  # a refused second night is not a bad night
                _night_end(notifier, summary, night, ledger, settings)
            page = _page(summary, catalogue, ledger, night, logger)
        finally:
            ledger.close()
            stop.over.set()
        report(run_path, summary, reason=reason, exit_code=code, page=page)
        raise  # the CLI reads a LockHeldError from the flow run's result (exit 3)
    if (flow_run.run_count or 1) > 1:  # a retry of the night's flow run (the UI's Retry)
        summary = replace(summary, rerun=True)
    # summary.json first: what follows may wait on the Prefect API, which may be gone
    ended: str | None = None
    stopped_code: int | None = None
    if stop.requested:
        left = [o for o in summary.jobs if o.state is Outcome.LEFT_RUNNING]
        ended, stopped_code = INTERRUPTED, stop.exit_code
        logger.warning("interrupted: %d job(s) left running, a rerun re-attaches", len(left))
    report(run_path, summary, reason=ended, exit_code=stopped_code, publish=False)
    page = None
    try:
        if not stop.requested:  # an interrupted night has no verdict to send
            _night_end(notifier, summary, night, ledger, settings)
        # after Slack: the report says what Slack was told
        page = _page(summary, catalogue, ledger, night, logger)
    finally:
        ledger.close()
        stop.over.set()
    if not stop.requested:  # the UI's progress reaches its end (bounded: the API may be gone)
        progress.flush(timeout=PROGRESS_FLUSH_S)
    report(run_path, summary, reason=ended, exit_code=stopped_code, page=page)
    if stop.requested:
        return Failed(name="Interrupted", message=f"{ended}: {summary.headline()}")
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


def _catalogue_or_none(catalog: str, logger: Any) -> Catalogue | None:
    """The catalogue, or None after one ERROR line naming its absolute path (no traceback)."""
    try:
        # a deployed run reads it from the folder it was deployed from: say which file that is
        return load_catalogue(Path(catalog).absolute())
    except CatalogueError as exc:
        logger.error("%s", exc.one_line())
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
    stop: NightStop,
    notifier: Notifier | None = None,
) -> tuple[NightSummary, ProgressSink]:
    logger = get_run_logger()
    started_at = _stamp()
    plan = plan_night(catalogue, only, expected_durations(catalogue, ledger))
    progress = ProgressSink(plan.labels)
    sinks: list[Sink] = [*LIVE_SINKS, progress, LogSink(logger)]
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
        # each slot lease written down with this night's lease owner: the next night gives
        # back the slots of a night killed holding them (store/slot_holders.py)
        slots=lambda caps: night_slots(
            caps,
            limit_scope(catalogue),
            slot_lease_s(settings.lease_ttl),
            lambda server: SlotHolders(ledger.engine, lease.owner, catalogue.key, server),
        ),
        admission=Admission,
    )
    # dwell levels into the night's Slack thread; the LogSink above logs each level once
    parts.alerts = SlackAlertSink(notifier) if notifier is not None else NoAlertSink()
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
        stop=stop,
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
                _on_a_loop(_run_jobs(ctx, plan, key, pools), stop)
        finally:
            NIGHTS.pop(key, None)
            pools.shutdown()
    return finish_night(ctx, plan, started_at), progress


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


def _on_a_loop(work: Coroutine[Any, Any, None], stop: NightStop) -> None:
    """Run ``work`` on an event loop of its own, on a thread of its own (the flow run's context
    goes with it). A signal raised on this thread while it waits (a worker's SIGTERM when the
    run is cancelled, a Ctrl-C) stops the night first: its jobs are let go, nothing more is
    submitted or written, then the signal goes on (the cancel hook cancels the jobs)."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(work)
        except BaseException as exc:  # handed to the flow's thread
            errors.append(exc)

    context = contextvars.copy_context()
    thread = threading.Thread(target=context.run, args=(run,), name="night-loop", daemon=True)
    thread.start()
    try:
        thread.join()
    except BaseException:
        stop.request(INTERRUPTED, 143)
        thread.join(STOP_GRACE_S)
        raise
    if errors:
        raise errors[0]


def _stop_reason(lease: Lease, watcher: Watcher) -> str | None:
    """Why no more jobs may be submitted tonight, if there is a reason."""
    if (lost := lease.lost_reason) is not None:
        return f"not submitted: {lost}"
    return watcher_stopped(watcher)


def _stamp() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
