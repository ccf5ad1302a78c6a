"""A night under Prefect, from its prepared plan to its summary: its parts (Prefect's concurrency
slots, Slack, the sinks), the lease's guards, its jobs on an event loop of their own.

The fan-out of the jobs into task runs and chain subflow runs is the flow's (``flows/nightly.py``,
a layer up): it runs them inside ``night_under_way``, which hands it the running night and joins
it once they are done. Nothing here calls back up into the flow.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from prefect import get_run_logger
from prefect.runtime import flow_run

from nightshift.budgets.lookup import Budgets
from nightshift.engine.admission import Admission
from nightshift.engine.alerts import NoAlertSink
from nightshift.engine.context import utcnow
from nightshift.engine.dwell_watch import incident_desk
from nightshift.engine.events import Consumer, LogSink, Sink
from nightshift.engine.night import (
    GivenParts,
    NightId,
    NightParts,
    build_parts,
    finish_night,
    open_night,
)
from nightshift.engine.outcomes import JobOutcome, NightSummary
from nightshift.engine.plan import Plan
from nightshift.engine.steps import JobPools
from nightshift.loop import NightLoop
from nightshift.notify.notifier import SlackAlertSink
from nightshift.notify.sinks import IncidentSink, NoticeSink
from nightshift.orchestration.artifact_tries import supersede_earlier_tries
from nightshift.orchestration.leases import slot_lease_s
from nightshift.orchestration.limits import limit_scope, night_slots
from nightshift.orchestration.night_forecast import forecast_at_start, night_budgets
from nightshift.orchestration.night_setup import NightSetup, stamp, stop_reason
from nightshift.orchestration.progress import ProgressSink
from nightshift.orchestration.running_night import Night
from nightshift.orchestration.states import quiet_job_finish
from nightshift.store.lease import Lease
from nightshift.store.slot_holders import SlotHolders
from nightshift.tracing.night import begin_trace, budget_of, end_trace
from nightshift.tracing.sink import TraceSink

__all__ = ["UnderWay", "night_under_way"]


class UnderWay:
    """A night under way, as its flow sees it: the running night and its plan to fan out; once
    its ``with`` block ended, its ``summary`` (the jobs joined) and its ``progress`` sink."""

    def __init__(self, night: Night, plan: Plan, progress: ProgressSink) -> None:
        self.night, self.plan, self.progress = night, plan, progress
        self.summary: NightSummary | None = None


@contextmanager
def night_under_way(
    setup: NightSetup,
    lease: Lease,
    results: dict[str, JobOutcome],
    live: list[Sink],
    loop: NightLoop,
) -> Iterator[UnderWay]:
    """The prepared night opened: its forecast made, its parts built, its watch begun; the
    flow fans its jobs out inside the block, and on the way out they are joined
    (``UnderWay.summary``). ``results`` fills with each job's outcome as it comes (a night
    that ends early still says them). The night runs on ``loop``, which the caller closes
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
    # the budgets the night watches with, read once; its forecast from them, the run's first
    # artifact
    budgets = night_budgets(prepared, logger)
    forecast_at_start(prepared, budgets, run_id, logger, kept=kept)
    progress = ProgressSink(plan.labels, loop)
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
    sinks: list[Sink] = [*live, progress, LogSink(logger)]
    if tracing is not None:  # its spans from the night's events; its tries hand theirs on
        sinks.append(tracing)
    parts = _parts(setup, lease, sinks, logger, loop, budgets, tracing)
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
            under_way = UnderWay(Night(ctx, pools, kept), plan, progress)
            with quiet_job_finish():
                yield under_way
        under_way.summary = finish_night(ctx, plan, started_at)
    finally:
        if notifier is not None:  # what was handed to it posted before the night's digest
            notifier.sending_from(None)
        if tracing is not None:  # the night's span, interrupted or not, and its chains'
            how = "interrupted" if setup.stop.requested else None
            try:
                end_trace(tracing, ledger, night, utcnow(), how)
            except Exception as exc:  # tracing never changes the night's verdict
                logger.warning("tracing: the night's spans could not be ended: %s", exc)


def _parts(
    setup: NightSetup,
    lease: Lease,
    sinks: list[Sink],
    logger: Any,
    loop: NightLoop,
    budgets: Budgets | None,
    tracing: TraceSink | None,
) -> NightParts:
    """The engine's parts of a night under Prefect: its caps as Prefect's concurrency limits,
    its notices and alert levels to Slack, the lease's rule for submits and ledger rows, the
    budgets read at its start (None: the dwell watch reads them), its trace."""
    prepared, notifier = setup.prepared, setup.notifier
    catalogue, settings, ledger = prepared.catalogue, prepared.settings, prepared.ledger
    desk = incident_desk(catalogue)  # tonight's incidents: a job's end in one is said there
    if notifier is not None:
        # fallbacks, stuck queues, timeouts, as they happen; incidents, in a thread each
        # (each writes the outbox before its post: a consumer of the loop, off it, in order)
        notices: list[Sink] = [NoticeSink(notifier, grouped=desk.grouped), IncidentSink(notifier)]
        sinks += [Consumer(sink, loop, "nightshift-notices") for sink in notices]
    given: GivenParts = {
        "sinks": sinks,
        "incidents": desk,
        # dwell levels into the night's Slack thread; the LogSink in ``sinks`` logs each once
        "alerts": SlackAlertSink(notifier) if notifier is not None else NoAlertSink(),
        # a night whose lease ran out (taken, or not renewed in time) must not submit beside
        # the night that may hold it now, nor write to the ledger rows that night owns
        "stop_reason": lambda watcher: stop_reason(lease, watcher),
        "owns_night": lambda: lease.lost_reason is None,
        "trace": tracing.trace if tracing is not None else None,
    }
    if budgets is not None:  # read once at the start: the dwell watch reads no others
        given["budgets"] = lambda _ledger, _now, _min_samples: budgets
    return build_parts(
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
        **given,
    )
