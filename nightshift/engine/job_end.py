"""How a job's try ends: its outcome recorded once (the ledger, its marks, its cost), its log's
tail kept when it did not succeed; a job that never got its external run ended as one. No Prefect.

On the night's loop, as the try's start is: its state (the spend account, the marks, the
outcomes) is the loop's; each blocking call (a ledger read, the log's tail, collecting results)
runs alone on the night's finish pool (``blocking``), handed its arguments, returning a value; the
outcome's row is awaited on the ledger's writer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from nightshift.backends.base import COST_USD, Backend
from nightshift.engine.context import NightContext
from nightshift.engine.events import JobFinished
from nightshift.engine.job_run import JobRun
from nightshift.engine.ledger_sink import LedgerUnavailable
from nightshift.engine.outcomes import JobOutcome, Outcome
from nightshift.engine.stopping import LEFT_RUNNING_DETAIL, NOT_SUBMITTED_DETAIL
from nightshift.errors import BackendError
from nightshift.files import label_filename
from nightshift.states import LIVE, JobState

__all__ = [
    "FINISH_POOL",
    "FINISH_THREADS",
    "LOG_TAIL_LINES",
    "LOST",
    "blocking",
    "end_job",
    "finish",
    "left_running",
    "not_submitted",
    "report_outcome",
    "stopped_outcome",
]

LOG_TAIL_LINES = 40
LOST = JobState.LOST.value
T = TypeVar("T")
# the night's pool for the blocking calls of its jobs' ends (a ledger read, a log's tail,
# collecting results), apart from the submits: an end never queues behind a slow submit
FINISH_POOL, FINISH_THREADS = "job-end", 3


async def blocking(ctx: NightContext, call: Callable[..., T], *args: Any) -> T:
    """On the loop: ``call(*args)`` on the night's finish pool, its value returned."""
    pool = ctx.loop.blocking(FINISH_POOL, FINISH_THREADS)
    return await asyncio.get_running_loop().run_in_executor(pool, partial(call, *args))


async def stopped_outcome(ctx: NightContext, label: str) -> JobOutcome:
    """A job the interrupted night lets go of: left running if it is out there (it stays in
    flight in the ledger, with its id), else not submitted. Nothing is written."""
    try:  # one plain read: a stop must not wait out a database outage
        record = await blocking(ctx, ctx.ledger.get_job, ctx.night, label)
    except Exception:  # what the night knows is enough to say what it left running
        record = None
    run = ctx.job_run(label)
    external_id = run.external_id or (record.external_id if record else None)
    attempts = record.attempts if record else 0
    if external_id is not None and (record is None or record.state in LIVE):
        started = (record.submitted_at if record else None) or ctx.wall()
        attempts = run.attempt or attempts
        return left_running(ctx, label, external_id, started, attempts)
    outcome = JobOutcome(
        label,
        Outcome.SKIPPED,
        attempts=attempts,
        backend=run.job.backend,
        detail=NOT_SUBMITTED_DETAIL,
    )
    return report_outcome(ctx, outcome)


def left_running(
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
    return report_outcome(ctx, outcome)


async def end_job(
    ctx: NightContext,
    label: str,
    outcome: Outcome,
    detail: str | None,
    data: dict[str, Any] | None = None,
) -> JobOutcome:
    """End a job that never got (or lost) its external run: skipped, or failed by an error.

    A job that was submitted but lost (its task gave up on an error) stays live in the ledger,
    so a rerun re-attaches to it instead of starting a second copy.
    """
    run = ctx.job_run(label)
    attempts = 0
    try:
        record = await blocking(ctx, ctx.records.get_job, ctx.night, label)
    except LedgerUnavailable:  # the lease is gone with the database: what the night knows
        record = None
        attempts = run.attempt if run.external_id is not None else 0
    external_id = run.external_id or (record.external_id if record else None)
    live = record is not None and record.state in LIVE and external_id is not None
    if record is not None:
        attempts = record.attempts
    run.attempt = attempts  # for its events
    # what ends here is the job, not a try of it (one may still be out there): no log tail,
    # no duration
    ended = JobRun(label, run.job, attempts, external_id, started=ctx.wall())
    return await finish(ctx, ended, outcome, detail, data, ledger_state=LOST if live else None)


async def not_submitted(ctx: NightContext, run: JobRun, detail: str, attempt: int) -> JobOutcome:
    """A try that failed before its job was out there: its outcome names no job."""
    run.attempt = attempt
    return await finish(ctx, replace(run, external_id=None), Outcome.FAILED, detail, release=True)


async def finish(
    ctx: NightContext,
    run: JobRun,
    outcome: Outcome,
    detail: str | None,
    data: dict[str, Any] | None = None,
    ledger_state: str | None = None,
    *,
    release: bool = False,
) -> JobOutcome:
    """Record the job's end as ``outcome`` (the ledger keeps ``ledger_state`` instead when
    given): it ran from ``run.started``, and a try that reached its job out there
    (``run.watched``) and did not succeed keeps the tail of its log. ``run`` is the night's
    run of the job, or an account of it (``end_job``, ``_not_submitted``).

    A paid try's commitment is settled at what it cost, or ``release``d when nothing was
    submitted; one that may still run out there (``LOST``) stays committed for a rerun."""
    assert run.started is not None
    label, external_id = run.label, run.external_id
    finished = ctx.wall()
    # the end as its final ledger row dates it: when the service says it ended (else when the
    # watcher first saw it), not after its results were collected: one duration everywhere
    ended = ctx.job_run(label).take_final_seen()
    # one end for every page: its final ledger row, its jobs row and its duration (the final
    # row's date is kept after the row before it: never before its submit)
    end = ended if ended is not None and ended >= run.started else finished
    tail_path = None
    if outcome is not Outcome.SUCCEEDED and run.watched:
        assert run.backend is not None and external_id is not None  # it was out there
        path = ctx.run_dir / "logs" / f"{label_filename(label)}.tail.log"
        tail_path = await blocking(ctx, _save_tail, run.backend, external_id, path)
    result = JobOutcome(
        label=label,
        state=outcome,
        duration_s=max(0.0, (end - run.started).total_seconds()),
        attempts=run.attempt,
        external_id=external_id,
        log_tail_path=tail_path,
        backend=run.job.backend,
        detail=detail,
        data=data or {},
    )
    spent = None
    if ledger_state != LOST:
        spent = ctx.spend.settle(label, _cost(data), submitted=not release)
    await ctx.records.record_state(
        ctx.night,
        label,
        ledger_state or outcome.value,
        finished_at=end,
        detail=detail,
        data=data or None,
        spent_usd=spent,
    )
    # the final row is dated when the watcher first saw the end, not after collecting results
    ctx.mark(label, outcome.value, external_id, at=end)
    return report_outcome(ctx, result)


def _cost(data: dict[str, Any] | None) -> float | None:
    """What a try's results say it cost (None: they don't say)."""
    usd = (data or {}).get(COST_USD)
    return float(usd) if isinstance(usd, int | float) and not isinstance(usd, bool) else None


def report_outcome(ctx: NightContext, outcome: JobOutcome) -> JobOutcome:
    """Hand a job's outcome to the night and tell the sinks."""
    ctx.outcomes[outcome.label] = outcome
    run = ctx.runs.get(outcome.label)
    trace = (run.trace_id, run.trace_parent) if run is not None else (None, None)
    ctx.events.publish(JobFinished(ctx.night, ctx.catalogue.key, outcome, ctx.wall(), *trace))
    return outcome


def _save_tail(backend: Backend, external_id: str, path: Path) -> str:
    """The tail of the job's log, kept at ``path`` (blocking: the backend, the disk)."""
    try:
        text = backend.logs(external_id, tail=LOG_TAIL_LINES)
    except BackendError as exc:
        text = f"(could not read the job's log: {exc})\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text if text.endswith("\n") or not text else text + "\n", encoding="utf-8")
    return str(path)
