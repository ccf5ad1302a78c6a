"""The night's event loop hands freed memory back while its jobs run (``heap.py``)."""

from __future__ import annotations

import asyncio
import platform
import threading
from collections.abc import Iterator

import pytest

from nightshift.engine.stopping import NightStop
from nightshift.heap import trimmer
from nightshift.loop import NightLoop
from nightshift.orchestration.night_loop import on_a_loop


@pytest.fixture
def night_loop() -> Iterator[NightLoop]:
    loop = NightLoop()
    yield loop
    loop.close()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_the_c_heap_can_be_trimmed_here() -> None:
    trim = trimmer()
    assert trim is not None
    assert trim() in (True, False)  # called for real: no crash, an answer


def test_the_trim_runs_beside_the_work_on_the_nights_loop(night_loop: NightLoop) -> None:
    calls: list[str] = []
    trimmed = threading.Event()

    def trim() -> None:
        calls.append(threading.current_thread().name)
        trimmed.set()

    async def work() -> None:
        for _ in range(10_000):  # until the trim ran at least once (10 s at most)
            if trimmed.is_set():
                return
            await asyncio.sleep(0.001)
        raise AssertionError("the trim never ran beside the work")

    on_a_loop(night_loop, work(), NightStop(), trim=trim, trim_every=0.001)
    assert calls and set(calls) == {"night-loop"}  # on the night's own loop


def test_the_works_error_still_reaches_the_caller(night_loop: NightLoop) -> None:
    async def work() -> None:
        raise ValueError("the night broke")

    with pytest.raises(ValueError, match="the night broke"):
        on_a_loop(night_loop, work(), NightStop(), trim=lambda: None, trim_every=0.001)


def test_a_trim_that_fails_costs_the_night_nothing(
    night_loop: NightLoop, caplog: pytest.LogCaptureFixture
) -> None:
    failed = threading.Event()

    def trim() -> None:
        failed.set()
        raise OSError("no heap to trim")

    async def work() -> None:
        for _ in range(10_000):
            if failed.is_set():
                return
            await asyncio.sleep(0.001)
        raise AssertionError("the trim never ran")

    on_a_loop(
        night_loop, work(), NightStop(), trim=trim, trim_every=0.001
    )  # no error: the night went on
    assert "stopped handing freed memory back: OSError: no heap to trim" in caplog.text
