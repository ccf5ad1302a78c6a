"""The night's one event loop (``engine/loop.py``): its tasks, its wake-ups, its pools, its end."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Iterator

import pytest

from nightshift.loop import NightLoop, NotTheLoop, Signal

flag: contextvars.ContextVar[str] = contextvars.ContextVar("flag", default="unset")


@pytest.fixture
def night() -> Iterator[NightLoop]:
    loop = NightLoop()
    yield loop
    loop.close()


def test_work_runs_on_the_loops_thread_with_its_submitters_context() -> None:
    loop = NightLoop("made-here")

    async def where() -> tuple[str, str]:
        return threading.current_thread().name, flag.get()

    token = flag.set("the flow run's")
    try:
        assert loop.run(where(), timeout=10) == ("made-here", "the flow run's")
    finally:
        flag.reset(token)
        loop.close()


def test_a_signal_fired_from_another_thread_wakes_every_waiter(night: NightLoop) -> None:
    signal = Signal(night)
    waiting = threading.Event()

    async def waiters() -> list[bool]:
        both = [asyncio.ensure_future(signal.wait(30)) for _ in range(2)]
        await asyncio.sleep(0)  # both registered
        waiting.set()
        return list(await asyncio.gather(*both))

    running = night.submit(waiters())
    assert waiting.wait(10)
    signal.fire()
    assert running.result(timeout=10) == [True, True]


def test_a_signal_not_fired_lets_its_waiter_go_at_the_timeout(night: NightLoop) -> None:
    assert night.run(Signal(night).wait(0.01), timeout=10) is False


def test_the_loop_never_waits_for_itself(night: NightLoop) -> None:
    async def inner() -> None:
        return None

    async def outer() -> None:
        night.run(inner())

    with pytest.raises(RuntimeError, match="cannot wait for itself"):
        night.run(outer(), timeout=10)


def test_one_pool_per_name_bounded_and_ended_with_the_loop() -> None:
    loop = NightLoop()
    pool = loop.blocking("status", 2)
    assert loop.blocking("status", 2) is pool
    assert pool.submit(lambda: 7).result(timeout=10) == 7
    loop.close()
    with pytest.raises(RuntimeError):
        pool.submit(lambda: 7)
    with pytest.raises(RuntimeError, match="closed"):
        loop.blocking("other", 1)


def test_closing_cancels_what_still_runs_and_ends_the_thread() -> None:
    loop = NightLoop("ending")
    cancelled = threading.Event()

    async def forever() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    started = loop.submit(forever())
    loop.close()
    assert cancelled.is_set() and started.cancelled()
    assert "ending" not in [t.name for t in threading.enumerate()]
    with pytest.raises(RuntimeError, match="closed"):
        loop.submit(forever())


def test_a_spawned_task_nobody_holds_lives_to_its_end_and_ends_with_the_loop() -> None:
    """asyncio holds tasks weakly: a writer task whose owner was dropped at the night's end was
    collected half-way ("Task was destroyed but it is pending!"); the loop holds what it spawned
    and cancels it at its close."""
    import gc

    started, cancelled = threading.Event(), threading.Event()

    async def forever() -> None:
        started.set()
        try:
            await asyncio.get_running_loop().create_future()  # nothing else refers to it
        except asyncio.CancelledError:
            cancelled.set()
            raise

    loop = NightLoop()
    try:

        async def spawn() -> None:
            loop.spawn(forever())

        loop.run(spawn(), timeout=5)
        assert started.wait(5)
        gc.collect()
        assert not cancelled.is_set()  # still held, still waiting
    finally:
        loop.close()
    assert cancelled.wait(5)  # the loop's close ended it
    work = forever()
    with NightLoop() as other, pytest.raises(NotTheLoop):  # only the loop spawns its tasks
        other.spawn(work)
    work.close()


def test_a_spawned_task_runs_in_a_context_of_its_own(night: NightLoop) -> None:
    """Not its spawner's: a job's task run may end first and close what its context holds
    (the progress artifact's last post met the closed Prefect client of the night's tasks)."""

    async def spawner() -> str:
        flag.set("the job task's client")

        async def spawned() -> str:
            return flag.get()

        return await night.spawn(spawned())

    assert night.run(spawner(), timeout=5) == "unset"


def test_asking_the_loop_runs_there_and_at_once_on_it() -> None:
    loop = NightLoop("asked")
    where = lambda: threading.current_thread().name  # noqa: E731
    assert loop.ask(where, timeout=5) == "asked"  # from this thread: handed over

    async def on_it() -> str:
        return loop.ask(where)  # on the loop: at once, never waiting for itself

    assert loop.run(on_it(), timeout=5) == "asked"
    loop.close()
    assert loop.ask(where) == threading.current_thread().name  # closed: whoever is left
