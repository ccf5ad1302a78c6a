"""Run one job of a night: submit (or re-attach), watch, collect, record. No Prefect here."""

from __future__ import annotations

from collections.abc import Generator
from concurrent.futures import Future
from contextlib import ExitStack
from datetime import datetime, timedelta
from typing import Any

from nightshift.backends.base import Backend, ExternalState, JobSpec, capabilities
from nightshift.backoff import Backoff
from nightshift.config.catalogue import GeminiBatchJob
from nightshift.engine.admission import Deadline
from nightshift.engine.context import NightContext
from nightshift.engine.events import (
    JobFinished,
)
from nightshift.engine.jobspec import job_spec
from nightshift.engine.ledger_sink import LedgerUnavailable
from nightshift.engine.outcomes import (
    JobOutcome,
    Outcome,
    join_details,
    outcome_from_external,
    outcome_from_record,
    status_detail,
)
from nightshift.engine.stopping import LEFT_RUNNING_DETAIL, NOT_SUBMITTED_DETAIL
from nightshift.engine.timers import JobTimers, job_timers
from nightshift.engine.watcher import WatchRequest, WatchResult
from nightshift.errors import BackendError, InputFileError, PermanentBackendError
from nightshift.files import label_filename
from nightshift.states import LIVE, JobState
from nightshift.store.ledger import JobRecord

__all__ = ["FALLBACK", "LOST", "SUBMITTING", "JobSteps", "end_job", "job_steps", "stopped_outcome"]

LOG_TAIL_LINES = 40
LOST = JobState.LOST.value
FALLBACK = JobState.FALLBACK.value
# a submit began but its answer was not recorded: the next try looks for the job before creating
SUBMITTING = JobState.SUBMITTING.value
# a job's run as steps: it yields the watcher's future while the job is in flight (holding no
# thread), is sent the future's result (or thrown its error), and returns the job's outcome
JobSteps = Generator["Future[WatchResult]", Any, JobOutcome]


def job_steps(ctx: NightContext, label: str, attempt: int = 1) -> JobSteps:
    """Take one job from wherever tonight left it to a final outcome, as steps.

    The caller waits for each yielded watcher future however it likes (``engine/steps.py``
    awaits it). A job that already succeeded tonight is not run again; one still queued or
    running is re-attached by its external id; anything else is submitted. Transient backend
    errors propagate (the caller retries); permanent ones end the job as failed.
    """
    job = ctx.catalogue.job(label)
    backend = ctx.backends[job.backend]
    try:
        return (yield from _run(ctx, label, job, backend))
    finally:
        # no-op once the job was admitted; frees later jobs if this one never asks for a slot
        ctx.admission.withdraw(job.backend, ctx.priorities.get(label, 0))


def _run(ctx: NightContext, label: str, job: Any, backend: Backend) -> JobSteps:
    try:
        record = ctx.records.get_job(ctx.night, label)
    except LedgerUnavailable as exc:  # the lease is gone with the database: nothing to start
        return end_job(ctx, label, Outcome.FAILED, ctx.stop_reason() or str(exc))
    if record is not None and record.state == Outcome.SUCCEEDED and record.external_id:
        # not a change of state, so no transition: its JobFinished tells the sinks
        return _report(ctx, outcome_from_record(record))
    reattach = record is not None and bool(record.external_id) and record.state in LIVE
    # an earlier try of this attempt began submitting and never recorded an id (a crash, or a
    # retry after an error): the same attempt again, and the backend looks before it creates
    resume = record is not None and not reattach and record.state == SUBMITTING
    if (refused := _cannot_fall_back(job, backend, record if reattach else None)) is not None:
        return end_job(ctx, label, Outcome.FAILED, refused)
    attempts = (record.attempts if record else 0) + (0 if reattach or resume else 1)
    ctx.attempts[label] = attempts
    # the key lets a backend find or refuse a repeated submit of this attempt
    key = f"{ctx.catalogue.key}/{ctx.night}/{label}/{attempts}"
    spec = job_spec(ctx.catalogue, label, key)
    if resume and record is not None and record.submitted_at is not None:
        spec.options["resume_since"] = record.submitted_at.isoformat()
    priority = ctx.priorities.get(label, 0)
    with ExitStack() as held:
        try:
            slot = ctx.admission.slot(job.backend, priority, ctx.deadline_at, stagger=not reattach)
            held.enter_context(slot)
            held.enter_context(ctx.hold(job.backend, max(0.0, ctx.deadline_at - ctx.watcher.now())))
        except Deadline:
            if ctx.stop.requested:  # interrupted while it waited for its turn
                return stopped_outcome(ctx, label)
            return end_job(ctx, label, Outcome.TIMEOUT, "night deadline before submit")
        except TimeoutError:  # the Prefect limit stayed full: other nights, or a dead one's
            if ctx.stop.requested:
                return stopped_outcome(ctx, label)
            why = (
                f"night deadline before submit: no free Prefect concurrency slot for "
                f"{job.backend} (a night that died holds its slots until their lease ends)"
            )
            return end_job(ctx, label, Outcome.TIMEOUT, why)
        # a job's duration counts from its submission, not from its wait for a turn
        started_wall = ctx.wall()
        if reattach:
            assert record is not None and record.external_id is not None
            external_id = record.external_id
            started_wall = record.submitted_at or started_wall
            ctx.external_ids[label] = external_id
        else:
            if ctx.stop.requested:
                return stopped_outcome(ctx, label)
            if (cancelled := ctx.cancel_reason(label)) is not None:
                return end_job(ctx, label, Outcome.CANCELLED, f"not submitted: {cancelled}")
            if (reason := ctx.stop_reason()) is not None:
                return _finish(ctx, label, None, Outcome.FAILED, started_wall, attempts - 1, reason)
            if not resume:
                # written before the create: a crash after it leaves a trace to look for
                ctx.records.record_submit(
                    ctx.night, label, job.backend, None, attempts, at=started_wall, state=SUBMITTING
                )
            ctx.mark(label, SUBMITTING)
            if (reason := ctx.stop_reason()) is not None:  # lost while the database was away
                return _finish(ctx, label, None, Outcome.FAILED, started_wall, attempts - 1, reason)
            try:
                external_id = backend.submit(spec)
            except (PermanentBackendError, InputFileError) as exc:  # nothing (more) to watch
                return _finish(ctx, label, None, Outcome.FAILED, started_wall, attempts, str(exc))
            # a patient submit may have waited out a burst of 429s: its timers start now
            started_wall = ctx.wall()
            ctx.records.record_submit(
                ctx.night, label, job.backend, external_id, attempts, at=started_wall
            )
            ctx.mark(label, "submitted", external_id)
        if reattach and record is not None and record.state == FALLBACK:
            # a night that crashed during the fallback: finish it, don't watch a cancelled batch
            result: WatchResult | Exception = WatchResult("fallback", None, 0)
            timers = JobTimers()
        else:
            timers = _timers(ctx, label, started_wall)
            result = yield from _watch(
                ctx, label, backend, external_id, timers, look_first=reattach
            )
        return _conclude(
            ctx, label, backend, spec, external_id, result, started_wall, attempts, timers
        )
    raise AssertionError("unreachable")  # for type checkers: the with block always returns


def _cannot_fall_back(job: Any, backend: Backend, reattached: JobRecord | None) -> str | None:
    """Why a job that may need its backend's fallback (a batch's SLA) can't run on this one."""
    resuming = reattached is not None and reattached.state == FALLBACK  # died in a fallback
    needs = resuming or (isinstance(job, GeminiBatchJob) and job.fallback != "none")
    if not needs or capabilities(backend).falls_back is not None:
        return None
    return (
        f"refused: its {job.backend} backend ({type(backend).__name__}) cannot fall back, "
        "which the job's SLA needs"
    )


def _timers(ctx: NightContext, label: str, started: datetime) -> JobTimers:
    """The job's timers on the watcher's clock, counted from its submission."""
    now = ctx.watcher.now()
    budgets = ctx.budgets
    return job_timers(
        ctx.catalogue.job(label),
        ctx.catalogue.defaults,
        expected=budgets.job(ctx.catalogue.key, label) if budgets is not None else None,
        # also for a re-attached job submitted by an earlier run
        origin=now - (ctx.wall() - started).total_seconds(),
        deadline_at=ctx.deadline_at,
        deadline_wall=ctx.wall() + timedelta(seconds=ctx.deadline_at - now),
    )


def _watch(
    ctx: NightContext,
    label: str,
    backend: Backend,
    external_id: str,
    timers: JobTimers,
    *,
    look_first: bool,
) -> Generator[Future[WatchResult], Any, WatchResult | Exception]:
    defaults = ctx.catalogue.defaults
    request = WatchRequest(
        label=label,
        backend=backend,
        external_id=external_id,
        policy=Backoff(defaults.poll.initial, defaults.poll.factor, defaults.poll.max),
        timeout_at=timers.timeout_at,
        queued_timeout_at=timers.queued_timeout_at,
        fallback_at=timers.fallback_at,
        max_errors=defaults.retries,
        look_first=look_first,
    )
    try:
        result: WatchResult = yield ctx.watcher.watch(request)
        return result
    except PermanentBackendError as exc:
        return exc


def _conclude(
    ctx: NightContext,
    label: str,
    backend: Backend,
    spec: JobSpec,
    external_id: str,
    result: WatchResult | Exception,
    started: datetime,
    attempts: int,
    timers: JobTimers,
) -> JobOutcome:
    end = (ctx, label, external_id)
    if not isinstance(result, Exception) and result.reason == "detached":
        return _left_running(ctx, label, external_id, started, attempts)
    if isinstance(result, Exception):
        return _finish(*end, Outcome.FAILED, started, attempts, str(result), None, backend)
    data: dict[str, Any] = {}
    detail = status_detail(result.status)
    if result.reason == "unreadable":
        detail = join_details(f"status unreadable: {result.error}", detail)
        if result.cancel_error:
            # it may still be running: keep it live in the ledger so a rerun re-attaches
            why = f"cancel failed: {result.cancel_error}; kept as lost, a rerun re-attaches"
            detail = join_details(detail, why)
            return _finish(*end, Outcome.FAILED, started, attempts, detail, None, backend, LOST)
        detail = join_details(detail, "cancelled it, so nothing runs on unseen")
        return _finish(*end, Outcome.FAILED, started, attempts, detail, None, backend)
    if result.reason == FALLBACK:
        ctx.mark(label, FALLBACK, external_id)
        ctx.records.record_state(ctx.night, label, FALLBACK)  # live: a rerun resumes it
        falls_back = capabilities(backend).falls_back
        assert falls_back is not None  # refused before submit otherwise
        data = falls_back.fallback(spec, external_id)
        outcome = Outcome.SUCCEEDED if data.get("ok") else Outcome.PARTIAL
        detail = data.get("summary")
    elif result.reason in ("timeout", "stuck_queued"):
        stuck = result.reason == "stuck_queued"
        outcome = Outcome.STUCK_QUEUED if stuck else Outcome.TIMEOUT
        ran = (ctx.wall() - started).total_seconds()
        detail = join_details(timers.queued_why if stuck else timers.timeout_text(ran), detail)
        if result.cancel_error:
            # it may still be running: keep it live in the ledger so a rerun re-attaches
            detail = join_details(detail, f"cancel failed: {result.cancel_error}")
            return _finish(*end, outcome, started, attempts, detail, None, backend, LOST)
        data, note = _collect(backend, spec, external_id)
        # keep what the cancelled job did finish; the rest goes to its dead-letter file
        detail = join_details(detail, note)
    else:
        assert result.status is not None
        outcome = outcome_from_external(result.status.state)
        if result.status.state is ExternalState.CANCELLED:
            # nightshift cancel's reason: its request may be newer than the night's last read
            detail = join_details(ctx.cancel_reason(label, fresh=True), detail)
        else:
            data, note = _collect(backend, spec, external_id)
            if outcome is Outcome.SUCCEEDED and not data.get("ok", True):
                outcome = Outcome.PARTIAL
            detail = join_details(detail, note)
    return _finish(*end, outcome, started, attempts, detail, data, backend)


def _collect(
    backend: Backend, spec: JobSpec, external_id: str
) -> tuple[dict[str, Any], str | None]:
    """What a backend that collects results made of the job, and a note for the detail."""
    collector = capabilities(backend).collects
    if collector is None:
        return {}, None
    try:
        data: dict[str, Any] = collector.collect(spec, external_id)
    except (BackendError, InputFileError) as exc:
        return {}, f"collecting results failed: {exc}"
    return data, data.get("summary")


def stopped_outcome(ctx: NightContext, label: str) -> JobOutcome:
    """A job the interrupted night lets go of: left running if it is out there (it stays in
    flight in the ledger, with its id), else not submitted. Nothing is written."""
    try:  # one plain read: a stop must not wait out a database outage
        record = ctx.ledger.get_job(ctx.night, label)
    except Exception:  # what the night knows is enough to say what it left running
        record = None
    external_id = ctx.external_ids.get(label) or (record.external_id if record else None)
    attempts = record.attempts if record else 0
    if external_id is not None and (record is None or record.state in LIVE):
        started = (record.submitted_at if record else None) or ctx.wall()
        attempts = ctx.attempts.get(label) or attempts
        return _left_running(ctx, label, external_id, started, attempts)
    job = ctx.catalogue.job(label)
    outcome = JobOutcome(
        label, Outcome.SKIPPED, attempts=attempts, backend=job.backend, detail=NOT_SUBMITTED_DETAIL
    )
    return _report(ctx, outcome)


def _left_running(
    ctx: NightContext, label: str, external_id: str, started: datetime, attempts: int
) -> JobOutcome:
    outcome = JobOutcome(
        label=label,
        state=Outcome.LEFT_RUNNING,
        duration_s=max(0.0, (ctx.wall() - started).total_seconds()),
        attempts=attempts,
        external_id=external_id,
        backend=ctx.catalogue.job(label).backend,
        detail=LEFT_RUNNING_DETAIL,
    )
    return _report(ctx, outcome)


def end_job(ctx: NightContext, label: str, outcome: Outcome, detail: str | None) -> JobOutcome:
    """End a job that never got (or lost) its external run: skipped, or failed by an error.

    A job that was submitted but lost (its task gave up on an error) stays live in the ledger,
    so a rerun re-attaches to it instead of starting a second copy.
    """
    attempts = 0
    try:
        record = ctx.records.get_job(ctx.night, label)
    except LedgerUnavailable:  # the lease is gone with the database: what the night knows
        record = None
        attempts = ctx.attempts.get(label, 0) if label in ctx.external_ids else 0
    external_id = ctx.external_ids.get(label) or (record.external_id if record else None)
    live = record is not None and record.state in LIVE and external_id is not None
    if record is not None:
        attempts = record.attempts
    return _finish(
        ctx,
        label,
        external_id,
        outcome,
        ctx.wall(),
        attempts,
        detail,
        ledger_state=LOST if live else None,
    )


def _finish(
    ctx: NightContext,
    label: str,
    external_id: str | None,
    outcome: Outcome,
    started: datetime,
    attempts: int,
    detail: str | None,
    data: dict[str, Any] | None = None,
    backend: Backend | None = None,
    ledger_state: str | None = None,
) -> JobOutcome:
    finished = ctx.wall()
    ctx.attempts[label] = attempts
    tail_path = None
    if outcome is not Outcome.SUCCEEDED and backend is not None and external_id is not None:
        tail_path = _save_tail(ctx, label, backend, external_id)
    job = ctx.catalogue.job(label)
    result = JobOutcome(
        label=label,
        state=outcome,
        duration_s=max(0.0, (finished - started).total_seconds()),
        attempts=attempts,
        external_id=external_id,
        log_tail_path=tail_path,
        backend=job.backend,
        detail=detail,
        data=data or {},
    )
    ctx.records.record_state(
        ctx.night,
        label,
        ledger_state or outcome.value,
        finished_at=finished,
        detail=detail,
        data=data or None,
    )
    # the final row is dated when the watcher first saw the end, not after collecting results
    ctx.mark(label, outcome.value, external_id, at=ctx.final_seen.pop(label, None))
    return _report(ctx, result)


def _report(ctx: NightContext, outcome: JobOutcome) -> JobOutcome:
    """Hand a job's outcome to the night and tell the sinks."""
    ctx.outcomes[outcome.label] = outcome
    ctx.events.publish(JobFinished(ctx.night, ctx.catalogue.key, outcome, ctx.wall()))
    return outcome


def _save_tail(ctx: NightContext, label: str, backend: Backend, external_id: str) -> str | None:
    try:
        text = backend.logs(external_id, tail=LOG_TAIL_LINES)
    except BackendError as exc:
        text = f"(could not read the job's log: {exc})\n"
    path = ctx.run_dir / "logs" / f"{label_filename(label)}.tail.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text if text.endswith("\n") or not text else text + "\n", encoding="utf-8")
    return str(path)
