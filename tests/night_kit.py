"""The night's one execution path, driven by a test without Prefect.

What the nightly flow's tasks run (``tasks/jobs.py``, ``flows/nightly.py``): a job's tries go
through ``run_job_step_async`` on the night's ``JobPools``, retried as the job task is
(transient backend errors only, ``retry_delay`` doubling), and a try's outcome is the job's (a
job whose tries raised ends in ``settle_job``); a chain's steps go through
``run_chain_steps_async``; every job and chain is awaited together on one event loop, and the
night is joined from the outcomes their ends gave it (``ctx.outcomes``). Time is the test's one
``FakeClock`` (``tests/support.py``): a ``ClockDriver`` moves it while jobs are in flight, and a
retry's wait moves it instead of sleeping.
"""

from __future__ import annotations

import asyncio
import threading
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from pathlib import Path
from types import TracebackType

from nightshift.backoff import JOB_RETRY
from nightshift.config.catalogue import Catalogue, Defaults
from nightshift.engine.context import NightContext
from nightshift.engine.night import NightId, NightParts, finish_night, open_night
from nightshift.engine.outcomes import JobOutcome, NightSummary
from nightshift.engine.plan import Plan
from nightshift.engine.steps import (
    JobPools,
    run_chain_steps_async,
    run_job_step_async,
    settle_job,
)
from nightshift.engine.watcher import Watcher
from nightshift.errors import TransientBackendError
from tests.support import FakeClock

__all__ = [
    "ClockDriver",
    "job_with_retries",
    "night_jobs",
    "retry_delays",
    "run_job",
    "run_jobs",
    "run_night",
    "start_jobs",
]


def run_job(ctx: NightContext, label: str, attempt: int = 1) -> JobOutcome:
    """One try of one job, as the job task's body runs it: a transient error propagates."""

    async def one() -> JobOutcome:
        return await run_job_step_async(ctx, label, JobPools(ctx.loop), attempt)

    outcome = ctx.loop.run(one())  # on the night's own loop, as the flow runs it
    _heard(ctx)
    return outcome


def _heard(ctx: NightContext) -> None:
    """What the jobs published heard by every sink and written, as at the night's end: a test
    reads the ledger next."""
    ctx.events.settle()
    ctx.records.flush()


async def job_with_retries(
    ctx: NightContext,
    label: str,
    pools: JobPools,
    *,
    clock: FakeClock | None = None,
    waits: list[float] | None = None,
) -> JobOutcome:
    """One job as the job task runs it: tries, transient errors retried, then its outcome.

    Each retry waits the catalogue's ``retry_delay``, doubling, as Prefect's delays for the task
    (without their jitter): noted in ``waits`` and moved on ``clock``, never slept.
    """
    defaults = ctx.catalogue.defaults
    delays = retry_delays(defaults)
    error: BaseException | None = None
    for attempt in range(1, defaults.retries + 2):
        try:
            return await run_job_step_async(ctx, label, pools, attempt=attempt)
        except TransientBackendError as exc:
            error = exc
            if attempt > defaults.retries:
                break
            if waits is not None:
                waits.append(delays[attempt - 1])
            if clock is not None:
                clock.advance(delays[attempt - 1])
        except Exception as exc:  # not retried: the job ends failed, the night goes on
            error = exc
            break
    return await settle_job(ctx, label, error)


def retry_delays(defaults: Defaults) -> list[float]:
    """The waits before a job's retries: ``retry_delay``, doubling (the job task's, unjittered)."""
    return replace(JOB_RETRY, initial=defaults.retry_delay).delays(defaults.retries)


async def night_jobs(
    ctx: NightContext,
    plan: Plan,
    pools: JobPools,
    *,
    clock: FakeClock | None = None,
    waits: list[float] | None = None,
) -> dict[str, JobOutcome]:
    """Every job and chain of the night, awaited together on this event loop: their outcomes."""

    async def job(label: str) -> JobOutcome:
        return await job_with_retries(ctx, label, pools, clock=clock, waits=waits)

    async def one(label: str) -> list[JobOutcome]:
        return [await job(label)]

    chains = [run_chain_steps_async(ctx, chain, job) for chain in plan.chains]
    done = await asyncio.gather(*map(one, plan.independent), *chains)
    return {outcome.label: outcome for outcomes in done for outcome in outcomes}


def run_jobs(
    ctx: NightContext,
    plan: Plan,
    *,
    clock: FakeClock | None = None,
    waits: list[float] | None = None,
) -> dict[str, JobOutcome]:
    """The night's jobs on the night's own loop, as the flow runs them
    (``orchestration/night_loop.py``), until every one has its outcome: what the loop owns is
    touched only there (its owner check is on in the suite)."""

    async def night() -> dict[str, JobOutcome]:
        return await night_jobs(ctx, plan, JobPools(ctx.loop), clock=clock, waits=waits)

    outcomes = ctx.loop.run(night())
    _heard(ctx)
    return outcomes


def start_jobs(ctx: NightContext, plan: Plan, **kwargs: object) -> threading.Thread:
    """``run_jobs`` on a thread of its own, started: the test moves the clock meanwhile."""
    thread = threading.Thread(target=run_jobs, args=(ctx, plan), kwargs=kwargs, name="night-loop")
    thread.start()
    return thread


def run_night(
    catalogue: Catalogue,
    parts: NightParts,
    plan: Plan,
    *,
    night: str,
    run_dir: Path,
    run_id: str = "kit",
    clock: FakeClock | None = None,
    waits: list[float] | None = None,
) -> NightSummary:
    """A whole night: opened, its jobs run (the ``clock`` driven while any is in flight),
    joined. Without a ``clock`` the night runs on ``parts``' own clocks."""
    started_at = parts.wall().isoformat(timespec="seconds")
    with open_night(catalogue, parts, plan, NightId(night, run_id, run_dir)) as ctx:
        driver: AbstractContextManager[object] = (
            nullcontext() if clock is None else ClockDriver(clock, ctx.watcher)
        )
        with driver:
            outcomes = run_jobs(ctx, plan, clock=clock, waits=waits)
    # one channel: what each job's steps gave back is what its end gave the night
    assert all(ctx.outcomes[label] is outcome for label, outcome in outcomes.items())
    return finish_night(ctx, plan, started_at)


class ClockDriver:
    """While the watcher has jobs in flight, move the clock a second at a time, then settle."""

    def __init__(self, clock: FakeClock, watcher: Watcher) -> None:
        self._clock, self._watcher = clock, watcher
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="clock-driver")

    def __enter__(self) -> ClockDriver:
        self._thread.start()
        return self

    def __exit__(
        self, _t: type[BaseException] | None, _e: BaseException | None, _b: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self._watcher.in_flight():
                self._stop.wait(0.001)  # nothing to time: let the jobs' steps go on
                continue
            self._clock.advance(1.0)
            self._watcher.poke()
            self._watcher.wait_idle(timeout=10)
