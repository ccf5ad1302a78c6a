"""The Prefect task of a night: one task run per job. Thin: it calls the engine.

Async tasks, awaited together on the flow's event loop: a job in flight holds no thread.
A chain of jobs is a subflow (``flows/chain.py``) whose steps are these task runs. A task run's
result is its job's outcome, a chain's the outcomes of its steps (kept in memory, never written).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.runtime import task_run
from prefect.states import State
from prefect.utilities.annotations import quote

from nightshift.backoff import JOB_RETRY
from nightshift.engine.context import NightContext
from nightshift.engine.explain import failure_note
from nightshift.engine.outcomes import JobOutcome
from nightshift.engine.steps import JobPools, run_job_step_async, settle_job_async
from nightshift.errors import TransientBackendError
from nightshift.orchestration.running_night import Night
from nightshift.orchestration.states import JOB_TASK, job_state

__all__ = ["chain_outcomes", "job_task", "never_retry", "outcome_of", "run_job", "with_retries"]


async def _transient_only(task: Any, task_run: Any, state: State) -> bool:
    """Retry a job task only for transient backend errors."""
    try:
        # a raised error, or the outcome of a job that ran and did not succeed
        error = await state.aresult(raise_on_failure=False)
    except Exception:
        return False
    return isinstance(error, TransientBackendError)


@task(
    name=JOB_TASK,
    task_run_name="{label}",
    cache_policy=NO_CACHE,
    persist_result=False,  # the outcome goes back to the night in memory, nowhere else
    retries=2,
    retry_delay_seconds=JOB_RETRY.delays(2),
    retry_jitter_factor=0.5,
    retry_condition_fn=_transient_only,
)
async def run_job(label: str, night: Night) -> State:
    """Submit or re-attach one external job and wait for its outcome: the task run's result.

    A job that did not succeed ends its task run Failed, named for what happened (``Partial``,
    ``Stuck``, ``TimedOut``: red on the night's timeline), and says why in one ERROR record;
    its outcome is the Failed state's data all the same (``outcome_of`` reads it back).
    ``night``: handed in quoted (``job_task``), as the running night's live objects.
    """
    attempt = task_run.run_count or 1
    outcome = await run_job_step_async(night.ctx, label, night.pools, attempt=attempt)
    if not outcome.ok:
        log_failure(outcome)
    return job_state(outcome, as_result=True)


def log_failure(outcome: JobOutcome) -> None:
    """The one ERROR record of a job that did not succeed: why, its id, its tail's path and head."""
    tail = None
    if outcome.log_tail_path:
        try:
            tail = Path(outcome.log_tail_path).read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            tail = f"(could not read the tail: {exc})"
    get_run_logger().error("%s", failure_note(outcome, tail))


def never_retry(task: Any, task_run: Any, state: State) -> bool:
    """Never retry (jobs with `retries: 0`)."""
    return False


def with_retries(ctx: NightContext) -> Any:
    """The job task with the catalogue's retry policy."""
    defaults = ctx.catalogue.defaults
    # `retries: 0` as one retry that never fires: a task returning Failed with no retries
    # configured makes Prefect log "Task run failed with state" with an empty traceback
    retries = max(defaults.retries, 1)

    async def retry(task: Any, task_run: Any, state: State) -> bool:
        # an interrupted night submits nothing more, a retry included
        if ctx.stop.requested or not defaults.retries:
            return False
        return await _transient_only(task, task_run, state)

    return run_job.with_options(
        retries=retries,
        retry_condition_fn=retry,
        retry_delay_seconds=replace(JOB_RETRY, initial=defaults.retry_delay).delays(retries),
    )


async def job_task(night: Night, label: str, runner: Any) -> State:
    """Run the job's task (``runner``, from ``with_retries``) for its state: the night handed in
    quoted, and the task run named ``<label> (kept)`` when an earlier run of the night did it."""
    if label in night.kept:
        runner = runner.with_options(task_run_name=f"{label} (kept)")
    state: State = await runner(label, quote(night), return_state=True)
    return state


async def outcome_of(ctx: NightContext, label: str, state: State, pools: JobPools) -> JobOutcome:
    """The job's outcome, its task run's result; a task that raised (retries exhausted, or a
    bug) ends as failed."""
    value = await state.aresult(raise_on_failure=False)
    if isinstance(value, JobOutcome):
        return value
    error = value if isinstance(value, BaseException) else None
    return await settle_job_async(ctx, label, error, pools)


async def chain_outcomes(
    ctx: NightContext, labels: list[str], state: State, pools: JobPools
) -> list[JobOutcome]:
    """The chain's steps' outcomes, its subflow run's result; the steps of a chain that raised
    (a bug) end as failed, but for those that ended before it did."""
    value = await state.aresult(raise_on_failure=False)
    if isinstance(value, list) and all(isinstance(o, JobOutcome) for o in value):
        return value
    error = value if isinstance(value, BaseException) else None
    return [await settle_job_async(ctx, label, error, pools) for label in labels]
