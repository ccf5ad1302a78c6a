"""A command job's end is seen when its process exits, not at its next poll: CommandBackend
streams, and a real Watcher listens (real detached processes, a first poll 2 s away)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from nightshift.backends.base import ExternalState, JobSpec, JobStatus, capabilities
from nightshift.backends.command.backend import CommandBackend
from nightshift.backends.command.stream import IDENTITY_EVERY, TICK_S
from nightshift.backoff import Backoff
from nightshift.engine.watcher import Watcher, WatchRequest, WatchResult
from nightshift.errors import PermanentBackendError
from nightshift.loop import NightLoop
from tests.support import wait_until

# the old path: a first poll 2 s after the watch began, then on the night's backoff
POLICY = Backoff(initial=2.0, factor=2.0, max=30.0)
SEEN_WITHIN_S = 1.0  # generous: a stream checks every 0.1 s, a poll comes at 2 s at the soonest


class CountingCommandBackend(CommandBackend):
    """The real backend; counts its status calls (the watcher's polls)."""

    def __init__(self, state_dir: Path) -> None:
        super().__init__(state_dir, kill_grace_s=0.5)
        self.status_calls = 0

    def status(self, external_id: str) -> JobStatus:
        self.status_calls += 1
        return super().status(external_id)


def python(code: str) -> JobSpec:
    return JobSpec("job", "command", {"argv": [sys.executable, "-c", code]})


@dataclass
class Watched:
    """One job under a real Watcher: what it said, and when its watch ended (monotonic)."""

    request: WatchRequest
    seen: list[ExternalState] = field(default_factory=list)
    ended_at: float | None = None

    def result(self, timeout: float = 15.0) -> WatchResult:
        return self.request.future.result(timeout=timeout)


@contextmanager
def watching(backend: CommandBackend, job_id: str, night_loop: NightLoop) -> Iterator[Watched]:
    seen: list[ExternalState] = []
    watcher = Watcher(on_change=lambda _label, state, _status: seen.append(state), loop=night_loop)
    try:
        request = WatchRequest("job", backend, job_id, POLICY)
        watched = Watched(request, seen)

        def ended(_future: object) -> None:
            watched.ended_at = time.monotonic()

        request.future.add_done_callback(ended)
        watcher.watch(request)
        yield watched
    finally:
        watcher.stop()


@pytest.fixture
def backend(tmp_path: Path) -> CountingCommandBackend:
    return CountingCommandBackend(tmp_path / "state")


def test_a_short_jobs_end_is_seen_when_it_exits_not_at_its_first_poll(
    backend: CountingCommandBackend, night_loop: NightLoop
) -> None:
    submitted = time.monotonic()
    job_id = backend.submit(python("import time; time.sleep(0.06)"))
    with watching(backend, job_id, night_loop) as job:
        result = job.result()
    assert job.ended_at is not None
    took = job.ended_at - submitted
    assert result.reason == "final" and result.status is not None
    assert result.status.state is ExternalState.SUCCEEDED and result.status.exit_code == 0
    assert took < SEEN_WITHIN_S, f"seen final {took:.2f}s after the submit"
    assert job.seen[-1] is ExternalState.SUCCEEDED
    assert backend.status_calls <= 1  # the stream said it all: no poll came


def test_a_job_cancelled_while_streamed_ends_cancelled(
    backend: CountingCommandBackend, night_loop: NightLoop
) -> None:
    job_id = backend.submit(python("import time; time.sleep(60)"))
    with watching(backend, job_id, night_loop) as job:
        wait_until(lambda: ExternalState.RUNNING in job.seen, what="running, from the stream")
        backend.cancel(job_id)
        cancelled = time.monotonic()
        result = job.result()
    assert job.ended_at is not None and job.ended_at - cancelled < SEEN_WITHIN_S
    assert result.reason == "final" and result.status is not None
    assert result.status.state is ExternalState.CANCELLED
    assert backend.status_calls <= 1


def test_a_streamed_job_whose_supervisor_is_killed_ends_as_status_says(
    backend: CountingCommandBackend, night_loop: NightLoop
) -> None:
    job_id = backend.submit(python("import time; time.sleep(30)"))
    jobdir = backend.jobs_dir / job_id
    wait_until((jobdir / "child.pid").exists, what="the job's child started")
    child = json.loads((jobdir / "child.pid").read_text())["pid"]
    supervisor = json.loads((jobdir / "runner.pid").read_text())["pid"]
    try:
        with watching(backend, job_id, night_loop) as job:
            wait_until(lambda: ExternalState.RUNNING in job.seen, what="running, from the stream")
            os.kill(supervisor, signal.SIGKILL)
            killed = time.monotonic()
            result = job.result()
        # a supervisor killed -9 may stay a zombie until something reaps it (here pid 1, within
        # about 2 s): signal 0 still finds it, its full identity does, every IDENTITY_EVERY ticks
        assert job.ended_at is not None
        assert job.ended_at - killed < IDENTITY_EVERY * TICK_S + 0.5  # polled: 4 s here
        assert result.reason == "final" and result.status is not None
        said = CommandBackend(backend.jobs_dir.parent).status(job_id)
        assert (result.status.state, result.status.detail) == (said.state, said.detail)
        assert said.state is ExternalState.FAILED
        assert said.detail == "lost: supervisor gone without an exit code"
        assert backend.status_calls <= 1
    finally:
        with suppress(ProcessLookupError):  # the orphaned job: the lost job's cancel is tested
            os.killpg(child, signal.SIGKILL)


# -- the stream itself, without a watcher ----------------------------------------------------


def collect(backend: CommandBackend, job_id: str, timeout: float = 15.0) -> list[JobStatus]:
    async def run() -> list[JobStatus]:
        return [status async for status in backend.stream(job_id)]

    return asyncio.run(asyncio.wait_for(run(), timeout))


def test_a_command_backend_streams_its_jobs(backend: CountingCommandBackend) -> None:
    assert capabilities(backend).streams is backend
    assert backend.streams(backend.submit(python("pass")))
    # polled instead, where its status says what is wrong
    assert not backend.streams("job-00000000") and not backend.streams("../not an id")


def test_the_stream_says_the_current_status_first_then_each_change_up_to_the_final_one(
    backend: CountingCommandBackend,
) -> None:
    job_id = backend.submit(python("import time; time.sleep(0.5)"))
    statuses = collect(backend, job_id)
    states = [s.state for s in statuses]
    assert states[-1] is ExternalState.SUCCEEDED and statuses[-1].exit_code == 0
    # each one a change: a running job that nothing happens to says nothing more
    assert states in (
        [ExternalState.QUEUED, ExternalState.RUNNING, ExternalState.SUCCEEDED],
        [ExternalState.RUNNING, ExternalState.SUCCEEDED],
    )
    assert statuses[-1] == backend.status(job_id)  # the same status a poll gives
    # a final job's stream is its final status, and ends
    assert collect(backend, job_id) == [statuses[-1]]


def test_the_stream_of_an_unknown_job_fails_as_its_status_does(
    backend: CountingCommandBackend,
) -> None:
    with pytest.raises(PermanentBackendError):
        collect(backend, "job-00000000")


def test_many_streams_share_one_loop_and_thread(backend: CountingCommandBackend) -> None:
    """Every check runs on the stream loop itself: no thread per job."""
    jobs = [backend.submit(python("import time; time.sleep(0.3)")) for _ in range(5)]
    before = threading.active_count()
    threads: list[int] = []

    async def run() -> list[list[JobStatus]]:
        async def one(job_id: str) -> list[JobStatus]:
            said = []
            async for status in backend.stream(job_id):
                threads.append(threading.active_count())
                said.append(status)
            return said

        return await asyncio.gather(*(one(j) for j in jobs))

    got = asyncio.run(asyncio.wait_for(run(), 15))
    assert all(statuses[-1].state is ExternalState.SUCCEEDED for statuses in got)
    assert max(threads) == before
