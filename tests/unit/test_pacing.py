"""Submission pace per backend, and a freed slot handed on at once."""

from __future__ import annotations

import threading

import pytest

from nightshift.engine.admission import Admission, Deadline, Pace
from tests.support import FakeClock, admitted, wait_until


# -- the pace ------------------------------------------------------------------------------
def test_each_backend_keeps_its_own_pace() -> None:
    pace = Pace(0.5, rates={"gemini_batch": 2.0})
    # four backends asked at the same moment all go at once: none waits behind another's gap
    assert [pace.reserve(b, 100.0) for b in ("cli", "command", "gemini_batch", "x")] == [100.0] * 4
    # the next submission to each waits for its own gap only: stagger, or 1 / rate
    assert pace.turn("cli", 100.0) == 100.5
    assert pace.turn("gemini_batch", 100.0) == 100.5
    assert pace.reserve("cli", 100.1) == 100.5
    assert pace.reserve("cli", 100.1) == 101.0
    assert pace.turn("command", 100.2) == 100.5
    assert pace.turn("command", 107.0) == 107.0  # a gap long past is not saved up


def test_a_rate_overrides_the_stagger_for_its_backend_only() -> None:
    pace = Pace(0.5, rates={"cli": 0.5})  # 30/min: two seconds apart
    assert (pace.gap("cli"), pace.gap("command")) == (2.0, 0.5)
    times = [pace.reserve("cli", 10.0) for _ in range(4)]
    assert times == [10.0, 12.0, 14.0, 16.0]
    assert Pace(0).reserve("cli", 5.0) == Pace(0).reserve("cli", 5.0) == 5.0


def test_a_thousand_jobs_on_four_backends_are_paced_side_by_side() -> None:
    pace = Pace(0.5)
    backends = ["cli", "command", "gemini_batch", "deployment"]
    last = {b: 0.0 for b in backends}
    for i in range(1000):
        b = backends[i % 4]
        last[b] = pace.reserve(b, 0.0)
    # 250 a backend, half a second apart: the last at 124.5 s, not 499.5 s as one queue
    assert last == {b: 124.5 for b in backends}


def test_admission_turns_are_per_backend_on_a_fake_clock() -> None:
    clock = FakeClock(50.0)
    gate = Admission(stagger=0.5, clock=clock, rates={"cli": 1.0})
    with admitted(gate, "cli", 0), admitted(gate, "command", 0):
        pass  # both at once: neither waits for the other's gap (a wait would hang the fake clock)
    # the next turn of each is a gap away: a deadline before it says so without waiting
    with pytest.raises(Deadline), admitted(gate, "cli", 1, deadline=50.9):
        pass
    with pytest.raises(Deadline), admitted(gate, "command", 1, deadline=50.4):
        pass
    clock.advance(1.0)
    with admitted(gate, "cli", 1, deadline=51.0), admitted(gate, "command", 1, deadline=51.0):
        pass
    with admitted(gate, "cli", 2, stagger=False):
        pass  # a re-attached job needs no turn


# -- the handoff ---------------------------------------------------------------------------
def test_a_freed_slot_goes_to_the_next_job_before_its_holder_lets_go() -> None:
    gate = Admission(stagger=0, caps={"cli": 1})
    holder_in, holder_out, granted = threading.Event(), threading.Event(), threading.Event()

    def holder() -> None:
        with admitted(gate, "cli", 0):
            holder_in.set()
            holder_out.wait(10)  # still writing its record, say

    def next_job() -> None:
        with admitted(gate, "cli", 1):
            granted.set()
            holder_out.wait(10)

    threads = [threading.Thread(target=holder), threading.Thread(target=next_job)]
    threads[0].start()
    holder_in.wait(5)
    threads[1].start()
    wait_until(lambda: len(gate._waiting.get("cli", [])) == 1, 5, "the next job to wait")
    assert not granted.is_set()
    assert gate.free("cli", 0) is True  # the watcher saw the holder's job end
    wait_until(granted.is_set, 5, "the slot to go to the next job")
    assert gate.free("cli", 0) is False  # once only
    holder_out.set()
    for t in threads:
        t.join(5)
    # the holder's exit released nothing twice: the cap holds for the jobs after
    assert gate._in_use["cli"] == 0
    with admitted(gate, "cli", 2):
        assert gate._in_use["cli"] == 1


def test_freeing_an_unknown_job_changes_nothing() -> None:
    gate = Admission(stagger=0, caps={"cli": 2})
    with admitted(gate, "cli", 0):
        assert gate.free("cli", 7) is False
        assert gate.free("command", 0) is False
        assert gate._in_use["cli"] == 1
