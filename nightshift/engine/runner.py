"""Run one job of a night: submit (or re-attach), watch, collect, record. No Prefect here."""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor, Future
from contextlib import ExitStack
from dataclasses import dataclass, replace
from datetime import timedelta
from functools import partial
from typing import Any

from nightshift.backends.base import COST_USD, Backend, ExternalState, JobSpec, capabilities
from nightshift.backoff import Backoff
from nightshift.config.catalogue import GeminiBatchJob
from nightshift.engine.admission import Deadline
from nightshift.engine.context import NightContext
from nightshift.engine.job_end import (
    LOST,
    blocking,
    end_job,
    finish,
    left_running,
    not_submitted,
    report_outcome,
    stopped_outcome,
)
from nightshift.engine.job_run import JobRun
from nightshift.engine.jobspec import job_spec
from nightshift.engine.ledger_sink import LedgerUnavailable
from nightshift.engine.outcomes import (
    JobOutcome,
    Outcome,
    cancel_note,
    join_details,
    outcome_from_external,
    outcome_from_record,
    status_detail,
)
from nightshift.engine.spend import SPEND_REFUSED
from nightshift.engine.timers import JobTimers, job_timers
from nightshift.engine.trace_ids import try_traceparent
from nightshift.engine.watch_request import WatchRequest, WatchResult
from nightshift.errors import BackendError, InputFileError, PermanentBackendError
from nightshift.states import LIVE, JobState
from nightshift.store.ledger import JobRecord

__all__ = [
    "FALLBACK",
    "LOST",
    "SUBMITTING",
    "Begun",
    "Watching",
    "begin_job",
    "end_job",
    "end_job_watch",
    "start_job",
    "stopped_outcome",
    "take_turn",
    "turn_missed",
]

FALLBACK = JobState.FALLBACK.value
# a submit began but its answer was not recorded: the next try looks for the job before creating
SUBMITTING = JobState.SUBMITTING.value
# a job recorded in one of these was shown by the service: a 404 for it means it expired
_SEEN = frozenset({JobState.QUEUED, JobState.RUNNING, JobState.FALLBACK})
# the data of a job given up as lost because the service never showed it
NEVER_SEEN = "never_seen"


@dataclass
class Watching:
    """A job in flight: its watch (the watcher's future) and what it holds meanwhile (its turn
    to run, a capped backend's Prefect slot). A job in flight holds no thread: whoever runs it
    waits for ``future`` however it likes."""

    run: JobRun
    held: ExitStack
    future: Future[WatchResult]

    def release(self) -> None:
        """Stop watching and give back what it holds (its end does it once concluded)."""
        self.future.cancel()
        self.held.close()


@dataclass
class Begun:
    """A job about to take its turn: its run, what tonight's ledger said of it, its attempt."""

    run: JobRun
    record: JobRecord | None
    reattach: bool  # in flight out there: watched again, not submitted
    resume: bool  # a submit began and never recorded its id: the backend looks first


async def begin_job(
    ctx: NightContext, label: str, pool: Executor, attempt: int = 1
) -> JobOutcome | Begun:
    """Take one job from wherever tonight left it: an outcome already (it succeeded tonight, it
    cannot run), or a job to submit or re-attach once its turn comes (``take_turn``), then
    ``start_job``. A job in flight is ended by ``end_job_watch`` with its watch's result.

    A job that already succeeded tonight is not run again; one still queued or running is
    re-attached by its external id; anything else is submitted. Transient backend errors
    propagate (the caller retries); permanent ones end the job as failed. On the loop: the
    ledger's read of the job runs on ``pool``.
    """
    run = ctx.job_run(label)
    run.begin(ctx.backends[run.job.backend])
    try:
        read = partial(ctx.records.get_job, ctx.night, label)
        record = await asyncio.get_running_loop().run_in_executor(pool, read)
    except LedgerUnavailable as exc:  # the lease is gone with the database: nothing to start
        return await end_job(ctx, label, Outcome.FAILED, ctx.rules.stop_reason() or str(exc))
    if record is not None and record.state == Outcome.SUCCEEDED and record.external_id:
        # not a change of state, so no transition: its JobFinished tells the sinks
        return report_outcome(ctx, outcome_from_record(record))
    reattach = record is not None and bool(record.external_id) and record.state in LIVE
    # an earlier try of this attempt began submitting and never recorded an id (a crash, or a
    # retry after an error): the same attempt again, and the backend looks before it creates
    resume = record is not None and not reattach and record.state == SUBMITTING
    assert run.backend is not None  # the try began on it
    if (
        refused := _cannot_fall_back(run.job, run.backend, record if reattach else None)
    ) is not None:
        return await end_job(ctx, label, Outcome.FAILED, refused)
    run.attempt = (record.attempts if record else 0) + (0 if reattach or resume else 1)
    # the key lets a backend find or refuse a repeated submit of this attempt
    key = f"{ctx.catalogue.key}/{ctx.night}/{label}/{run.attempt}"
    spec = run.spec = job_spec(ctx.catalogue, label, key)
    if resume and record is not None and record.submitted_at is not None:
        spec.options["resume_since"] = record.submitted_at.isoformat()
    # a try keeps the trace of the night run that began it (a rerun re-attaches into it)
    if (reattach or resume) and record is not None:
        run.trace_id, run.trace_parent = record.trace_id, record.trace_parent
    elif ctx.trace is not None:
        run.trace_id, run.trace_parent = ctx.trace.hex, f"{ctx.trace.parent_of(label):016x}"
    if run.trace_id is not None:
        sampled = ctx.trace.sampled if ctx.trace is not None else True
        carried = try_traceparent(run.trace_id, ctx.night, label, run.attempt, sampled)
        spec = run.spec = replace(spec, trace=carried)
    return Begun(run, record, reattach, resume)


async def take_turn(ctx: NightContext, begun: Begun) -> ExitStack | None:
    """Wait for the job's turn to submit (and a capped backend's slot), on the night's loop:
    what it then holds, to give back; None when the night's deadline or its stop came first."""
    job = begun.run.job
    priority = ctx.priorities.get(begun.run.label, 0)
    # an incident of its backend holds its submit (a job in flight is re-attached all the same)
    if not begun.reattach:
        paid = ctx.spend.paid(begun.run.label)
        if await ctx.holds.clear(job.backend, paid, ctx.deadline_at) is not None:
            return None
    try:
        slot = await ctx.admission.enter(
            job.backend, priority, ctx.deadline_at, stagger=not begun.reattach
        )
    except Deadline:
        return None
    held = ExitStack()
    held.callback(ctx.admission.leave, slot)
    return held


async def take_slot(ctx: NightContext, begun: Begun, held: ExitStack) -> bool:
    """Await a capped backend's server-side slot on the night's loop, where the night's slot
    holder can (``NightRules.slot``), into ``held``: False when none came by the deadline or
    the stop (``slot_missed``)."""
    if ctx.rules.slot is None:
        return True  # taken on the start thread, in ``start_job``
    left = max(0.0, ctx.deadline_at - ctx.watcher.now())
    try:
        held.enter_context(await ctx.rules.slot(begun.run.job.backend, left))
    except TimeoutError:
        return False
    return True


async def slot_missed(ctx: NightContext, label: str) -> JobOutcome:
    """A job whose backend's Prefect limit stayed full: let go by a stop, else timed out."""
    if ctx.stop.requested:
        return await stopped_outcome(ctx, label)
    backend = ctx.catalogue.job(label).backend
    why = (
        f"night deadline before submit: no free Prefect concurrency slot for {backend} "
        "(a night that died holds its slots until their lease ends)"
    )
    return await end_job(ctx, label, Outcome.TIMEOUT, why)


async def turn_missed(ctx: NightContext, label: str) -> JobOutcome:
    """A job whose turn never came: let go by the night's stop, else timed out."""
    if ctx.stop.requested:  # interrupted while it waited for its turn
        return await stopped_outcome(ctx, label)
    held = ctx.holds.why(ctx.catalogue.job(label).backend, ctx.spend.paid(label))
    if held is not None:  # its backend's incident held it to the end (or refuses it tonight)
        return await end_job(ctx, label, Outcome.SKIPPED, held)
    return await end_job(ctx, label, Outcome.TIMEOUT, "night deadline before submit")


async def start_job(
    ctx: NightContext, begun: Begun, held: ExitStack, pool: Executor
) -> JobOutcome | Watching:
    """On the night's loop: submit (or re-attach) a job whose turn came, holding ``held``: its
    watch, or an outcome (what it held then given back). The blocking calls run on ``pool``,
    each handed its arguments and returning a value (the submit; a slot held on a thread); its
    records are awaited on the ledger's writer."""
    run, record, reattach, resume = begun.run, begun.record, begun.reattach, begun.resume
    label, job, backend, spec = run.label, run.job, run.backend, run.spec
    assert backend is not None and spec is not None  # begun
    loop = asyncio.get_running_loop()
    with held:  # given back here, unless the job goes on to its watch holding it
        if ctx.rules.slot is None:  # else awaited on the loop before (``take_slot``)
            left = max(0.0, ctx.deadline_at - ctx.watcher.now())
            slot = ctx.rules.hold(job.backend, left)
            try:  # a holder of its own waits on a thread
                await loop.run_in_executor(pool, slot.__enter__)
            except TimeoutError:  # the Prefect limit stayed full: other nights, or a dead one's
                return await slot_missed(ctx, label)
            held.push(slot)
        # a job's duration counts from its submission, not from its wait for a turn
        run.started = ctx.wall()
        if reattach:
            assert record is not None and record.external_id is not None
            run.external_id = record.external_id
            run.started = record.submitted_at or run.started
        else:
            if ctx.stop.requested:
                return await stopped_outcome(ctx, label)
            if (cancelled := ctx.rules.cancel_reason(label)) is not None:
                why = f"not submitted: {cancelled}"
                return await end_job(ctx, label, Outcome.CANCELLED, why)
            if (reason := ctx.rules.stop_reason()) is not None:
                return await not_submitted(ctx, run, reason, run.attempt - 1)
            # a resumed try's expected cost was committed by the try that began it
            if not resume and (refused := ctx.spend.reserve(label)) is not None:
                data = {SPEND_REFUSED: True}
                return await end_job(ctx, label, Outcome.SKIPPED, refused, data)
            if not resume:
                # written before the create: a crash after it leaves a trace to look for (and
                # a paid try's expected cost, which a rerun counts)
                await ctx.records.record_submit(
                    ctx.night,
                    run,
                    None,
                    state=SUBMITTING,
                    committed_usd=ctx.spend.committed(label),
                    trace=(run.trace_id, run.trace_parent),
                )
            ctx.mark(label, SUBMITTING)
            if (reason := ctx.rules.stop_reason()) is not None:  # lost while the database was away
                return await not_submitted(ctx, run, reason, run.attempt - 1)
            # the submit and its id's record go on if the try is cancelled meanwhile: a job out
            # there is never left without its id in the ledger
            submitted = ctx.loop.spawn(_submitted(ctx, run, backend, spec, pool))
            submitted.add_done_callback(_seen_through)
            failed = await asyncio.shield(submitted)
            if failed is not None:  # nothing (more) to watch
                return await not_submitted(ctx, run, failed, run.attempt)
        run.watched = True
        if reattach and record is not None and record.state == FALLBACK:
            # a night that crashed during the fallback: finish it, don't watch a cancelled batch
            run.timers = JobTimers()
            future: Future[WatchResult] = Future()
            future.set_result(WatchResult("fallback", None, 0))
        else:
            run.timers = _timers(ctx, run)
            seen = reattach and record is not None and _was_seen(record)
            future = _watch(ctx, run, look_first=reattach, seen=seen)  # raises: the with gives back
        return Watching(run, held.pop_all(), future)
    raise AssertionError("unreachable")  # for type checkers: the with block always returns


def _seen_through(submitted: asyncio.Future[str | None]) -> None:
    """A submit whose try was cancelled meanwhile: its error (retried by nobody now) read, so
    the loop does not call it unretrieved; the ledger says where the job stands."""
    if not submitted.cancelled():
        submitted.exception()


async def _submitted(
    ctx: NightContext, run: JobRun, backend: Backend, spec: JobSpec, pool: Executor
) -> str | None:
    """The submit on ``pool``, then its id recorded and marked: None, or why it failed for
    good (a permanent error, an input file that cannot be read)."""
    try:
        external_id = await asyncio.get_running_loop().run_in_executor(pool, backend.submit, spec)
    except (PermanentBackendError, InputFileError) as exc:
        return str(exc)
    # a patient submit may have waited out a burst of 429s: its timers start now
    run.started = ctx.wall()
    await ctx.records.record_submit(ctx.night, run, external_id)
    ctx.mark(run.label, "submitted", external_id, at=run.started)  # its duration starts here
    return None


async def end_job_watch(
    ctx: NightContext, watching: Watching, result: WatchResult | Exception
) -> JobOutcome:
    """On the loop: the job's outcome from its watch's result (a permanent backend error, or
    why watching ended): collected, recorded, and what it held given back."""
    with watching.held:
        return await _conclude(ctx, watching.run, result)


def _was_seen(record: JobRecord) -> bool:
    """Whether a status answer showed the re-attached job in an earlier run of the night."""
    if record.state == LOST:
        return not (record.data or {}).get(NEVER_SEEN)
    return record.state in _SEEN


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


def _timers(ctx: NightContext, run: JobRun) -> JobTimers:
    """The job's timers on the watcher's clock, counted from its submission."""
    assert run.started is not None
    now = ctx.watcher.now()
    budgets = ctx.budgets
    return job_timers(
        run.job,
        ctx.catalogue.defaults,
        expected=budgets.job(ctx.catalogue.key, run.label) if budgets is not None else None,
        # also for a re-attached job submitted by an earlier run
        origin=now - (ctx.wall() - run.started).total_seconds(),
        deadline_at=ctx.deadline_at,
        deadline_wall=ctx.wall() + timedelta(seconds=ctx.deadline_at - now),
    )


def _watch(
    ctx: NightContext, run: JobRun, *, look_first: bool, seen: bool = False
) -> Future[WatchResult]:
    assert run.backend is not None and run.external_id is not None and run.timers is not None
    defaults = ctx.catalogue.defaults
    request = WatchRequest(
        label=run.label,
        backend=run.backend,
        external_id=run.external_id,
        policy=Backoff(defaults.poll.initial, defaults.poll.factor, defaults.poll.max),
        timeout_at=run.timers.timeout_at,
        queued_timeout_at=run.timers.queued_timeout_at,
        fallback_at=run.timers.fallback_at,
        visible_at=run.timers.visible_at,
        seen=seen,
        max_errors=defaults.retries,
        look_first=look_first,
    )
    return ctx.watcher.watch(request)


async def _conclude(ctx: NightContext, run: JobRun, result: WatchResult | Exception) -> JobOutcome:
    label, backend, spec, external_id, timers = (
        run.label,
        run.backend,
        run.spec,
        run.external_id,
        run.timers,
    )
    assert backend is not None and spec is not None and external_id is not None
    assert run.started is not None and timers is not None
    if not isinstance(result, Exception) and result.reason == "detached":
        return left_running(ctx, label, external_id, run.started, run.attempt)
    if isinstance(result, Exception):
        return await finish(ctx, run, Outcome.FAILED, str(result))
    data: dict[str, Any] = {}
    detail = status_detail(result.status)
    # a job given up on was asked to cancel: how that went, and whether it may still run
    # no status answer showed it (tonight): a cancel accepted is not known to have reached it
    cancelled, may_run = cancel_note(
        result.cancel, result.cancel_error, seen=result.status is not None
    )
    if result.reason in ("unreadable", "lost"):
        if result.reason == "lost":  # never seen: a rerun looks for it again, never resubmits
            why = f"{timers.unseen_text()}; last answer: {result.error}"
        else:
            why = f"status unreadable: {result.error}"
        detail = join_details(why, detail, cancelled)
        # it may still be running: keep it live in the ledger so a rerun re-attaches
        live = may_run or result.reason == "lost"
        # a rerun waits for a job never seen as for a fresh id (_was_seen)
        data = {NEVER_SEEN: True} if result.reason == "lost" else {}
        state = LOST if live else None
        return await finish(ctx, run, Outcome.FAILED, detail, data, ledger_state=state)
    if result.reason == FALLBACK:
        ctx.mark(label, FALLBACK, external_id)
        await ctx.records.record_state(ctx.night, label, FALLBACK)  # live: a rerun resumes it
        falls_back = capabilities(backend).falls_back
        assert falls_back is not None  # refused before submit otherwise
        data = await blocking(ctx, falls_back.fallback, spec, external_id)
        outcome = Outcome.SUCCEEDED if data.get("ok") else Outcome.PARTIAL
        detail = data.get("summary")
    elif result.reason in ("timeout", "stuck_queued"):
        stuck = result.reason == "stuck_queued"
        outcome = Outcome.STUCK_QUEUED if stuck else Outcome.TIMEOUT
        ran = (ctx.wall() - run.started).total_seconds()
        detail = join_details(timers.queued_why if stuck else timers.timeout_text(ran), detail)
        detail = join_details(detail, cancelled)
        if may_run:  # keep it live in the ledger so a rerun re-attaches
            return await finish(ctx, run, outcome, detail, ledger_state=LOST)
        data, note = await blocking(ctx, _collect, backend, spec, external_id)
        # keep what the cancelled job did finish; the rest goes to its dead-letter file
        detail = join_details(detail, note)
    else:
        assert result.status is not None
        outcome = outcome_from_external(result.status.state)
        if result.status.state is ExternalState.CANCELLED:
            # nightshift cancel's reason: its request may be newer than the night's last read
            asked = await blocking(ctx, partial(ctx.rules.cancel_reason, fresh=True), label)
            detail = join_details(asked, detail)
        else:
            data, note = await blocking(ctx, _collect, backend, spec, external_id)
            if outcome is Outcome.SUCCEEDED and not data.get("ok", True):
                outcome = Outcome.PARTIAL
            detail = join_details(detail, note)
            # what the service's final answer says the job cost (an http job's cost_path)
            if COST_USD not in data and (usd := result.status.extra.get(COST_USD)) is not None:
                data = {**data, COST_USD: usd}
    return await finish(ctx, run, outcome, detail, data)


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
