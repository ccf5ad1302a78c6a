"""The nightly flow: plan, fan out, watch, join, report. Flows wire; tasks do."""

from __future__ import annotations

import threading
import uuid
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, tags
from prefect.artifacts import (
    create_progress_artifact,
    update_progress_artifact,
)
from prefect.runtime import flow_run
from prefect.states import Completed, Failed, State
from prefect.task_runners import ThreadPoolTaskRunner

from nightshift.backends import build_backends, close_backends
from nightshift.config.catalogue import Catalogue, load_catalogue
from nightshift.config.settings import Settings, load_settings
from nightshift.engine.admission import Admission
from nightshift.engine.outcomes import JobOutcome, NightSummary, Outcome, join
from nightshift.engine.plan import parse_night, plan_night, tonight
from nightshift.engine.runner import NightContext, Observer, end_job
from nightshift.engine.watcher import Watcher
from nightshift.errors import LockHeldError
from nightshift.orchestration.limits import prefect_slots
from nightshift.orchestration.report import NightEndedEarly, not_run, report, why
from nightshift.store.lease import Lease
from nightshift.store.ledger import Ledger
from tasks.jobs import NIGHTS, Night, outcome_of, run_chain, with_retries

__all__ = ["LIVE_OBSERVERS", "nightly", "run_dir_for"]

# the local CLI adds a callback here to draw its live table: (label, state) on every change
LIVE_OBSERVERS: list[Observer] = []
HISTORY_DAYS = 30
PROGRESS_KEY = "nightly-progress"
EXIT_LOCKED = 3  # as the CLI's: another night of the catalogue holds its lease


@flow(name="nightly", task_runner=ThreadPoolTaskRunner(max_workers=256))  # type: ignore[arg-type]
def nightly(
    # not `catalogue` (the CLI's --catalogue): prefect.yaml deployments, schedules and runs
    # started from the Prefect UI pass this parameter by its name; renaming it breaks them
    catalog: str = "nightshift.yaml",
    only: list[str] | None = None,
    night: str | None = None,
    run_dir: str | None = None,
) -> State | list[State]:
    """One night of the catalogue: Completed only when every job succeeded.

    A night that did not fully succeed returns its jobs' states, not one Failed state: the
    run is Failed all the same, but a worker's engine does not log it as a crash.
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
    try:
        # a deployment's tags are on the flow run only: jobs and chains carry them too
        with tags(*(flow_run.tags or [])):
            lease = Lease(ledger.engine, catalogue.key, ttl_s=settings.lease_ttl)
            with lease:
                summary = _run_night(
                    catalogue, only, night, run_path, ledger, settings, lease, results
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
        report(run_path, summary, reason=reason, exit_code=code)
        logger.warning("the night ended early: %s", reason)
        raise  # the CLI reads a LockHeldError from the flow run's result (exit 3)
    finally:
        ledger.close()
    report(run_path, summary)
    logger.info("%s", summary.headline())
    for outcome in summary.not_ok:
        logger.warning("%s", outcome.line())
    if summary.severity.value == "ok":
        return Completed(message=summary.headline())
    # a list of states makes the run Failed without the engine raising FailedRun on the way out
    return [Completed(message=o.line()) if o.ok else Failed(message=o.line()) for o in summary.jobs]


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
) -> NightSummary:
    logger = get_run_logger()
    started_at = _stamp()
    since = datetime.now(UTC) - timedelta(days=HISTORY_DAYS)
    expected = ledger.expected_durations([j.label for j in catalogue.jobs], since)
    plan = plan_night(catalogue, only, expected)
    total = len(plan.labels)
    progress_id: Any = create_progress_artifact(
        0.0, key=PROGRESS_KEY, description=f"Jobs of the night finished: 0 of {total}"
    )
    lock = threading.Lock()

    def on_finished(outcome: JobOutcome) -> None:
        with lock:
            results[outcome.label] = outcome
            count = len(results)
        update_progress_artifact(
            progress_id,
            100.0 * count / max(1, total),
            description=f"Jobs of the night finished: {count} of {total}",
        )
        logger.info("finished %s", outcome.line())

    key = f"{night}:{uuid.uuid4().hex[:8]}"
    caps: dict[str, int] = {str(name): cap for name, cap in catalogue.limits.items()}
    broken: dict[str, str] = {}
    with ExitStack() as cleanup:  # whatever fails below, everything built so far is closed
        backends = build_backends(catalogue, settings, errors=broken)
        cleanup.callback(close_backends, backends)
        for reason in broken.values():
            logger.warning("%s", reason)
        try:
            hold = prefect_slots(caps)
        except Exception as exc:  # the Prefect API refused or is unreachable
            raise NightEndedEarly(
                f"the Prefect concurrency limits for {sorted(caps)} could not be set: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        watcher = Watcher(on_change=lambda label, state, seen: ctx.seen(label, state, seen))
        cleanup.callback(watcher.stop)
        ctx = NightContext(
            catalogue=catalogue,
            night=night,
            run_id=str(flow_run.id or key),
            run_dir=run_path,
            backends=backends,
            ledger=ledger,
            watcher=watcher,
            admission=Admission(catalogue.defaults.stagger, caps),
            deadline_at=watcher.now() + catalogue.defaults.deadline,
            # chain steps rank after every mapped job: they wait for their turn, not the other way
            priorities={label: i for i, label in enumerate(plan.labels)},
            observers=list(LIVE_OBSERVERS),
            on_finished=on_finished,
            hold=hold,
            # a night whose lease ran out (taken, or not renewed in time) must not submit beside
            # the night that may hold it now, nor write to the ledger rows that night owns
            stop_reason=lambda: _stop_reason(lease, watcher),
            owns_night=lambda: lease.lost_reason is None,
        )
        NIGHTS[key] = Night(ctx, broken)
        cleanup.callback(NIGHTS.pop, key, None)
        for backend in catalogue.limits:
            # with a cap, jobs start longest-expected first: announce them in that order
            ranks = [
                ctx.priorities[x] for x in plan.independent if catalogue.job(x).backend == backend
            ]
            ctx.admission.expect(backend, ranks)
        logger.info(
            "night %s: %d jobs, %d independent, %d chains",
            night,
            total,
            len(plan.independent),
            len(plan.chains),
        )
        runner = with_retries(ctx)
        futures = runner.map(plan.independent, night_key=key) if plan.independent else []
        chains = [run_chain.submit(" → ".join(chain), chain, key) for chain in plan.chains]
        for label, future in zip(plan.independent, futures, strict=True):
            outcome_of(ctx, label, future)
        for chain_future in chains:
            chain_future.wait()
    for label in plan.labels:
        if label not in results:
            end_job(ctx, label, Outcome.FAILED, "no outcome recorded (internal error)")
    return join([results[label] for label in plan.labels], started_at, _stamp())


def _stop_reason(lease: Lease, watcher: Watcher) -> str | None:
    """Why no more jobs may be submitted tonight, if there is a reason."""
    if (lost := lease.lost_reason) is not None:
        return f"not submitted: {lost}"
    if watcher.stopped:
        return "not submitted: the night's watcher stopped (see the flow run's logs)"
    return None


def _stamp() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
