"""A night's jobs as steps: one job's try, a chain in order, and a night on plain threads.

The Prefect tasks (``tasks/jobs.py``) and the plain runner share these, so both run a job, skip
a chain's dependents and settle a crashed job the same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from nightshift.engine.backoff import JOB_RETRY
from nightshift.engine.context import NightContext
from nightshift.engine.outcomes import JobOutcome, Outcome
from nightshift.engine.plan import Plan
from nightshift.engine.runner import end_job, run_one_job
from nightshift.errors import TransientBackendError

__all__ = ["run_chain_steps", "run_job_step", "run_jobs_plain", "settle_job", "withdraw"]

Step = Callable[[str], JobOutcome]


def withdraw(ctx: NightContext, label: str) -> None:
    """The job will not ask for a slot (again): later jobs of its backend stop waiting for it."""
    ctx.admission.withdraw(ctx.catalogue.job(label).backend, ctx.priorities.get(label, 0))


def run_job_step(ctx: NightContext, label: str, attempt: int = 1) -> JobOutcome:
    """One try of one job: failed at once when its backend is broken, else run to its outcome.

    Transient backend errors propagate: the caller retries.
    """
    try:
        broken = ctx.broken.get(ctx.catalogue.job(label).backend)
        if broken is not None:
            return end_job(ctx, label, Outcome.FAILED, f"not run: {broken}")
        return run_one_job(ctx, label, attempt=attempt)
    finally:
        # whatever failed before the runner, later jobs of a capped backend must not wait for it
        withdraw(ctx, label)


def settle_job(ctx: NightContext, label: str, error: BaseException | None) -> JobOutcome:
    """The job's outcome; a job whose tries raised (retries exhausted, a bug) ends as failed."""
    withdraw(ctx, label)  # a try that crashed before its body ran never did
    if label in ctx.outcomes:
        return ctx.outcomes[label]
    detail = f"{type(error).__name__}: {error}" if error is not None else None
    return end_job(ctx, label, Outcome.FAILED, detail or "the job task did not return")


def run_chain_steps(ctx: NightContext, labels: list[str], step: Step) -> list[JobOutcome]:
    """Run dependent jobs one after another; a step that did not succeed skips its dependents."""
    done: dict[str, JobOutcome] = {}
    for label in labels:
        deps = ctx.catalogue.job(label).depends_on
        blockers = [d for d in deps if d in done and not done[d].ok]
        if blockers:
            reason = f"{blockers[0]} {done[blockers[0]].state.value}"
            done[label] = end_job(ctx, label, Outcome.SKIPPED, reason)
            continue
        done[label] = step(label)
    return list(done.values())


def run_jobs_plain(
    ctx: NightContext, plan: Plan, *, sleep: Callable[[float], None] = time.sleep
) -> None:
    """Run a night's jobs without Prefect: each job and each chain on a thread of its own.

    Retries follow the catalogue as the Prefect task does: transient errors only,
    ``retry_delay`` doubling between tries.
    """

    def step(label: str) -> JobOutcome:
        return _with_retries(ctx, label, sleep)

    runs = len(plan.independent) + len(plan.chains)
    with ThreadPoolExecutor(max(1, runs), thread_name_prefix="nightshift-job") as pool:
        futures: list[Future[Any]] = [pool.submit(step, label) for label in plan.independent]
        futures += [pool.submit(run_chain_steps, ctx, chain, step) for chain in plan.chains]
        for future in futures:
            future.result()


def _with_retries(ctx: NightContext, label: str, sleep: Callable[[float], None]) -> JobOutcome:
    defaults = ctx.catalogue.defaults
    error: BaseException | None = None
    for attempt in range(1, defaults.retries + 2):
        try:
            return run_job_step(ctx, label, attempt)
        except TransientBackendError as exc:
            error = exc
            if attempt <= defaults.retries:
                sleep(replace(JOB_RETRY, initial=defaults.retry_delay).delay(attempt - 1))
        except Exception as exc:  # not retried: the job ends failed, the night goes on
            error = exc
            break
    return settle_job(ctx, label, error)
