"""A night's Prefect slots as leases it hands on itself, on a fake server and a fake clock."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import pytest

from nightshift.loop import NightLoop
from nightshift.orchestration.leases import FULL, SlotLeases
from tests.support import FakeClock, wait_until


@dataclass
class FakeServer:
    """A limit of ``size`` slots: leases handed out, renewed and released, every call counted."""

    size: int = 1
    held: set[str] = field(default_factory=set)
    acquires: int = 0
    releases: list[str] = field(default_factory=list)
    renewals: list[str] = field(default_factory=list)
    missing: bool = False
    opened: bool = False
    closed: bool = False
    _n: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def open(self) -> None:
        self.opened = True

    def acquire(self, name: str) -> str | None:
        with self._lock:
            self.acquires += 1
            if self.missing:
                return None
            if len(self.held) >= self.size:
                return FULL
            self._n += 1
            lease = f"{name}#{self._n}"
            self.held.add(lease)
            return lease

    def renew(self, lease: str) -> None:
        self.renewals.append(lease)
        if lease not in self.held:
            raise RuntimeError("lease expired")

    def release(self, lease: str) -> None:
        with self._lock:
            self.held.discard(lease)
            self.releases.append(lease)

    def close(self) -> None:
        self.closed = True


def test_a_lease_handed_on_goes_to_the_next_job_without_a_round_trip(night_loop: NightLoop) -> None:
    server, clock = FakeServer(size=1), FakeClock()
    leases = SlotLeases(server, clock=clock, grace=60, loop=night_loop)
    first = leases.hold("cli", 10)
    first.__enter__()
    leases.hand_on("cli")  # the watcher saw the first job end; its record is still written
    with leases.hold("cli", 10):
        assert server.acquires == 1 and server.releases == []  # the same lease, no API call
        first.__exit__(None, None, None)  # the first job's record is written: nothing more
        assert len(server.held) == 1
    # the second let go with nobody waiting: spare until the grace runs out, then released
    assert leases.release_spare() == 0 and len(server.held) == 1
    clock.advance(60)
    assert leases.release_spare() == 1 and server.held == set()


def test_a_full_limit_is_asked_again_on_a_short_poll_until_the_deadline(
    night_loop: NightLoop,
) -> None:
    server, clock = FakeServer(size=1), FakeClock()
    server.held.add("another-night")
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        clock.advance(seconds)
        if len(waits) == 4:
            server.release("another-night")

    leases = SlotLeases(server, clock=clock, sleep=sleep, loop=night_loop)
    with leases.hold("cli", 10):
        pass
    assert waits == [0.05, 0.1, 0.2, 0.4]  # not Prefect's Retry-After
    assert leases.release_spare(older_than=0) == 1  # no job of ours waits for it
    server.held.add("another-night")
    with pytest.raises(TimeoutError), leases.hold("cli", 1.0):
        pass
    assert clock() - 1000.0 == pytest.approx(0.75 + 1.0)


def test_a_missing_limit_holds_nothing_and_the_night_goes_on(night_loop: NightLoop) -> None:
    server = FakeServer(missing=True)
    leases = SlotLeases(server, loop=night_loop)
    with leases.hold("cli", 1):
        leases.hand_on("cli")
    assert server.releases == []


def test_closing_the_night_releases_every_lease_it_still_has(night_loop: NightLoop) -> None:
    server = FakeServer(size=3)
    leases = SlotLeases(server, grace=3600, loop=night_loop)
    held = leases.hold("cli", 1)
    held.__enter__()
    with leases.hold("cli", 1):
        pass  # spare now
    leases.close()
    assert server.held == set() and len(server.releases) == 2 and server.closed


def test_a_failed_renewal_only_warns(
    caplog: pytest.LogCaptureFixture, night_loop: NightLoop
) -> None:
    server = FakeServer(size=2)
    leases = SlotLeases(server, renew_every=0.01, loop=night_loop)
    with leases.hold("cli", 1):
        server.held.clear()  # the server forgot it (expired): renewing now fails
        wait_until(lambda: "could not renew" in caplog.text, 10, "a renewal to fail")
    leases.close()


def test_opening_the_leases_connects_before_any_slot_is_asked_for(night_loop: NightLoop) -> None:
    server = FakeServer()
    SlotLeases(server, loop=night_loop).open()
    assert (server.opened, server.acquires) == (True, 0)


def test_a_job_behind_another_jobs_slot_request_keeps_its_deadline_and_the_stop(
    night_loop: NightLoop,
) -> None:
    """The night's slot requests go one at a time; a job waiting for its turn to ask still gives
    up at its deadline, or at the night's stop, not after every request ahead of it."""
    import time

    asking = threading.Event()
    answer = threading.Event()

    class SlowFull(FakeServer):
        def acquire(self, name: str) -> str | None:
            asking.set()
            answer.wait(30)  # the first request hangs until the test lets it answer
            return FULL

    leases = SlotLeases(SlowFull(size=0), loop=night_loop)
    gave_up: dict[str, float] = {}

    def job(label: str, timeout_s: float) -> None:
        began = time.monotonic()
        try:
            with leases.hold("cap", timeout_s):
                pass
        except TimeoutError:
            gave_up[label] = time.monotonic() - began

    first = threading.Thread(target=job, args=("first", 60))
    first.start()
    assert asking.wait(10)
    behind = threading.Thread(target=job, args=("behind", 0.3))
    stopped = threading.Thread(target=job, args=("stopped", 60))
    behind.start()
    stopped.start()
    behind.join(10)
    assert "behind" in gave_up and gave_up["behind"] < 5  # its own deadline, not the request's
    leases.interrupt()
    stopped.join(10)
    assert "stopped" in gave_up
    answer.set()
    first.join(10)
    assert "first" in gave_up
