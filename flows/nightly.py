"""The nightly flow: plan, fan out, watch, join, report. Flows wire; tasks do."""

from __future__ import annotations

import threading
import uuid
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, tags, task
from prefect.artifacts import (
    create_progress_artifact,
    update_progress_artifact,
)
from prefect.cache_policies import NO_CACHE
from prefect.futures import PrefectFuture
from prefect.runtime import flow_run, task_run
from prefect.states import Completed, Failed, State
from prefect.task_runners import ThreadPoolTaskRunner
from prefect.tasks import exponential_backoff

from flows.limits import prefect_slots
from flows.report import NightEndedEarly, not_run, report, why
from tasks.backends import build_backends
from tasks.catalogue import Catalogue, load_catalogue
from tasks.errors import LockHeldError, TransientBackendError
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
PROGRESS_KEY = "nightly-progress"
EXIT_LOCKED = 3  # as the CLI's: another night of the catalogue holds its lease


@dataclass
class _Night:
    """A running night as its tasks see it."""

    ctx: NightContext
    # backends that could not be built, with the reason their jobs fail
    broken: dict[str, str] = field(default_factory=dict)


# the nights running in this process, by key; tasks get the key, not the live objects
_NIGHTS: dict[str, _Night] = {}


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
    night = _NIGHTS[night_key]
    try:
        broken = night.broken.get(night.ctx.catalogue.job(label).backend)
        if broken is not None:
            outcome = end_job(night.ctx, label, Outcome.FAILED, f"not run: {broken}")
        else:
            outcome = run_one_job(night.ctx, label, attempt=task_run.run_count or 1)
    finally:
        # whatever failed before the runner, later jobs of a capped backend must not wait for it
        _withdraw(night.ctx, label)
    return outcome if outcome.ok else Failed(message=outcome.line())


def _never(task: Any, task_run: Any, state: State) -> bool:
    """Never retry (a chain as a whole: its steps retry themselves; jobs with `retries: 0`)."""
    return False


# retries=1 that never fire: a task returning Failed with no retries configured makes Prefect
# log "Task run failed with state" with an empty traceback at ERROR
@task(
    name="run-chain",
    task_run_name="{name}",
    cache_policy=NO_CACHE,
    retries=1,
    retry_condition_fn=_never,
)
def run_chain(name: str, labels: list[str], night_key: str) -> State:
    """Run dependent jobs one after another; a step that did not succeed skips its dependents.

    One task run per chain, named by its steps; each step is a task run of its own inside it.
    """
    ctx = _NIGHTS[night_key].ctx
    done: dict[str, JobOutcome] = {}
    for label in labels:
        deps = ctx.catalogue.job(label).depends_on
        blockers = [d for d in deps if d in done and not done[d].ok]
        if blockers:
            reason = f"{blockers[0]} {done[blockers[0]].state.value}"
            done[label] = end_job(ctx, label, Outcome.SKIPPED, reason)
            continue
        state = _with_retries(ctx)(label, night_key, return_state=True)
        done[label] = _outcome_of(ctx, label, state)
    bad = [o.line() for o in done.values() if not o.ok]
    return Failed(message="; ".join(bad)) if bad else Completed(message=f"{len(done)} steps ok")


@flow(name="nightly", task_runner=ThreadPoolTaskRunner(max_workers=256))  # type: ignore[arg-type]
def nightly(
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
        cleanup.callback(_close_backends, backends)
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
        _NIGHTS[key] = _Night(ctx, broken)
        cleanup.callback(_NIGHTS.pop, key, None)
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
        runner = _with_retries(ctx)
        futures = runner.map(plan.independent, night_key=key) if plan.independent else []
        chains = [run_chain.submit(" → ".join(chain), chain, key) for chain in plan.chains]
        for label, future in zip(plan.independent, futures, strict=True):
            _outcome_of(ctx, label, future)
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


def _with_retries(ctx: NightContext) -> Any:
    """The job task with the catalogue's retry policy."""
    defaults = ctx.catalogue.defaults
    # `retries: 0` as one retry that never fires: see run_chain on Prefect's empty traceback
    return run_job.with_options(
        retries=max(defaults.retries, 1),
        retry_condition_fn=_transient_only if defaults.retries else _never,
        retry_delay_seconds=exponential_backoff(backoff_factor=defaults.retry_delay),
    )


def _withdraw(ctx: NightContext, label: str) -> None:
    """The job will not ask for a slot (again): later jobs of its backend stop waiting for it."""
    ctx.admission.withdraw(ctx.catalogue.job(label).backend, ctx.priorities.get(label, 0))


def _outcome_of(ctx: NightContext, label: str, ran: PrefectFuture[Any] | State) -> JobOutcome:
    """The job's outcome; a task that raised (retries exhausted, or a bug) ends as failed."""
    if isinstance(ran, PrefectFuture):
        ran.wait()
        state = ran.state
    else:
        state = ran
    _withdraw(ctx, label)  # a task run that crashed before its body ran never did
    if label in ctx.outcomes:
        return ctx.outcomes[label]
    value = state.result(raise_on_failure=False)
    detail = f"{type(value).__name__}: {value}" if isinstance(value, BaseException) else None
    return end_job(ctx, label, Outcome.FAILED, detail or "the job task did not return")


def _close_backends(backends: dict[str, Any]) -> None:
    for client in backends.values():
        close = getattr(client, "close", None)
        if close is not None:
            close()


def _stamp() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
