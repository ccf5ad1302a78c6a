"""The nightly flow: plan, fan out, watch, join, report. Flows wire; tasks do.

Set up in ``orchestration/night_setup.py``, run in ``orchestration/night_run.py``, ended (in
the order that lets a stopped night go within seconds) in ``orchestration/night_end.py``.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import datetime
from typing import Any

from prefect import flow, get_run_logger, tags
from prefect.context import AsyncClientContext
from prefect.runtime import flow_run
from prefect.states import Cancelled, Failed, State
from prefect.utilities.annotations import quote

from nightshift.engine.outcomes import JobOutcome
from nightshift.engine.plan import Plan, which_night
from nightshift.engine.stopping import NightStop
from nightshift.flows.chain import chain, chain_run_name
from nightshift.loop import NightLoop
from nightshift.orchestration.artifact_tries import current_try
from nightshift.orchestration.cancel_hook import cancel_in_flight
from nightshift.orchestration.missed_nights import SKIPPED, check_missed, late_of, quiet_skip
from nightshift.orchestration.night_end import Ending, end_early, end_night
from nightshift.orchestration.night_loop import on_a_loop
from nightshift.orchestration.night_run import night_under_way
from nightshift.orchestration.night_setup import NightSetup, notifier_for, prepared_or_none, stamp
from nightshift.orchestration.running_night import Night
from nightshift.orchestration.states import end_said, name_the_night
from nightshift.store.lease import Lease
from nightshift.store.lease_owner import default_owner
from nightshift.tasks.jobs import chain_outcomes, job_task, outcome_of, with_retries
from nightshift.tasks.notify import notify

__all__ = ["night_run_name", "nightly"]


def night_run_name() -> str:
    """The run's name in the UI's lists: the night it runs (``night 2026-12-02``), not a random
    pair of words; the night as ``prepared_or_none`` works it out."""
    params = flow_run.parameters
    night = getattr(params.get("prepared"), "night", None) or params.get("night")
    try:
        return f"night {which_night(night, flow_run.scheduled_start_time)}"
    except ValueError:  # not a date: the run ends saying so; its name shows what was given
        return f"night {night}"


@flow(
    name="nightly",
    flow_run_name=night_run_name,
    on_failure=[name_the_night, end_said],  # an interrupted night is Failed too
    on_cancellation=[cancel_in_flight],
)
def nightly(
    catalog: str = "nightshift.yaml",
    only: list[str] | None = None,
    night: str | None = None,
    run_dir: str | None = None,
    live: Any = None,
    stop: Any = None,
    prepared: Any = None,
    scheduled: str | None = None,
    catalogue: str | None = None,
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
    ``prepared``, the ``PreparedNight`` its caller checked (``orchestration/prepared_night.py``;
    the parameters above are what it was prepared from); without one the run prepares its own.
    ``scheduled``: the slot a catch-up night was scheduled for (ISO), for its ``late`` line.
    ``catalogue``: the catalogue file, as the command line spells it (``catalog``, its earlier
    name, is the same parameter for deployments made before; ``catalogue`` wins).
    """
    logger = get_run_logger()
    catalog = (
        catalogue or catalog
    )  # `catalogue` as the CLI spells it; `catalog` kept for old deployments
    if prepared is None:
        start = flow_run.scheduled_start_time
        prepared = prepared_or_none(catalog, only, night, run_dir, start, logger)
        if prepared is None:
            return [Failed(message="invalid catalogue: nothing was run")]
    notifier = notifier_for(prepared.catalogue, prepared.ledger, logger)
    # a run its schedule made: the earlier nights it finds missed are run first, or named
    missed = check_missed(prepared, catalog, notifier, logger)
    if missed is not None:
        _catch_up(catalog, only, missed, missed.first, logger)
        if not missed.runs_own:
            prepared.close()
            _catch_up(catalog, only, missed, missed.after, logger)
            quiet_skip()  # no "unexpected exception" traceback under the night's own words
            return Cancelled(name=SKIPPED, message=f"night {prepared.night} not run: {missed.why}")
    slot = _slot(scheduled, missed, prepared.night)
    state = _own_night(prepared, notifier, live, stop, logger, slot)
    if missed is not None:
        _catch_up(catalog, only, missed, missed.after, logger)
    return state


def _slot(scheduled: str | None, missed: Any, night: str) -> datetime | None:
    """When the night was due: a catch-up's slot, its schedule's, else the run's start."""
    if scheduled:
        try:
            return datetime.fromisoformat(scheduled)
        except ValueError:  # only for the late line: the night runs all the same
            return None
    if missed is not None and night in missed.slots:
        return missed.slots[night]  # type: ignore[no-any-return]
    return flow_run.scheduled_start_time  # type: ignore[no-any-return]


def _catch_up(
    catalog: str, only: list[str] | None, missed: Any, nights: list[str], logger: Any
) -> None:
    """Each missed night in turn, as a nightly subflow run of its own (its lease, ledger rows,
    spend cap, report and verdict); one that fails does not stop the next."""
    for k, night in enumerate(nights, 1):
        logger.info("missed night %d of %d: %s", k, len(nights), night)
        slot = missed.slots.get(night)
        try:
            state = nightly(
                catalog=catalog,
                only=only,
                night=night,
                scheduled=None if slot is None else slot.isoformat(),
                return_state=True,
            )
        except Exception as exc:  # its subflow run could not even start: the next night can
            logger.error("missed night %s not run: %s: %s", night, type(exc).__name__, exc)
            continue
        logger.info("missed night %s: %s", night, getattr(state, "name", state))


def _own_night(
    prepared: Any, notifier: Any, live: Any, stop: Any, logger: Any, slot: datetime | None
) -> State | list[State]:
    """The run's own night: fanned out, watched and joined under its lease."""
    prepared.run_path.mkdir(parents=True, exist_ok=True)
    started_at = stamp()
    results: dict[str, JobOutcome] = {}
    logger.info("state folder %s, run folder %s", prepared.settings.state_dir, prepared.run_path)
    stop = stop if stop is not None else NightStop()
    setup = NightSetup(prepared, stop, notifier, logger)
    with NightLoop() as loop:  # the night's one event loop, until its end is posted
        try:
            # a deployment's tags are on the flow run only: jobs and chains carry them too
            with tags(*(flow_run.tags or [])):
                # the owner names the flow run too: `nightshift status` shows it
                owner = default_owner(str(flow_run.id) if flow_run.id else None)
                key, ttl = prepared.catalogue.key, prepared.settings.lease_ttl
                with Lease(prepared.ledger.engine, key, owner=owner, ttl_s=ttl, loop=loop) as lease:
                    live_sinks = [live] if live is not None else []
                    with night_under_way(setup, lease, results, live_sinks, loop) as running:
                        on_a_loop(loop, _run_jobs(running.night, running.plan), stop)
                    summary, progress = running.summary, running.progress
                    assert summary is not None  # joined on the way out
        except Exception as exc:
            with end_early(setup, exc, results, started_at) as ending:
                _tell(ending)
            raise  # the CLI reads a LockHeldError from the flow run's result (exit 3)
        # a night that ran late says so: its slot, its start, the nights missed before it
        summary = replace(summary, late=late_of(prepared, slot, summary.started_at))
        with end_night(setup, summary, progress) as ending:
            _tell(ending)
        assert ending.state is not None  # set once the end is over
        return ending.state


def _tell(ending: Ending) -> None:
    """Slack's digest of the night, by the ``notify`` task (its own bar on the timeline)."""
    if (tell := ending.tell) is not None:
        notify(tell.notifier, tell.summary, tell.night, tell.run_id, tell.slow, return_state=True)


async def _run_jobs(night: Night, plan: Plan) -> None:
    """Every job of the night as an async task run and every chain as an async subflow run,
    awaited together; the night handed to each, quoted (Prefect does not walk into it). A job
    whose run raised is settled here: every job's outcome is then the night's."""
    ctx, runner = night.ctx, with_retries(night.ctx)

    async def job(label: str) -> list[JobOutcome]:
        ran = await job_task(night, label, runner)
        return [await outcome_of(ctx, label, ran)]

    async def steps(labels: list[str]) -> list[JobOutcome]:
        name = chain_run_name(ctx.night, labels, current_try())
        ran = await chain(name, labels, quote(night), return_state=True)
        return await chain_outcomes(ctx, labels, ran)

    # one API client on this loop for every task run (else each task run makes its own)
    async with AsyncClientContext.get_or_create():
        await asyncio.gather(*map(job, plan.independent), *map(steps, plan.chains))
