"""The Prefect task of a night: one task run per job. Thin: it calls the engine.

Async tasks, awaited together on the flow's event loop: a job in flight holds no thread.
A chain of jobs is a subflow (``flows/chain.py``) whose steps are these task runs, a step it
skipped too (``skip_job``). A task run's result is its job's outcome, a chain's the outcomes of
its steps (kept in memory, never written).
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.runtime import task_run
from prefect.states import State
from prefect.utilities.annotations import quote

from nightshift.backoff import JOB_RETRY, Backoff
from nightshift.engine.context import NightContext
from nightshift.engine.explain import failure_note
from nightshift.engine.outcomes import JobOutcome
from nightshift.engine.steps import run_job_step_async, settle_job
from nightshift.errors import TransientBackendError
from nightshift.orchestration.running_night import Night
from nightshift.orchestration.states import JOB_TASK, SKIP_TASK, job_state

__all__ = [
    "chain_outcomes",
    "job_task",
    "never_retry",
    "one_run",
    "outcome_of",
    "read_tail",
    "retried",
    "run_job",
    "skip_job",
    "skip_task",
    "with_retries",
]

RetryCondition = Callable[[Any, Any, State], Awaitable[bool]]


async def _transient_only(task: Any, task_run: Any, state: State) -> bool:
    """Retry a job task only for transient backend errors."""
    try:
        # a raised error, or the outcome of a job that ran and did not succeed
        error = await state.aresult(raise_on_failure=False)
    except Exception:
        return False
    return isinstance(error, TransientBackendError)


def _always() -> bool:
    return True


def _retry_after(backoff: Backoff, allowed: Callable[[], bool] = _always) -> RetryCondition:
    """A retry condition: transient backend errors only, while ``allowed()``; once it decides
    to retry, it sets the wait before the retry (``backoff``'s next delay) on the task run's
    task, where Prefect reads it next (``retried``)."""

    async def retry(task: Any, task_run: Any, state: State) -> bool:
        if not allowed() or not await _transient_only(task, task_run, state):
            return False
        # nothing awaited from here until Prefect reads it: the wait before this retry
        task.retry_delay_seconds = backoff.delay(max(task_run.run_count, 1) - 1)
        return True

    return retry


@task(
    name=JOB_TASK,
    task_run_name="{label}",
    cache_policy=NO_CACHE,
    persist_result=False,  # the outcome goes back to the night in memory, nowhere else
    retries=2,
    retry_delay_seconds=JOB_RETRY.initial,  # then doubling: ``_retry_after``, ``retried``
    retry_jitter_factor=0.5,
    retry_condition_fn=_retry_after(JOB_RETRY),
)
async def run_job(label: str, night: Night) -> State:
    """Submit or re-attach one external job and wait for its outcome: the task run's result.

    A job that did not succeed ends its task run Failed, named for what happened (``Partial``,
    ``Stuck``, ``TimedOut``: red on the night's timeline), its message why in one line, and
    says why in one ERROR record; its outcome is the Failed state's data all the same
    (``outcome_of`` reads it back). ``night``: handed in quoted (``job_task``), as the running
    night's live objects.
    """
    attempt = task_run.run_count or 1
    outcome = await run_job_step_async(night.ctx, label, night.pools, attempt=attempt)
    tail = None
    if not outcome.ok:
        tail = read_tail(outcome)
        get_run_logger().error("%s", failure_note(outcome, tail))
    return job_state(outcome, as_result=True, tail=tail)


@task(name=SKIP_TASK, task_run_name="{label}", cache_policy=NO_CACHE, persist_result=False)
async def skip_job(label: str, outcome: JobOutcome) -> State:
    """A chain's step that waited for one that did not succeed, as a task run of its own
    (a bar on the night's timeline): ``Skipped``, a Cancelled state (grey: not run) whose
    message names the step it waited for; its ERROR record says so on it. Its outcome is the
    state's data."""
    get_run_logger().error("%s", failure_note(outcome))
    return job_state(outcome, as_result=True)


def read_tail(outcome: JobOutcome) -> str | None:
    """The job's saved log tail, or why it could not be read; None when it has none."""
    if not outcome.log_tail_path:
        return None
    try:
        return Path(outcome.log_tail_path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return f"(could not read the tail: {exc})"


def never_retry(task: Any, task_run: Any, state: State) -> bool:
    """Never retry (jobs with `retries: 0`)."""
    return False


def retried(
    task: Any, backoff: Backoff, retries: int, allowed: Callable[[], bool] = _always
) -> Any:
    """``task`` retried ``retries`` times after a transient backend error, while ``allowed()``,
    each retry after ``backoff``'s next delay (2 s, 4 s, 8 s...) with Prefect's jitter.

    Prefect is given one number, the first delay: a task run keeps it in its policy and the
    UI shows it (a list of delays, Prefect's own way to double, shows as ``NaN``). The retry
    condition sets each later delay on the task run's task just before Prefect reads it:
    call the task through ``one_run`` so that each task run has its own.
    """
    return task.with_options(
        retries=retries,
        retry_condition_fn=_retry_after(backoff, allowed),
        retry_delay_seconds=backoff.initial,
        retry_jitter_factor=0.5,
    )


def one_run(task: Any) -> Any:
    """The task for one task run: a copy of its own, whose retry delay its retries set
    (``retried``). A shallow copy: ``with_options`` builds a task anew, ~1 ms a job."""
    return copy.copy(task)


def with_retries(ctx: NightContext) -> Any:
    """The job task with the catalogue's retry policy."""
    defaults = ctx.catalogue.defaults
    # `retries: 0` is 0 on the task run's page too; Prefect's "Task run failed with state" (an
    # empty traceback) for a job's Failed state is dropped while the night runs
    retries = defaults.retries

    def allowed() -> bool:
        # an interrupted night submits nothing more, a retry included
        return bool(defaults.retries) and not ctx.stop.requested

    backoff = replace(JOB_RETRY, initial=defaults.retry_delay)
    return retried(run_job, backoff, retries, allowed)


async def job_task(night: Night, label: str, runner: Any) -> State:
    """Run the job's task (``runner``, from ``with_retries``) for its state: the night handed in
    quoted, and the task run named ``<label> (kept)`` when an earlier run of the night did it."""
    if label in night.kept:
        runner = runner.with_options(task_run_name=f"{label} (kept)")
    state: State = await one_run(runner)(label, quote(night), return_state=True)
    return state


async def skip_task(outcome: JobOutcome) -> State:
    """The task run of a chain's step that was skipped (``skip_job``), for its state."""
    skipping: Any = skip_job  # Prefect's overloads type an async task's state as not awaitable
    state: State = await skipping(outcome.label, quote(outcome), return_state=True)
    return state


async def outcome_of(ctx: NightContext, label: str, state: State) -> JobOutcome:
    """The job's outcome, its task run's result; a task that raised (retries exhausted, or a
    bug) ends as failed."""
    value = await state.aresult(raise_on_failure=False)
    if isinstance(value, JobOutcome):
        return value
    error = value if isinstance(value, BaseException) else None
    return await settle_job(ctx, label, error)


async def chain_outcomes(ctx: NightContext, labels: list[str], state: State) -> list[JobOutcome]:
    """The chain's steps' outcomes, its subflow run's result; the steps of a chain that raised
    (a bug) end as failed, but for those that ended before it did."""
    value = await state.aresult(raise_on_failure=False)
    if isinstance(value, list) and all(isinstance(o, JobOutcome) for o in value):
        return value
    error = value if isinstance(value, BaseException) else None
    return [await settle_job(ctx, label, error) for label in labels]
