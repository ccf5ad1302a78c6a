"""Admission: stagger between submissions, per-backend caps granted in priority order."""

from __future__ import annotations

import threading
import time

import pytest

from nightshift.engine.admission import Admission, Deadline
from tests.support import admitted, wait_until


def test_stagger_spaces_submissions() -> None:
    gate = Admission(stagger=0.01)
    before = time.monotonic()
    stamps: list[float] = []
    for _ in range(4):
        with admitted(gate, "cli", 0):
            stamps.append(time.monotonic())
    # the k-th turn is reserved k staggers after the first, which is no earlier than `before`
    assert all(stamp - before >= k * 0.01 for k, stamp in enumerate(stamps)), stamps


def test_cap_grants_waiters_by_priority() -> None:
    gate = Admission(stagger=0, caps={"cli": 1})
    order: list[int] = []
    release = threading.Event()
    holder_in = threading.Event()

    def holder() -> None:
        with admitted(gate, "cli", priority=-1):
            holder_in.set()
            release.wait(5)

    def job(priority: int) -> None:
        with admitted(gate, "cli", priority):
            order.append(priority)

    first = threading.Thread(target=holder)
    first.start()
    holder_in.wait(5)
    waiters = [threading.Thread(target=job, args=(p,)) for p in (3, 1, 2, 0)]
    for w in waiters:
        w.start()
    # all four are queued behind the holder before it lets go
    wait_until(lambda: len(gate._waiting.get("cli", [])) == 4, 5, "4 waiters", interval=0.001)
    release.set()
    for t in [first, *waiters]:
        t.join(5)
    assert order == [0, 1, 2, 3]


def test_uncapped_backends_do_not_wait_for_capped_ones() -> None:
    gate = Admission(stagger=0, caps={"cli": 1})
    with admitted(gate, "cli", 0), admitted(gate, "command", 0):
        pass


def test_waiting_past_the_deadline_raises() -> None:
    gate = Admission(stagger=0, caps={"cli": 1})
    with (
        admitted(gate, "cli", 0),
        pytest.raises(Deadline),
        admitted(gate, "cli", 1, deadline=time.monotonic() + 0.05),
    ):
        pass
    with admitted(gate, "cli", 2):  # the abandoned waiter left no trace
        pass


def test_announced_jobs_are_granted_strictly_in_order_whoever_arrives_first() -> None:
    gate = Admission(stagger=0, caps={"cli": 1})
    gate.expect("cli", [0, 1, 2])
    order: list[int] = []

    def job(priority: int) -> None:
        with admitted(gate, "cli", priority):
            order.append(priority)

    late_starters = [threading.Thread(target=job, args=(p,)) for p in (2, 1)]
    for t in late_starters:
        t.start()
    wait_until(lambda: len(gate._waiting.get("cli", [])) == 2, 5, "2 waiters", interval=0.001)
    assert order == []  # 1 and 2 hold back for 0, which has not even arrived
    gate.withdraw("cli", 0)  # 0 will not come after all (it succeeded earlier tonight)
    for t in late_starters:
        t.join(5)
    assert order == [1, 2]


def test_a_reattached_job_takes_a_slot_but_no_stagger_turn() -> None:
    gate = Admission(stagger=10, caps={"cli": 2})
    start = time.monotonic()
    with admitted(gate, "cli", 0), admitted(gate, "cli", 1, stagger=False):
        assert gate._in_use["cli"] == 2
    assert time.monotonic() - start < 5  # neither waited for the 10 s gap
