"""A chain of dependent jobs: one subflow run, named by its steps, each step a task run in it.

Async, awaited on the night's event loop beside the other jobs: a chain that waits holds no
thread. A step that did not succeed skips its dependents (``run_chain_steps_async``).
"""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger
from prefect.states import Completed, Failed, State

from nightshift.engine.explain import failure_note
from nightshift.engine.outcomes import JobOutcome, Outcome
from nightshift.engine.steps import run_chain_steps_async
from nightshift.orchestration.states import CHAIN_FLOW
from nightshift.tasks.jobs import job_task, outcome_of, with_retries

__all__ = ["chain"]


# its steps' outcomes go back to the night in memory, nowhere else
@flow(name=CHAIN_FLOW, flow_run_name="{name}", persist_result=False)
async def chain(name: str, labels: list[str], night: Any) -> State:
    """Run dependent jobs one after another (``fetch → link → publish``); Failed when a step
    did not succeed, its message the steps that did not; either way its data is the steps'
    outcomes, in order. ``night``: the running night (``orchestration/running_night.py``),
    handed in quoted; typed Any for Prefect's schema."""
    ctx = night.ctx
    runner = with_retries(ctx)

    async def step(label: str) -> JobOutcome:
        ran = await job_task(night, label, runner)
        return await outcome_of(ctx, label, ran, night.pools)

    done = await run_chain_steps_async(ctx, labels, step, night.pools)
    for skipped in (o for o in done if o.state is Outcome.SKIPPED):
        get_run_logger().error("%s", failure_note(skipped))  # it has no task run to say so
    bad = [o.line() for o in done if not o.ok]
    if bad:
        return Failed(message="; ".join(bad), data=done)
    return Completed(message=f"{len(done)} steps ok", data=done)
