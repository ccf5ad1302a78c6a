"""The watcher with a backend that streams: no polls while the stream holds, polls again when
it drops, timers fire on time either way (a scripted stream, a fake clock)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from nightshift.backends.base import ExternalState, JobStatus, capabilities
from nightshift.backoff import Backoff
from nightshift.engine.watcher import STREAM_RECONNECTS, Watcher, WatchRequest
from nightshift.loop import NightLoop
from tests.support import FakeClock, ScriptedBackend, wait_until

R, S = ExternalState.RUNNING, ExternalState.SUCCEEDED


@dataclass
class StreamingBackend(ScriptedBackend):
    """Status calls follow the script; the stream says what the test pushes (None: it drops)."""

    pushed: list[JobStatus | None] = field(default_factory=list)
    opened: int = 0
    _wake: threading.Event = field(default_factory=threading.Event)

    def push(self, state: ExternalState | None) -> None:
        self.pushed.append(None if state is None else JobStatus(state))
        self._wake.set()

    def streams(self, external_id: str) -> bool:
        return True

    async def stream(self, external_id: str) -> AsyncIterator[JobStatus]:
        self.opened += 1
        while True:
            while not self.pushed:
                await asyncio.sleep(0.005)
            status = self.pushed.pop(0)
            if status is None:
                raise ConnectionError("the stream dropped")
            yield status
            if status.state.final:
                return

    async def aclose(self) -> None:
        return None


def _watch(watcher: Watcher, backend: StreamingBackend, **timers: float) -> WatchRequest:
    request = WatchRequest("a", backend, "a", Backoff(10, 2, 10), **timers)  # type: ignore[arg-type]
    watcher.watch(request)
    return request


def test_a_streamed_end_ends_the_watch_with_no_status_call(night_loop: NightLoop) -> None:
    clock = FakeClock()
    seen: list[ExternalState] = []
    watcher = Watcher(on_change=lambda _l, s, _st: seen.append(s), clock=clock, loop=night_loop)
    backend = StreamingBackend(name="http", scripts={"a": [R]})
    assert capabilities(backend).streams is backend
    try:
        request = _watch(watcher, backend)
        backend.push(R)
        wait_until(lambda: seen == [R], what="running heard")
        clock.advance(100)  # ten polls' worth: none is made while the stream holds
        watcher.poke()
        assert watcher.wait_idle(5)
        backend.push(S)
        result = request.future.result(timeout=10)
        assert (result.reason, seen, backend.single_calls) == ("final", [R, S], 0)
    finally:
        watcher.stop()


def test_a_dropped_stream_is_polled_on_its_backoff(night_loop: NightLoop) -> None:
    clock = FakeClock()
    watcher = Watcher(on_change=lambda *_: None, clock=clock, loop=night_loop)
    backend = StreamingBackend(name="http", scripts={"a": [S]})
    try:
        request = _watch(watcher, backend)
        backend.push(R)
        backend.push(None)

        # R taken (its poll set from the clock as it stands) and the drop heard: the drop can
        # come first, and R taken after the clock moved set its poll past the last move
        def polling() -> bool:
            heard = request.checks == 1 and not request.checking
            return heard and not request.streaming and request.next_at < float("inf")

        wait_until(polling, what="R taken and polling again")
        assert backend.single_calls == 0
        clock.advance(9)
        watcher.poke()
        assert watcher.wait_idle(5)
        assert backend.single_calls == 0  # not before its backoff's 10 s
        clock.advance(1)
        watcher.poke()
        # the poll says it is done: nothing to listen to again
        assert request.future.result(timeout=10).reason == "final"
        assert (backend.single_calls, backend.opened) == (1, 1)
    finally:
        watcher.stop()


@dataclass
class Running:
    """A job watched on a fake clock whose stream said it runs."""

    watcher: Watcher
    clock: FakeClock
    backend: StreamingBackend
    request: WatchRequest

    def later(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.watcher.poke()

    def dropped_then_polled(self) -> None:
        """Its stream drops; its next poll (on its backoff) says it still runs."""
        opened, polls = self.backend.opened, self.backend.single_calls
        self.backend.push(None)
        wait_until(lambda: not self.request.streaming, what="the drop heard")
        self.later(40)  # past any backoff of the job's
        wait_until(lambda: self.backend.single_calls == polls + 1, what="a poll after the drop")
        # its answer taken (its next poll set from the clock as it is) before the test moves on
        assert self.watcher.wait_idle(10)
        assert self.backend.opened in (opened, opened + 1)

    def result(self) -> Any:
        return self.request.future.result(timeout=10)


@contextmanager
def running(
    backend: StreamingBackend, timeout_s: float | None, night_loop: NightLoop
) -> Iterator[Running]:
    clock = FakeClock()
    watcher = Watcher(on_change=lambda *_: None, clock=clock, loop=night_loop)
    try:
        timers = {} if timeout_s is None else {"timeout_at": clock() + timeout_s}
        request = _watch(watcher, backend, **timers)
        backend.push(R)
        wait_until(lambda: request.checks == 1, what="running heard")
        yield Running(watcher, clock, backend, request)
    finally:
        watcher.stop()


def test_a_dropped_stream_is_listened_to_again_once_a_poll_finds_the_job_going(
    night_loop: NightLoop,
) -> None:
    backend = StreamingBackend(name="http", scripts={"a": [R]})
    with running(backend, None, night_loop) as job:
        job.dropped_then_polled()
        wait_until(lambda: backend.opened == 2 and job.request.streaming, what="listened again")
        job.later(1000)  # a hundred polls' worth: none while the new stream holds
        assert job.watcher.wait_idle(5)
        backend.push(S)
        assert job.result().reason == "final"
        assert (backend.single_calls, backend.opened) == (1, 2)


def test_a_stream_that_keeps_dropping_is_given_up_and_its_job_polled(night_loop: NightLoop) -> None:
    backend = StreamingBackend(name="http", scripts={"a": [R] * (STREAM_RECONNECTS + 1) + [S]})
    with running(backend, None, night_loop) as job:
        for again in range(1, STREAM_RECONNECTS + 1):
            job.dropped_then_polled()
            wait_until(lambda: backend.opened == again + 1, what=f"reconnect {again}")  # noqa: B023
        job.dropped_then_polled()  # one drop too many
        job.later(40)
        assert job.result().reason == "final"  # polled to its end
        assert backend.opened == STREAM_RECONNECTS + 1
        assert backend.single_calls == STREAM_RECONNECTS + 2


def test_a_timeout_fires_and_cancels_while_the_stream_holds(night_loop: NightLoop) -> None:
    backend = StreamingBackend(name="http", scripts={"a": [R]})
    with running(backend, 30, night_loop) as job:
        job.later(31)
        assert job.result().reason == "timeout"
        assert backend.cancelled == ["a"] and backend.single_calls == 0


@dataclass
class SlowToAnswerBackend(StreamingBackend):
    """Once ``held`` is set, a status call waits for ``go`` (the one thread the poll crosses)."""

    held: bool = False
    asking: threading.Event = field(default_factory=threading.Event)
    go: threading.Event = field(default_factory=threading.Event)

    def status(self, external_id: str) -> JobStatus:
        if self.held:
            self.asking.set()
            self.go.wait(10)
        return super().status(external_id)


def test_a_watch_that_ends_while_its_stream_is_opened_again_opens_none(
    night_loop: NightLoop,
) -> None:
    """The poll that would open the stream again is out on its thread when the job's timeout
    ends the watch: its answer, when it comes, opens nothing."""
    backend = SlowToAnswerBackend(name="http", scripts={"a": [R]})
    try:
        with running(backend, 60, night_loop) as job:
            backend.held = True
            backend.push(None)
            wait_until(lambda: not job.request.streaming, what="the drop heard")
            job.later(40)  # the poll would say it runs: its stream would be opened again...
            wait_until(backend.asking.is_set, what="the poll out")
            job.later(30)  # ...when its timeout fires and ends the watch
            assert job.result().reason == "timeout"
            backend.go.set()
            assert job.watcher.wait_idle(10)
            wait_until(lambda: backend.single_calls == 1, what="the poll answered")
            assert job.watcher.wait_idle(10)
            assert backend.opened == 1 and job.watcher._streams.listening == 0
    finally:
        backend.go.set()


@dataclass
class BrokenAfterDropBackend(StreamingBackend):
    """Asked whether a job streams a second time, it fails."""

    asked: int = 0

    def streams(self, external_id: str) -> bool:
        self.asked += 1
        if self.asked > 1:
            raise ValueError("config changed under us")
        return True


def test_a_stream_that_cannot_be_opened_again_leaves_its_job_on_its_polls(
    night_loop: NightLoop,
) -> None:
    backend = BrokenAfterDropBackend(name="http", scripts={"a": [R, S]})
    with running(backend, None, night_loop) as job:
        job.dropped_then_polled()
        job.later(40)
        assert job.result().reason == "final"  # polled, not failed
        assert (backend.opened, backend.single_calls) == (1, 2)
