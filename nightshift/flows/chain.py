"""A chain of dependent jobs: one subflow run, named by its night and its steps, each step a task
run in it, a skipped one too.

Async, awaited on the night's event loop beside the other jobs: a chain that waits holds no
thread. A step that did not succeed skips its dependents (``run_chain_steps_async``).
"""

from __future__ import annotations

from typing import Any

from prefect import flow
from prefect.states import Completed, Failed, State

from nightshift.engine.explain import failure_note
from nightshift.engine.outcomes import JobOutcome
from nightshift.engine.steps import run_chain_steps_async
from nightshift.orchestration.states import CHAIN_FLOW
from nightshift.tasks.jobs import job_task, outcome_of, read_tail, skip_task, with_retries

__all__ = ["chain", "chain_run_name"]


def chain_run_name(night: str, labels: list[str], attempt: int = 1) -> str:
    """``night 2026-12-05: fetch:feeds -> publish:feeds``: the chain's subflow run, told
    apart from the same chain's on other nights in the UI's lists, and from an earlier try's
    (``(try 2)``) in a retried night's. Plain ASCII: the UI's timeline drops ``·`` and ``→``."""
    tried = f" (try {attempt})" if attempt > 1 else ""
    return f"night {night}: {' -> '.join(labels)}{tried}"


# its steps' outcomes go back to the night in memory, nowhere else
@flow(name=CHAIN_FLOW, flow_run_name="{name}", persist_result=False)
async def chain(name: str, labels: list[str], night: Any) -> State:
    """Run dependent jobs one after another (``fetch → link → publish``); Failed when a step
    did not succeed, its message the steps that did not; either way its data is the steps'
    outcomes, in order. A step that did not succeed is told in the night's own log too, a
    skipped step is a task run of its own (``Skipped``). ``night``: the running night
    (``orchestration/running_night.py``), handed in quoted; typed Any for Prefect's schema."""
    ctx = night.ctx
    runner = with_retries(ctx)
    steps = " → ".join(labels)

    async def step(label: str) -> JobOutcome:
        ran = await job_task(night, label, runner)
        outcome = await outcome_of(ctx, label, ran)
        if not outcome.ok and ctx.logger is not None:
            # its task run said why in this subflow; the night's page shows the night's log
            note = failure_note(outcome, read_tail(outcome), chain=steps)
            ctx.logger.error("%s", note)
        return outcome

    done = await run_chain_steps_async(ctx, labels, step, skipped=skip_task)
    bad = [o.line() for o in done if not o.ok]
    if bad:
        return Failed(message="; ".join(bad), data=done)
    return Completed(message=f"{len(done)} steps ok", data=done)
