"""Jobs as awaited steps (no Prefect): a job in flight holds no thread, a capped backend's
waiting jobs hold up no other backend."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from nightshift.backends.base import ExternalState, JobSpec
from nightshift.engine.admission import Admission
from nightshift.engine.context import NightContext
from nightshift.engine.outcomes import JobOutcome, Outcome
from nightshift.engine.steps import JobPools, run_chain_steps_async, run_job_step_async
from tests.support import BatchScriptedBackend, ScriptedBackend, eventually, night_context

R, S = ExternalState.RUNNING, ExternalState.SUCCEEDED


def catalogue(commands: int, clis: int) -> str:
    lines = ["defaults: {poll: {initial: 0.01s, max: 0.05s}, stagger: 0s}", "jobs:"]
    lines += [f"  - {{label: c{i}, backend: command, argv: [x]}}" for i in range(commands)]
    lines += [f"  - {{label: l{i}, backend: cli, task: t}}" for i in range(clis)]
    return "\n".join(lines) + "\n"


# more than twice the threads the night may hold: a thread per job in flight cannot pass
# unseen (a thread per waiting job gave 61 here), and 50 jobs cost a quarter of 200
JOBS = 50
THREADS = 24


def test_fifty_jobs_in_flight_hold_a_few_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = BatchScriptedBackend(name="cli")
    labels = [f"l{i}" for i in range(JOBS)]
    for label in labels:
        backend.scripts[label] = [R]  # running until every job is in flight
    peak = [threading.active_count()]
    start = threading.Thread.start

    def counted(thread: threading.Thread) -> None:
        start(thread)
        peak[0] = max(peak[0], threading.active_count())

    monkeypatch.setattr(threading.Thread, "start", counted)
    before = threading.active_count()

    async def night() -> list[Outcome]:
        pools = JobPools(ctx.loop)
        jobs = [asyncio.ensure_future(run_job_step_async(ctx, x, pools)) for x in labels]
        # all submitted, all still running; a night that never gets there fails, not hangs
        deadline = time.monotonic() + 30
        while len(backend.submitted) < len(labels):
            assert time.monotonic() < deadline, f"{len(backend.submitted)} jobs in flight"
            await asyncio.sleep(0.01)
        for label in labels:
            backend.scripts[label] = [S]
        return [o.state for o in await asyncio.gather(*jobs)]

    with night_context(tmp_path, catalogue(0, JOBS), {"cli": backend}) as ctx:
        states = ctx.loop.run(night())
    assert states == [Outcome.SUCCEEDED] * JOBS
    # the start and finish pools and the watcher's few status threads, not one per job
    assert peak[0] - before <= THREADS, (before, peak[0])


def test_jobs_waiting_for_a_capped_backend_hold_up_no_other_backend(tmp_path: Path) -> None:
    capped = ScriptedBackend(name="command")
    free = ScriptedBackend(name="cli")
    for i in range(12):  # more than a start pool's threads wait for the one slot
        capped.scripts[f"c{i}"] = [R]
    for i in range(3):
        free.scripts[f"l{i}"] = [R, S]

    async def night() -> tuple[list[Outcome], list[Outcome]]:
        pools = JobPools(ctx.loop)
        waiting = [run_job_step_async(ctx, f"c{i}", pools) for i in range(12)]
        held = asyncio.gather(*waiting)
        others = await asyncio.gather(*(run_job_step_async(ctx, f"l{i}", pools) for i in range(3)))
        # the cap still holds the rest (which one went first is the threads' race: no ranks)
        assert len(capped.submitted) == 1
        for label in capped.scripts:
            capped.scripts[label] = [S]
        return [o.state for o in others], [o.state for o in await held]

    with night_context(tmp_path, catalogue(12, 3), {"command": capped, "cli": free}) as ctx:
        ctx.admission = Admission(0, {"command": 1})
        ctx.admission.on(ctx.loop)  # the night's loop owns it, as open_night binds it
        others, held = ctx.loop.run(night())
    assert others == [Outcome.SUCCEEDED] * 3
    assert held == [Outcome.SUCCEEDED] * 12


async def _in_flight(ctx: NightContext, label: str, pools: JobPools) -> asyncio.Future[JobOutcome]:
    """``label``'s try as a task, once its job is watched (in flight, holding its slot)."""
    task = asyncio.ensure_future(run_job_step_async(ctx, label, pools))
    while ctx.watcher.in_flight() != [label]:
        await asyncio.sleep(0.001)
    return task


def test_a_job_cancelled_while_watched_gives_back_its_slot_and_is_no_longer_watched(
    tmp_path: Path,
) -> None:
    capped = ScriptedBackend(name="command")
    capped.scripts = {"c0": [R], "c1": [S]}

    async def night() -> Outcome:
        pools = JobPools(ctx.loop)
        first = await _in_flight(ctx, "c0", pools)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        return (await run_job_step_async(ctx, "c1", pools)).state

    with night_context(tmp_path, catalogue(2, 0), {"command": capped}) as ctx:
        ctx.admission = Admission(0, {"command": 1})
        ctx.admission.on(ctx.loop)  # the night's loop owns it, as open_night binds it
        assert ctx.loop.run(night()) is Outcome.SUCCEEDED
        assert capped.submitted == ["c0", "c1"]
        assert eventually(lambda: ctx.watcher.in_flight() == []), "c0 still watched"


def test_a_job_cancelled_while_it_waits_for_its_turn_is_never_submitted(tmp_path: Path) -> None:
    """Its turn is awaited on the loop (no pool thread waits): a cancel ends the wait, its
    place in line is given back and it is never submitted; c2 then runs. (When the wait ran on
    a pool thread, a cancel could not stop it: c1 was submitted once its turn came.)"""
    capped = ScriptedBackend(name="command")
    capped.scripts = {"c0": [R], "c1": [R], "c2": [S]}

    async def night() -> Outcome:
        pools = JobPools(ctx.loop)
        first = await _in_flight(ctx, "c0", pools)
        second = asyncio.ensure_future(run_job_step_async(ctx, "c1", pools))
        while len(ctx.admission._waiting.get("command", [])) != 1:  # c1 waits for c0's slot
            await asyncio.sleep(0.001)
        second.cancel()
        with pytest.raises(asyncio.CancelledError):
            await second
        assert ctx.admission._waiting["command"] == []  # its place in line given back
        capped.scripts["c0"] = [S]
        assert (await first).state is Outcome.SUCCEEDED
        return (await run_job_step_async(ctx, "c2", pools)).state

    with night_context(tmp_path, catalogue(3, 0), {"command": capped}) as ctx:
        ctx.admission = Admission(0, {"command": 1})
        ctx.admission.on(ctx.loop)  # the night's loop owns it, as open_night binds it
        ctx.deadline_at = ctx.watcher.now() + 20
        assert ctx.loop.run(night()) is Outcome.SUCCEEDED
        assert capped.submitted == ["c0", "c2"]
        assert eventually(lambda: ctx.watcher.in_flight() == []), "a job still watched"


def test_a_job_cancelled_while_it_submits_gives_its_slot_back_once_submitted(
    tmp_path: Path,
) -> None:
    """Its submit runs on a pool thread, which a cancel cannot stop: once submitted, what it
    holds is given back and its watch stopped: c2 still runs."""
    entered, release = threading.Event(), threading.Event()

    class SlowSubmit(ScriptedBackend):
        def submit(self, spec: JobSpec) -> str:
            if spec.label == "c1":
                entered.set()
                assert release.wait(10)
            return super().submit(spec)

    capped = SlowSubmit(name="command")
    capped.scripts = {"c0": [S], "c1": [R], "c2": [S]}

    async def night() -> Outcome:
        pools = JobPools(ctx.loop)
        assert (await run_job_step_async(ctx, "c0", pools)).state is Outcome.SUCCEEDED
        second = asyncio.ensure_future(run_job_step_async(ctx, "c1", pools))
        while not entered.is_set():
            await asyncio.sleep(0.001)
        second.cancel()
        with pytest.raises(asyncio.CancelledError):
            await second
        release.set()  # its submit ends on its thread: then its slot is given back
        return (await run_job_step_async(ctx, "c2", pools)).state

    with night_context(tmp_path, catalogue(3, 0), {"command": capped}) as ctx:
        ctx.admission = Admission(0, {"command": 1})
        ctx.admission.on(ctx.loop)  # the night's loop owns it, as open_night binds it
        ctx.deadline_at = ctx.watcher.now() + 20
        assert ctx.loop.run(night()) is Outcome.SUCCEEDED
        assert capped.submitted == ["c0", "c1", "c2"]
        assert eventually(lambda: ctx.watcher.in_flight() == []), "c1 still watched"


def test_a_watch_that_cannot_start_gives_back_the_jobs_slot(tmp_path: Path) -> None:
    capped = ScriptedBackend(name="command")
    capped.scripts = {"c0": [R]}

    async def night() -> None:
        pools = JobPools(ctx.loop)
        with pytest.raises(RuntimeError, match="watcher is stopped"):
            await run_job_step_async(ctx, "c0", pools)

    with night_context(tmp_path, catalogue(1, 0), {"command": capped}) as ctx:
        ctx.admission = Admission(0, {"command": 1})
        ctx.admission.on(ctx.loop)  # the night's loop owns it, as open_night binds it
        ctx.watcher.stop()  # e.g. the night is ending: the submitted job cannot be watched
        ctx.loop.run(night())
        assert capped.submitted == ["c0"]

        async def holds() -> bool:  # asked on the loop: the admission is its
            return ctx.admission.holds("command", ctx.priorities.get("c0", 0))

        assert not ctx.loop.run(holds())


def test_a_chain_tells_each_skipped_step_as_it_is_skipped(tmp_path: Path) -> None:
    """The chain's subflow makes each skipped step a task run of its own: told in order, once
    its outcome is recorded, before the chain runs on."""
    text = (
        "defaults: {stagger: 0s}\njobs:\n"
        "  - {label: a, backend: command, argv: [x]}\n"
        "  - {label: b, backend: command, argv: [x], depends_on: [a]}\n"
        "  - {label: c, backend: command, argv: [x], depends_on: [b]}\n"
        "  - {label: x, backend: command, argv: [x]}\n"
    )
    seen: list[str] = []

    async def step(label: str) -> JobOutcome:
        seen.append(f"ran {label}")
        state = Outcome.FAILED if label == "a" else Outcome.SUCCEEDED
        return JobOutcome(label, state, 1.0, 1, detail="exit code 3" if label == "a" else None)

    async def skipped(outcome: JobOutcome) -> None:
        assert ctx.outcomes[outcome.label] == outcome  # recorded before it is told
        seen.append(f"skipped {outcome.label}: {outcome.detail}")

    async def chain() -> list[JobOutcome]:
        return await run_chain_steps_async(ctx, ["a", "b", "c", "x"], step, skipped)

    with night_context(tmp_path, text, {"command": ScriptedBackend(name="command")}) as ctx:
        done = ctx.loop.run(chain())
    assert [o.state for o in done] == [
        Outcome.FAILED,
        Outcome.SKIPPED,
        Outcome.SKIPPED,
        Outcome.SUCCEEDED,
    ]
    assert seen == ["ran a", "skipped b: a failed", "skipped c: b skipped", "ran x"]
