"""A night's jobs as awaited steps: one job's try, a chain in order, a crashed job settled.

The one way a night runs its jobs: the Prefect tasks (``tasks/jobs.py``) call these, and tests
drive them the same way without Prefect (``tests/night_kit.py``). A job's try is one coroutine on
the night's loop: in flight, an awaited future of the watcher's; waiting for its turn, an awaited
admission; its blocking calls (a ledger read, the submit, collecting results, its log's tail) each
run alone on a night's small pools (``JobPools``), handed their arguments, returning a value.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from nightshift.engine.context import NightContext
from nightshift.engine.job_end import FINISH_POOL, FINISH_THREADS
from nightshift.engine.outcomes import JobOutcome, Outcome
from nightshift.engine.runner import (
    Watching,
    begin_job,
    end_job,
    end_job_watch,
    slot_missed,
    start_job,
    stopped_outcome,
    take_slot,
    take_turn,
    turn_missed,
)
from nightshift.engine.watch_request import WatchResult
from nightshift.errors import PermanentBackendError
from nightshift.loop import NightLoop

__all__ = [
    "JobPools",
    "run_chain_steps_async",
    "run_job_step_async",
    "settle_job",
    "withdraw",
]

T = TypeVar("T")
AsyncStep = Callable[[str], Awaitable[JobOutcome]]
AsyncSkipped = Callable[[JobOutcome], Awaitable[object]]
START_THREADS = 4  # per backend: jobs' rows read and their submits (one waiting holds none)


class JobPools:
    """The night's threads for the blocking calls of its jobs, on the night's loop
    (``nightshift/loop.py``); a job in flight, or waiting for its turn, holds none.

    Each backend has its start pool (its jobs' rows read, a Prefect slot held on a thread,
    their submits), so a backend whose submits are slow holds up no other's; a job's end makes
    its calls on the finish pool (``job_end.blocking``), which never queues behind a submit.
    The pools end with the night's loop.
    """

    def __init__(self, loop: NightLoop) -> None:
        self._loop = loop
        self.finish = loop.blocking(FINISH_POOL, FINISH_THREADS)
        self._starts: dict[str, ThreadPoolExecutor] = {}

    def start(self, backend: str) -> ThreadPoolExecutor:
        """The pool where jobs of ``backend`` wait for their turn and submit."""
        if backend not in self._starts:  # only the night's event loop asks: no race
            self._starts[backend] = self._loop.blocking(f"job-start-{backend}", START_THREADS)
        return self._starts[backend]


def withdraw(ctx: NightContext, label: str) -> None:
    """The job will not ask for a slot (again): later jobs of its backend stop waiting for it."""
    ctx.admission.withdraw(ctx.catalogue.job(label).backend, ctx.priorities.get(label, 0))


async def run_job_step_async(
    ctx: NightContext, label: str, pools: JobPools, attempt: int = 1
) -> JobOutcome:
    """One try of one job, as one coroutine: failed at once when its backend is broken; else
    begun, its turn awaited (on the loop: a job waiting holds no thread), submitted, watched,
    concluded. Its blocking calls run on ``pools``. Transient backend errors propagate: the
    caller retries.
    """
    backend = ctx.catalogue.job(label).backend
    broken = ctx.broken.get(backend)
    if broken is not None:
        try:
            return await end_job(ctx, label, Outcome.FAILED, f"not run: {broken}")
        finally:
            withdraw(ctx, label)
    start = pools.start(backend)
    watching: Watching | None = None
    try:
        begun = await begin_job(ctx, label, start, attempt)
        if isinstance(begun, JobOutcome):
            return begun
        held = await take_turn(ctx, begun)
        if held is None:
            return await turn_missed(ctx, label)
        try:  # a capped backend's Prefect slot, awaited here: a job waiting holds no thread
            slotted = await take_slot(ctx, begun, held)
        except BaseException:
            held.close()
            raise
        if not slotted:
            held.close()
            return await slot_missed(ctx, label)
        # on the loop, its submit on the start pool; cancelled, it gives back what it holds
        started = await start_job(ctx, begun, held, start)
        if isinstance(started, JobOutcome):
            return started
        watching = started
        result = await _watched(watching)
        # from here its end gives back what it holds, even if this is cancelled
        ending, watching = watching, None
        return await end_job_watch(ctx, ending, result)
    finally:
        if watching is not None:  # its wait was cancelled: stop watching, give back its slot
            watching.release()
        withdraw(ctx, label)


async def _watched(watching: Watching) -> WatchResult | Exception:
    """The job's watch's result: why watching ended, or the permanent error that ended it."""
    try:
        return await asyncio.wrap_future(watching.future)
    except PermanentBackendError as exc:
        return exc


async def run_chain_steps_async(
    ctx: NightContext,
    labels: list[str],
    step: AsyncStep,
    skipped: AsyncSkipped | None = None,
) -> list[JobOutcome]:
    """Run dependent jobs one after another; a step that did not succeed skips its dependents,
    each told to ``skipped`` as it is (the chain's subflow gives it a task run)."""
    done: dict[str, JobOutcome] = {}
    for label in labels:
        deps = ctx.catalogue.job(label).depends_on
        blockers = [d for d in deps if d in done and not done[d].ok]
        if blockers:
            reason = f"{blockers[0]} {done[blockers[0]].state.value}"
            done[label] = await _skip(ctx, label, reason)
            if skipped is not None and done[label].state is Outcome.SKIPPED:
                await skipped(done[label])
            continue
        done[label] = await step(label)
    return list(done.values())


async def _skip(ctx: NightContext, label: str, reason: str) -> JobOutcome:
    """A chain step whose dependency did not succeed; an interrupted night only lets it go."""
    if ctx.stop.requested:
        return await stopped_outcome(ctx, label)
    return await end_job(ctx, label, Outcome.SKIPPED, reason)


async def settle_job(ctx: NightContext, label: str, error: BaseException | None) -> JobOutcome:
    """The job's outcome; a job whose tries raised (retries exhausted, a bug) ends as failed."""
    withdraw(ctx, label)  # a try that crashed before its body ran never did
    if label in ctx.outcomes:
        return ctx.outcomes[label]
    if ctx.stop.requested:  # its try was cut short by the stop: nothing failed out there
        return await stopped_outcome(ctx, label)
    detail = f"{type(error).__name__}: {error}" if error is not None else None
    return await end_job(ctx, label, Outcome.FAILED, detail or "the job task did not return")
