"""A night under Prefect, from its prepared plan to its summary: its parts (Prefect's concurrency
slots, Slack, the sinks), the lease's guards, its jobs on an event loop of their own.

The fan-out of the jobs into task runs and chain subflow runs is the flow's (``flows/nightly.py``,
a layer up), handed in as ``run_jobs``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from prefect import get_run_logger
from prefect.runtime import flow_run

from nightshift.engine.admission import Admission
from nightshift.engine.alerts import NoAlertSink
from nightshift.engine.context import utcnow
from nightshift.engine.dwell_watch import incident_desk
from nightshift.engine.events import Consumer, LogSink, Sink
from nightshift.engine.night import NightId, NightParts, build_parts, finish_night, open_night
from nightshift.engine.outcomes import JobOutcome, NightSummary
from nightshift.engine.plan import Plan
from nightshift.engine.steps import JobPools
from nightshift.loop import NightLoop
from nightshift.notify.notifier import SlackAlertSink
from nightshift.notify.sinks import IncidentSink, NoticeSink
from nightshift.orchestration.artifact_tries import supersede_earlier_tries
from nightshift.orchestration.leases import slot_lease_s
from nightshift.orchestration.limits import limit_scope, night_slots
from nightshift.orchestration.night_forecast import forecast_at_start
from nightshift.orchestration.night_loop import on_a_loop
from nightshift.orchestration.night_setup import NightSetup, stamp, stop_reason
from nightshift.orchestration.progress import ProgressSink
from nightshift.orchestration.running_night import Night
from nightshift.orchestration.states import quiet_job_finish
from nightshift.store.lease import Lease
from nightshift.store.slot_holders import SlotHolders
from nightshift.tracing.night import begin_trace, budget_of, end_trace

__all__ = ["RunJobs", "run_night"]

# the night's jobs as Prefect runs, awaited together, for their outcomes by label (the flow's:
# it knows its tasks and chains)
RunJobs = Callable[[Night, Plan], Coroutine[Any, Any, Mapping[str, JobOutcome]]]


def run_night(
    setup: NightSetup,
    lease: Lease,
    results: dict[str, JobOutcome],
    live: list[Sink],
    run_jobs: RunJobs,
    loop: NightLoop,
) -> tuple[NightSummary, ProgressSink]:
    """Fan out the prepared plan, watch, join the outcomes ``run_jobs`` gathers: the night's
    summary and its progress sink. ``results`` fills with each job's outcome as it comes (a
    night that ends early still says them). The night runs on ``loop``, which the caller closes
    once the night's end has posted its progress."""
    prepared = setup.prepared
    catalogue, ledger, night, plan = (
        prepared.catalogue,
        prepared.ledger,
        prepared.night,
        prepared.plan,
    )
    logger = get_run_logger()
    started_at = stamp()
    run_id = str(flow_run.id or f"{night}:{uuid.uuid4().hex[:8]}")
    kept = {r.label for r in ledger.jobs_of(night) if r.state == "succeeded" and r.external_id}
    # a retry: the earlier tries' pages say they are superseded, before this try's come
    supersede_earlier_tries()
    # the run's first artifact; its budgets are the ones the night then watches with
    budgets = forecast_at_start(prepared, run_id, logger, kept=kept)
    progress = ProgressSink(plan.labels, loop)
    parts = _parts(setup, lease, [*live, progress, LogSink(logger)], logger, loop)
    if budgets is not None:
        parts.budgets = lambda _ledger, _now, _min_samples: budgets
    tracing = begin_trace(
        os.environ,
        ledger=ledger,
        night=night,
        run_id=run_id,
        chains=plan.chains,
        loop=loop,
        now=utcnow(),
        logger=logger,
        budget=budget_of(budgets, catalogue),
    )
    if tracing is not None:  # its spans from the night's events; its tries hand theirs on
        parts.sinks.append(tracing)
        parts.trace = tracing.trace
    notifier = setup.notifier
    if notifier is not None:  # in-night messages posted by one sender thread, in order
        notifier.sending_from(loop.blocking("slack", 1))
    try:
        with open_night(
            catalogue,
            parts,
            plan,
            NightId(night, run_id, prepared.run_path),
            outcomes=results,
            stop=setup.stop,
        ) as ctx:
            pools = JobPools(ctx.loop)
            logger.info("night %s: %s", night, plan.describe())
            with quiet_job_finish():
                jobs = run_jobs(Night(ctx, pools, kept), plan)
                outcomes = on_a_loop(ctx.loop, jobs, setup.stop)
        summary = finish_night(ctx, plan, started_at, outcomes)
    finally:
        if notifier is not None:  # what was handed to it posted before the night's digest
            notifier.sending_from(None)
        if tracing is not None:  # the night's span, interrupted or not, and its chains'
            how = "interrupted" if setup.stop.requested else None
            try:
                end_trace(tracing, ledger, night, utcnow(), how)
            except Exception as exc:  # tracing never changes the night's verdict
                logger.warning("tracing: the night's spans could not be ended: %s", exc)
    return summary, progress


def _parts(
    setup: NightSetup, lease: Lease, sinks: list[Sink], logger: Any, loop: NightLoop
) -> NightParts:
    """The engine's parts of a night under Prefect: its caps as Prefect's concurrency limits,
    its notices and alert levels to Slack, the lease's rule for submits and ledger rows."""
    prepared, notifier = setup.prepared, setup.notifier
    catalogue, settings, ledger = prepared.catalogue, prepared.settings, prepared.ledger
    desk = incident_desk(catalogue)  # tonight's incidents: a job's end in one is said there
    if notifier is not None:
        # fallbacks, stuck queues, timeouts, as they happen; incidents, in a thread each
        # (each writes the outbox before its post: a consumer of the loop, off it, in order)
        notices: list[Sink] = [NoticeSink(notifier, grouped=desk.grouped), IncidentSink(notifier)]
        sinks += [Consumer(sink, loop, "nightshift-notices") for sink in notices]
    parts = build_parts(
        catalogue,
        settings,
        ledger,
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
            loop,
        ),
        admission=Admission,
        loop=loop,
    )
    parts.sinks = sinks
    parts.incidents = desk
    # dwell levels into the night's Slack thread; the LogSink in ``sinks`` logs each level once
    parts.alerts = SlackAlertSink(notifier) if notifier is not None else NoAlertSink()
    # a night whose lease ran out (taken, or not renewed in time) must not submit beside
    # the night that may hold it now, nor write to the ledger rows that night owns
    parts.stop_reason = lambda watcher: stop_reason(lease, watcher)
    parts.owns_night = lambda: lease.lost_reason is None
    return parts
