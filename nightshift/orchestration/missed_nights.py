"""The nightly run's missed-night check, before its night starts: the schedule's nights due
(its deployment's cron schedules, and its other runs still waiting), what ``defaults.missed``
decides (``engine/missed.py``), and the nights newly named missed, in one alert.

Only the first try of a run the schedule made is checked: a retry, a run by hand, a catch-up
night and the local CLI run the night they were asked for.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from nightshift.engine.missed import (
    LOOKBACK,
    MissedDecision,
    crons_nights,
    decide,
    due_nights,
    late_line,
    missed_message,
)
from nightshift.engine.plan import tonight
from nightshift.notify.notifier import Notifier
from nightshift.orchestration.prepared_night import PreparedNight
from nightshift.store.alert_log import AlertLog
from nightshift.store.missed_nights import MissedNight, MissedNights
from nightshift.store.night_reads import first_night, named_fates, nights_run
from nightshift.watchdog.checks import missed_findings

__all__ = [
    "SKIPPED",
    "check_missed",
    "late_of",
    "missed_fates",
    "quiet_skip",
    "scheduled_nights",
]


SKIPPED = "Skipped"  # the state of a run whose night the policy does not run (Cancelled type)
_ENGINE_ERROR = "Engine execution exited with unexpected exception"


class _QuietSkip(logging.Filter):
    """Drops Prefect's ERROR and traceback for a run ended Skipped on purpose: Prefect raises
    any final state but Completed, and logs it as an unexpected exception in the run's logs."""

    def filter(self, record: logging.LogRecord) -> bool:
        from prefect.exceptions import CancelledRun

        if record.getMessage() != _ENGINE_ERROR or not record.exc_info:
            return True
        error = record.exc_info[1]
        return not (isinstance(error, CancelledRun) and " not run: " in str(error))


def quiet_skip() -> None:
    """Keep the run's logs of a night not run to what the night said (once per process)."""
    flow_runs = logging.getLogger("prefect.flow_runs")
    if not any(isinstance(f, _QuietSkip) for f in flow_runs.filters):
        flow_runs.addFilter(_QuietSkip())


def scheduled_nights(
    now: datetime, logger: Any
) -> tuple[dict[str, datetime], dict[str, datetime]] | None:
    """The nights due by ``now`` of this flow run's deployment -> their slots: by its cron
    schedules since they were made, and by its runs at their slots (late, waiting, or run);
    None when the run is not the first try of a run of its schedule (made by Prefect's
    scheduler, or at one of its slots), or has no deployment."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterId,
        FlowRunFilter,
        FlowRunFilterExpectedStartTime,
    )
    from prefect.context import FlowRunContext

    # the run as the engine loaded it: the CLI's nights and catch-up subflows (no deployment)
    # and retries cost no API call
    context = FlowRunContext.get()
    run = context.flow_run if context is not None else None
    if run is None or run.deployment_id is None or (run.run_count or 1) > 1:
        return None
    with get_client(sync_client=True) as client:
        made = client.read_deployment(run.deployment_id)
        slots = _cron_nights(made, now, logger)
        runs: dict[str, datetime] = {}
        if not _of_the_schedule(run, slots):
            return None  # a run by hand: it runs the night it was asked for
        # the deployment's runs of the last month, whatever their state: those of its
        # schedule say which nights were due (a night that ran, or waits for its turn)
        others = client.read_flow_runs(
            deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[run.deployment_id])),
            flow_run_filter=FlowRunFilter(
                expected_start_time=FlowRunFilterExpectedStartTime(
                    after_=now - LOOKBACK, before_=now
                ),
            ),
            limit=200,
        )
    # the slots since the deployment (and its schedule) was made, and those of its runs
    due = {night: slot for night, slot in slots.items() if slot >= _made(made, now)}
    for other in [run, *others]:
        if _of_the_schedule(other, slots) and other.expected_start_time is not None:
            slot = other.expected_start_time.astimezone(UTC)
            runs.setdefault(tonight(slot), slot)
    return due, runs


def _made(deployment: Any, now: datetime) -> datetime:
    """When the deployment's schedule began: the newest of its own and its schedules' making."""
    made = [deployment.created, *(getattr(s, "created", None) for s in deployment.schedules or [])]
    return max([m for m in made if m is not None], default=now - LOOKBACK)


def _cron_nights(deployment: Any, now: datetime, logger: Any) -> dict[str, datetime]:
    """The nights of the deployment's active cron schedules with a slot in the last month ->
    their first slot."""
    crons = [
        (cron, getattr(s.schedule, "timezone", None))
        for s in deployment.schedules or []
        if s.active and (cron := getattr(s.schedule, "cron", None)) is not None
    ]
    nights, problems = crons_nights(crons, now - LOOKBACK, now)
    for problem in problems:
        logger.warning("missed nights: a schedule not read: %s", problem)
    return nights


def _of_the_schedule(run: Any, due: dict[str, datetime]) -> bool:
    """Whether Prefect's scheduler made ``run``, or it starts at a slot of the schedule (a
    slot before the deployment existed: a restored server, runs made by hand for slots)."""
    if run.auto_scheduled:
        return True
    at = run.expected_start_time
    if at is None or (run.parameters or {}).get("night"):
        return False
    slot = due.get(tonight(at))
    if slot is None:  # before the month looked at: the schedule's own fire that day
        return False
    return abs((slot - at).total_seconds()) < 1


def check_missed(
    prepared: PreparedNight,
    catalog: str,
    notifier: Notifier | None,
    logger: Any,
    *,
    now: datetime | None = None,
    due: dict[str, datetime] | None = None,
    by: str = "",
) -> MissedDecision | None:
    """What this run does about missed nights (None: not a scheduled run's first try); the
    nights it newly names are named in the ledger and in one alert, and logged."""
    now = now or datetime.now(UTC)
    try:
        return _check(prepared, catalog, notifier, logger, now=now, due=due, by=by)
    except Exception as exc:  # the night runs all the same: this check only adds to it
        logger.warning("missed nights not checked: %s: %s", type(exc).__name__, exc)
        return None


def _check(
    prepared: PreparedNight,
    catalog: str,
    notifier: Notifier | None,
    logger: Any,
    *,
    now: datetime,
    due: dict[str, datetime] | None,
    by: str,
) -> MissedDecision | None:
    catalogue, engine = prepared.catalogue, prepared.ledger.engine
    if due is None:
        schedule = scheduled_nights(now, logger)
        if schedule is None:
            return None
        cron, runs = schedule
        due = due_nights(cron, runs, first_night(engine, catalogue.key))
    missed = MissedNights(engine, catalogue.key)
    since = min([*due, prepared.night])
    ran = nights_run(engine, catalogue.key, since)
    named_before = {m.night for m in missed.all(since)}
    decision = decide(prepared.night, list(due), ran, named_before, catalogue.defaults.missed)
    decision = replace(decision, slots=dict(due))
    if decision.quiet:
        return decision
    by = by or _run_name()
    new = missed.name([(n, due.get(n)) for n in decision.named], by=by, reason=decision.why, at=now)
    if new:
        # in the alert log as the night's: the watchdog does not name them a second time
        log = AlertLog(engine)
        named = [(n, due.get(n), decision.why) for n in new]
        for found in missed_findings(catalogue.key, named, now):
            log.record(replace(found, raised_by="night"))
        headline, lines = missed_message(decision, new, due, catalog)
        logger.warning("%s. %s", headline, " ".join(lines))
        if notifier is not None:
            notifier.missed(prepared.night, headline, lines)
        missed.announced(new)  # sent, or kept in the outbox until Slack takes it
    if decision.first or decision.after:
        logger.info("missed nights to run first: %s; after: %s", decision.first, decision.after)
    return decision


def _run_name() -> str:
    from prefect.runtime import flow_run

    return f"flow run {flow_run.name} ({flow_run.id})" if flow_run.id else "nightshift"


def missed_fates(engine: Any, key: str, night: str) -> list[tuple[MissedNight, str]]:
    """The nights named missed in the month up to ``night`` (included), each with what became
    of it: ``missed`` (never run), or its verdict once run (a backfill)."""
    from datetime import date

    return named_fates(engine, key, (date.fromisoformat(night) - LOOKBACK).isoformat(), night)


def late_of(prepared: PreparedNight, slot: datetime | None, started_at: str | None) -> str | None:
    """The night's ``late`` line (``engine.missed.late_line``): its slot against its start, the
    nights missed before it and what became of them. Never raises: a courtesy of the report."""
    if started_at is None:
        return None
    try:
        key, engine, night = prepared.catalogue.key, prepared.ledger.engine, prepared.night
        fates = missed_fates(engine, key, night)
        # the nights missed since the previous night that ran on its slot: once, not a month
        ran = {n for n in nights_run(engine, key, min([m.night for m, _ in fates], default=night))}
        named = {m.night for m, _ in fates}
        previous = max((n for n in ran - named if n < night), default="")
        before = [
            (m.night, "never run" if fate == "missed" else f"run since: {fate}")
            for m, fate in fates
            if previous < m.night < night
        ]
        return late_line(slot, datetime.fromisoformat(started_at), before)
    except Exception:  # the night's end never fails on this line
        return None
