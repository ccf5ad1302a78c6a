"""A capped night hands a freed slot on at once, and looks at a job when it should be done."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from nightshift.backends.base import ExternalState, JobSpec
from nightshift.backoff import Backoff
from nightshift.config.loader import parse_catalogue
from nightshift.engine.admission import Admission
from nightshift.engine.events import Consumer, JobChanged, NightEvent
from nightshift.engine.night import NightParts
from nightshift.engine.outcomes import Outcome
from nightshift.engine.plan import plan_night
from nightshift.engine.watcher import Watcher, WatchRequest
from nightshift.loop import NightLoop
from nightshift.store.ledger import Ledger
from tests.night_kit import run_night
from tests.support import FakeClock, ScriptedBackend, new_ledger_url

R, S = ExternalState.RUNNING, ExternalState.SUCCEEDED
CATALOGUE = """\
name: handoff
defaults: {poll: {initial: 2s, max: 30s}, stagger: 0s, retries: 0, deadline: 1h}
limits: {command: 1}
jobs:
  - {label: a, backend: command, argv: [x]}
  - {label: b, backend: command, argv: [x]}
"""


@dataclass
class Timed(ScriptedBackend):
    """Also notes the fake time of each submit and of each status call."""

    clock: FakeClock = field(default_factory=FakeClock)
    submits: dict[str, float] = field(default_factory=dict)
    looks: dict[str, list[float]] = field(default_factory=dict)
    b_submitted: threading.Event = field(default_factory=threading.Event)

    def submit(self, spec: JobSpec) -> str:
        self.submits[spec.label] = self.clock()
        if spec.label == "b":
            self.b_submitted.set()
        return super().submit(spec)

    def status(self, external_id: str):  # type: ignore[no-untyped-def]
        self.looks.setdefault(external_id, []).append(self.clock())
        return super().status(external_id)


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    ledger = Ledger(new_ledger_url(tmp_path / "ledger.db"), "handoff")
    yield ledger
    ledger.close()


def test_the_next_job_gets_the_slot_while_the_ended_one_is_still_recorded(
    tmp_path, ledger, night_loop: NightLoop
):
    clock = FakeClock()
    backend = Timed(name="command", scripts={"a": [R, S], "b": [S]}, clock=clock)
    seen_b_first: list[bool] = []

    def slow_record(event: NightEvent) -> None:
        # a's final row is being written: the slot must already be b's, or this waits in vain
        if isinstance(event, JobChanged) and event.label == "a" and event.state == "succeeded":
            seen_b_first.append(backend.b_submitted.wait(timeout=10))

    catalogue = parse_catalogue(CATALOGUE, tmp_path / "nightshift.yaml")
    parts = NightParts(
        backends={"command": backend},  # type: ignore[dict-item]
        ledger=ledger,
        admission=Admission(0, catalogue.caps, clock=clock),
        # a slow sink is a consumer of the night's loop: it waits off the loop
        sinks=[Consumer(slow_record, night_loop, "test-slow-record")],
        clock=clock,
        wall=clock.wall,
        budgets=None,
        # a usually takes 5 s after its submit: looked at then, not at 6 s on its backoff
        poll_hints=lambda *_: {"a": 5.0},
        loop=night_loop,
    )
    plan = plan_night(catalogue)
    # a's end is seen on the watcher's thread, its final row written on a finish-pool thread
    # while b waits for the slot on its backend's start pool, off the night's event loop
    summary = run_night(
        catalogue, parts, plan, night="2030-01-01", run_id="t", run_dir=tmp_path, clock=clock
    )

    assert {j.label: j.state for j in summary.jobs} == dict.fromkeys("ab", Outcome.SUCCEEDED)
    assert seen_b_first == [True]
    start = backend.submits["a"]
    assert [t - start for t in backend.looks["a"]] == [2.0, 5.0]  # its backoff, then its end
    # b went in on the tick that saw a end: the fake clock had not moved on
    assert backend.submits["b"] == backend.looks["a"][-1]


def test_the_watcher_tells_the_night_the_moment_a_job_is_seen_final(night_loop: NightLoop) -> None:
    clock = FakeClock()
    ended: list[tuple[str, float]] = []
    watcher = Watcher(
        lambda *_: None,
        clock=clock,
        expected={"long": 12.0}.get,
        on_final=lambda label: ended.append((label, clock())),
        loop=night_loop,
    )
    backend = ScriptedBackend(scripts={"long": [R, R, R, S], "short": [S]})
    try:
        start = clock()
        long = watcher.watch(WatchRequest("long", backend, "long", Backoff(2, 2, 30)))
        short = watcher.watch(WatchRequest("short", backend, "short", Backoff(2, 2, 30)))
        for _ in range(200):  # a tenth of a second at a time, settling after each
            clock.advance(0.1)
            watcher.poke()
            assert watcher.wait_idle(timeout=10)
            if long.done():
                break
        assert long.result(timeout=5).reason == short.result(timeout=5).reason == "final"
    finally:
        watcher.stop()
    # looks at 2 (its first look), 12 (its usual end), then 12.6 and 13.8 late
    assert backend.calls["long"] == 4
    assert [(label, round(at - start, 1)) for label, at in ended] == [
        ("short", 2.0),
        ("long", 13.8),
    ]
