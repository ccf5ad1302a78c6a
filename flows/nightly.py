"""The nightly flow: plan, fan out, watch, join, report. Flows wire; tasks do."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, tags
from prefect.context import AsyncClientContext
from prefect.runtime import flow_run
from prefect.states import Failed, State
from prefect.utilities.annotations import quote

from flows.chain import chain
from nightshift.config.settings import load_settings
from nightshift.engine.admission import Admission
from nightshift.engine.alerts import NoAlertSink
from nightshift.engine.events import LogSink, Sink
from nightshift.engine.night import build_parts, expected_durations, finish_night, open_night
from nightshift.engine.outcomes import JobOutcome, NightSummary
from nightshift.engine.plan import Plan, parse_night, plan_night, tonight
from nightshift.engine.steps import JobPools
from nightshift.engine.stopping import NightStop
from nightshift.notify.notifier import SlackAlertSink
from nightshift.notify.sinks import NoticeSink
from nightshift.orchestration.cancel_hook import cancel_in_flight
from nightshift.orchestration.leases import slot_lease_s
from nightshift.orchestration.limits import limit_scope, night_slots
from nightshift.orchestration.night_end import NightEnd, end_early, end_night
from nightshift.orchestration.night_loop import on_a_loop
from nightshift.orchestration.night_setup import (
    catalogue_or_none,
    notifier_for,
    run_dir_for,
    stamp,
    stop_reason,
)
from nightshift.orchestration.progress import ProgressSink
from nightshift.orchestration.running_night import Night
from nightshift.orchestration.states import name_the_night, quiet_job_finish
from nightshift.store.lease import Lease, default_owner
from nightshift.store.ledger import Ledger
from nightshift.store.slot_holders import SlotHolders
from tasks.jobs import job_task, outcome_of, with_retries
from tasks.notify import notify

__all__ = ["nightly"]


@flow(name="nightly", on_failure=[name_the_night], on_cancellation=[cancel_in_flight])
def nightly(
    catalog: str = "nightshift.yaml",
    only: list[str] | None = None,
    night: str | None = None,
    run_dir: str | None = None,
    live: Any = None,
    stop: Any = None,
) -> State | list[State]:
    """One night of the catalogue: Completed only when every job succeeded.

    A night that did not fully succeed ends Failed, named by its verdict (``Partial`` or
    ``Failed``) with the headline and worst jobs as its message (``orchestration/states``).
    The jobs are async tasks awaited together on the night's event loop, each its own task
    run: a job in flight holds no thread. The flow itself stays sync for its callers.

    Handed in by code (the local CLI, a test), not deployment parameters (typed Any for
    Prefect's schema): ``live``, a ``Sink`` of the night's events (the CLI's live table);
    ``stop``, a ``NightStop`` the caller's Ctrl-C/SIGTERM requests, which says when the night
    is over (summary written, lease given back). Without one the night makes its own.
    """
    logger = get_run_logger()
    settings = load_settings()
    if (catalogue := catalogue_or_none(catalog, logger)) is None:
        return [Failed(message="invalid catalogue: nothing was run")]
    night = parse_night(night) if night else tonight(flow_run.scheduled_start_time)
    run_path = Path(run_dir) if run_dir else run_dir_for(settings, night)
    run_path.mkdir(parents=True, exist_ok=True)
    started_at = stamp()
    results: dict[str, JobOutcome] = {}
    logger.info("state folder %s, run folder %s", settings.state_dir, run_path)
    ledger = Ledger(settings.ledger_url(), catalogue.key)
    notifier = notifier_for(catalogue, ledger, logger)
    stop = stop if stop is not None else NightStop()
    end = NightEnd(catalogue, settings, ledger, night, run_path, stop, notifier, notify, logger)
    sinks: list[Sink] = [live] if live is not None else []
    try:
        # a deployment's tags are on the flow run only: jobs and chains carry them too
        with tags(*(flow_run.tags or [])):
            # the owner names the flow run too: `nightshift status` shows it
            owner = default_owner() + (f":{flow_run.id}" if flow_run.id else "")
            lease = Lease(ledger.engine, catalogue.key, owner=owner, ttl_s=settings.lease_ttl)
            with lease:
                summary, progress = _run_night(end, only, lease, results, sinks)
    except Exception as exc:
        end_early(end, exc, only, results, started_at)
        raise  # the CLI reads a LockHeldError from the flow run's result (exit 3)
    return end_night(end, summary, progress)


def _run_night(
    end: NightEnd,
    only: list[str] | None,
    lease: Lease,
    results: dict[str, JobOutcome],
    live: list[Sink],
) -> tuple[NightSummary, ProgressSink]:
    """Plan, fan out, watch, join: the night's summary and its progress sink."""
    catalogue, settings, ledger, notifier = end.catalogue, end.settings, end.ledger, end.notifier
    night = end.night
    logger = get_run_logger()
    started_at = stamp()
    plan = plan_night(catalogue, only, expected_durations(catalogue, ledger))
    progress = ProgressSink(plan.labels)
    sinks: list[Sink] = [*live, progress, LogSink(logger)]
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
    run_id = str(flow_run.id or f"{night}:{uuid.uuid4().hex[:8]}")
    with open_night(
        catalogue,
        parts,
        plan,
        night=night,
        run_id=run_id,
        run_dir=end.run_path,
        # a night whose lease ran out (taken, or not renewed in time) must not submit beside
        # the night that may hold it now, nor write to the ledger rows that night owns
        stop_reason=lambda watcher: stop_reason(lease, watcher),
        owns_night=lambda: lease.lost_reason is None,
        outcomes=results,
        stop=end.stop,
    ) as ctx:
        pools = JobPools()
        kept = {r.label for r in ledger.jobs_of(night) if r.state == "succeeded" and r.external_id}
        running = Night(ctx, pools, kept)
        try:
            logger.info(
                "night %s: %d jobs, %d independent, %d chains",
                night,
                len(plan.labels),
                len(plan.independent),
                len(plan.chains),
            )
            with quiet_job_finish():
                on_a_loop(_run_jobs(running, plan), end.stop)
        finally:
            pools.shutdown()
    return finish_night(ctx, plan, started_at), progress


async def _run_jobs(night: Night, plan: Plan) -> None:
    """Every job of the night as an async task run and every chain as an async subflow run,
    awaited together; the night handed to each, quoted (Prefect does not walk into it)."""
    runner = with_retries(night.ctx)

    async def job(label: str) -> None:
        ran = await job_task(night, label, runner)
        await outcome_of(night.ctx, label, ran, night.pools)

    # one API client on this loop for every task run (else each task run makes its own)
    async with AsyncClientContext.get_or_create():
        chains = [chain(" → ".join(c), c, quote(night), return_state=True) for c in plan.chains]
        await asyncio.gather(*(job(label) for label in plan.independent), *chains)
