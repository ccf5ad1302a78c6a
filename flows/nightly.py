"""The nightly flow: plan, fan out, watch, join, report. Flows wire; tasks do."""

from __future__ import annotations

import json
import threading
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import (
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.cache_policies import NO_CACHE
from prefect.futures import PrefectFuture
from prefect.runtime import flow_run, task_run
from prefect.states import Completed, Failed, State
from prefect.task_runners import ThreadPoolTaskRunner
from prefect.tasks import exponential_backoff

from flows.limits import prefect_slots
from tasks.backends import build_backends
from tasks.catalogue import Catalogue, load_catalogue
from tasks.errors import TransientBackendError
from tasks.files import write_atomic
from tasks.gate import Admission
from tasks.lease import Lease
from tasks.ledger import Ledger
from tasks.outcomes import JobOutcome, NightSummary, Outcome, join
from tasks.plan import parse_night, plan_night, tonight
from tasks.runner import NightContext, Observer, end_job, run_one_job
from tasks.settings import Settings, load_settings
from tasks.watcher import Watcher

__all__ = ["LIVE_OBSERVERS", "nightly", "run_dir_for"]

# the local CLI adds a callback here to draw its live table: (label, state) on every change
LIVE_OBSERVERS: list[Observer] = []
HISTORY_DAYS = 30
SUMMARY_FILE = "summary.json"
# the nights running in this process, by key; tasks get the key, not the live objects
_NIGHTS: dict[str, NightContext] = {}


def _transient_only(task: Any, task_run: Any, state: State) -> bool:
    """Retry a job task only for transient backend errors."""
    try:
        state.result()
    except TransientBackendError:
        return True
    except Exception:
        return False
    return False


@task(
    name="run-job",
    task_run_name="{label}",
    cache_policy=NO_CACHE,
    retries=2,
    retry_delay_seconds=exponential_backoff(backoff_factor=2),
    retry_jitter_factor=0.5,
    retry_condition_fn=_transient_only,
)
def run_job(label: str, night_key: str) -> JobOutcome | State:
    """Submit or re-attach one external job and wait for its outcome.

    A job that did not succeed ends its task run Failed (red on the night's timeline); its
    outcome stays with the night, which reads it from there.
    """
    outcome = run_one_job(_NIGHTS[night_key], label, attempt=task_run.run_count or 1)
    return outcome if outcome.ok else Failed(message=outcome.line())


@flow(name="run-chain", flow_run_name="chain {name}")
def run_chain(name: str, labels: list[str], night_key: str) -> State:
    """Run dependent jobs one after another; a step that did not succeed skips its dependents."""
    ctx = _NIGHTS[night_key]
    done: dict[str, JobOutcome] = {}
    for label in labels:
        deps = ctx.catalogue.job(label).depends_on
        blockers = [d for d in deps if d in done and not done[d].ok]
        if blockers:
            reason = f"{blockers[0]} {done[blockers[0]].state.value}"
            done[label] = end_job(ctx, label, Outcome.SKIPPED, reason)
            continue
        future = _with_retries(ctx).submit(label, night_key)
        done[label] = _outcome_of(ctx, label, future)
    bad = [o.line() for o in done.values() if not o.ok]
    return Failed(message="; ".join(bad)) if bad else Completed(message=f"{len(done)} steps ok")


@task(name="chain", task_run_name="chain {name}", cache_policy=NO_CACHE)
def run_chain_task(name: str, labels: list[str], night_key: str) -> None:
    """Hold a chain's subflow in the task runner so chains run beside the mapped jobs."""
    run_chain(name, labels, night_key, return_state=True)


@flow(name="nightly", task_runner=ThreadPoolTaskRunner(max_workers=256))  # type: ignore[arg-type]
def nightly(
    catalog: str = "nightshift.yaml",
    only: list[str] | None = None,
    night: str | None = None,
    run_dir: str | None = None,
) -> State:
    """One night of the catalogue: Completed only when every job succeeded."""
    logger = get_run_logger()
    settings = load_settings()
    catalogue = load_catalogue(catalog)
    night = parse_night(night) if night else tonight(flow_run.scheduled_start_time)
    run_path = Path(run_dir) if run_dir else run_dir_for(settings, night)
    run_path.mkdir(parents=True, exist_ok=True)
    ledger = Ledger(settings.ledger_url(), catalogue.key)
    try:
        with Lease(ledger.engine, catalogue.key, ttl_s=settings.lease_ttl) as lease:
            summary = _run_night(catalogue, only, night, run_path, ledger, settings, lease)
    finally:
        ledger.close()
    _write_summary(run_path / SUMMARY_FILE, summary)
    _publish(summary)
    logger.info("%s", summary.headline())
    for outcome in summary.not_ok:
        logger.warning("%s", outcome.line())
    if summary.severity.value != "ok":
        return Failed(message=summary.headline())
    return Completed(message=summary.headline())


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
) -> NightSummary:
    logger = get_run_logger()
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    since = datetime.now(UTC) - timedelta(days=HISTORY_DAYS)
    expected = ledger.expected_durations([j.label for j in catalogue.jobs], since)
    plan = plan_night(catalogue, only, expected)
    total = len(plan.labels)
    progress_id: Any = create_progress_artifact(0.0, description=f"0/{total} jobs finished")
    results: dict[str, JobOutcome] = {}
    lock = threading.Lock()

    def on_finished(outcome: JobOutcome) -> None:
        with lock:
            results[outcome.label] = outcome
            count = len(results)
        update_progress_artifact(
            progress_id, 100.0 * count / max(1, total), description=f"{count}/{total} jobs finished"
        )
        logger.info("finished %s", outcome.line())

    key = f"{night}:{uuid.uuid4().hex[:8]}"
    caps: dict[str, int] = {str(name): cap for name, cap in catalogue.limits.items()}
    backends = build_backends(catalogue, settings)  # before any thread: it may raise
    watcher = Watcher(on_change=lambda label, state, seen: _NIGHTS[key].seen(label, state, seen))
    _NIGHTS[key] = ctx = NightContext(
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
        hold=prefect_slots(caps),
        # a stalled night whose lease ran out must not submit beside the night that took it
        stop_reason=lambda: _stop_reason(lease, watcher),
        owns_night=lambda: lease.lost is None,
    )
    for backend in catalogue.limits:
        # with a cap, jobs start longest-expected first: announce them in that order
        ranks = [ctx.priorities[x] for x in plan.independent if catalogue.job(x).backend == backend]
        ctx.admission.expect(backend, ranks)
    logger.info(
        "night %s: %d jobs, %d independent, %d chains",
        night,
        total,
        len(plan.independent),
        len(plan.chains),
    )
    try:
        runner = _with_retries(ctx)
        futures = runner.map(plan.independent, night_key=key) if plan.independent else []
        chains = [run_chain_task.submit(chain[-1], chain, key) for chain in plan.chains]
        for label, future in zip(plan.independent, futures, strict=True):
            _outcome_of(ctx, label, future)
        for chain_future in chains:
            chain_future.wait()
    finally:
        watcher.stop()
        _NIGHTS.pop(key, None)
        for client in backends.values():
            close = getattr(client, "close", None)
            if close is not None:
                close()
    for label in plan.labels:
        if label not in results:
            end_job(ctx, label, Outcome.FAILED, "no outcome recorded (internal error)")
    finished_at = datetime.now(UTC).isoformat(timespec="seconds")
    return join([results[label] for label in plan.labels], started_at, finished_at)


def _stop_reason(lease: Lease, watcher: Watcher) -> str | None:
    """Why no more jobs may be submitted tonight, if there is a reason."""
    if lease.lost is not None:
        return f"not submitted: {lease.lost}"
    if watcher.stopped:
        return "not submitted: the night's watcher stopped (see the flow run's logs)"
    return None


def _with_retries(ctx: NightContext) -> Any:
    """The job task with the catalogue's retry policy."""
    defaults = ctx.catalogue.defaults
    return run_job.with_options(
        retries=defaults.retries,
        retry_delay_seconds=exponential_backoff(backoff_factor=defaults.retry_delay),
    )


def _outcome_of(ctx: NightContext, label: str, future: PrefectFuture[Any]) -> JobOutcome:
    """The job's outcome; a task that raised (retries exhausted, or a bug) ends as failed."""
    future.wait()
    if label in ctx.outcomes:
        return ctx.outcomes[label]
    value = future.result(raise_on_failure=False)
    detail = f"{type(value).__name__}: {value}" if isinstance(value, BaseException) else None
    return end_job(ctx, label, Outcome.FAILED, detail or "the job task did not return")


def _write_summary(path: Path, summary: NightSummary) -> None:
    """summary.json beside the log tails, written atomically."""
    write_atomic(path, json.dumps(summary_json(summary), indent=2) + "\n")


def summary_json(summary: NightSummary) -> dict[str, Any]:
    """The summary object of ``nightshift run --json``."""
    return {
        "severity": summary.severity.value,
        "exit_code": summary.exit_code,
        "started_at": summary.started_at,
        "finished_at": summary.finished_at,
        "jobs": [job.to_json() for job in summary.jobs],
    }


def _publish(summary: NightSummary) -> None:
    """The summary as a table artifact on the flow run."""
    rows = [
        {
            "job": job.label,
            "state": job.state.value,
            "duration": job.line().split(" (", 1)[1].split(",")[0],
            "attempts": job.attempts,
            "detail": job.detail or "",
        }
        for job in summary.jobs
    ]
    create_table_artifact(rows, key="nightly-summary", description=summary.headline())
