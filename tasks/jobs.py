"""The Prefect tasks of a night: one task run per job, one per chain. Thin: they call the engine.

Async tasks, awaited together on the flow's event loop: a job in flight holds no thread.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.runtime import task_run
from prefect.states import Completed, Failed, State

from nightshift.backoff import JOB_RETRY
from nightshift.engine.context import NightContext
from nightshift.engine.outcomes import JobOutcome
from nightshift.engine.steps import (
    JobPools,
    run_chain_steps_async,
    run_job_step_async,
    settle_job_async,
)
from nightshift.errors import TransientBackendError

__all__ = ["NIGHTS", "Night", "outcome_of", "run_chain", "run_job", "with_retries"]


@dataclass
class Night:
    """A running night as its tasks see it."""

    ctx: NightContext
    pools: JobPools


# the nights running in this process, by key; tasks get the key, not the live objects
NIGHTS: dict[str, Night] = {}


async def _transient_only(task: Any, task_run: Any, state: State) -> bool:
    """Retry a job task only for transient backend errors."""
    try:
        await state.aresult()
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
    retry_delay_seconds=JOB_RETRY.delays(2),
    retry_jitter_factor=0.5,
    retry_condition_fn=_transient_only,
)
async def run_job(label: str, night_key: str) -> JobOutcome | State:
    """Submit or re-attach one external job and wait for its outcome.

    A job that did not succeed ends its task run Failed (red on the night's timeline); its
    outcome stays with the night, which reads it from there.
    """
    night = NIGHTS[night_key]
    attempt = task_run.run_count or 1
    outcome = await run_job_step_async(night.ctx, label, night.pools, attempt=attempt)
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
async def run_chain(name: str, labels: list[str], night_key: str) -> State:
    """Run dependent jobs one after another; a step that did not succeed skips its dependents.

    One task run per chain, named by its steps; each step is a task run of its own inside it.
    """
    night = NIGHTS[night_key]
    ctx = night.ctx

    async def step(label: str) -> JobOutcome:
        ran = await with_retries(ctx)(label, night_key, return_state=True)
        return await outcome_of(ctx, label, ran, night.pools)

    done = await run_chain_steps_async(ctx, labels, step, night.pools)
    bad = [o.line() for o in done if not o.ok]
    return Failed(message="; ".join(bad)) if bad else Completed(message=f"{len(done)} steps ok")


def with_retries(ctx: NightContext) -> Any:
    """The job task with the catalogue's retry policy."""
    defaults = ctx.catalogue.defaults
    # `retries: 0` as one retry that never fires: see run_chain on Prefect's empty traceback
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


async def outcome_of(ctx: NightContext, label: str, state: State, pools: JobPools) -> JobOutcome:
    """The job's outcome; a task that raised (retries exhausted, or a bug) ends as failed."""
    if label in ctx.outcomes:
        return await settle_job_async(ctx, label, None, pools)
    value = await state.aresult(raise_on_failure=False)
    error = value if isinstance(value, BaseException) else None
    return await settle_job_async(ctx, label, error, pools)
