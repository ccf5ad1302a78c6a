"""Backoff as a value: its delays, its cap, its jitter under a fixed random source, its errors."""

from __future__ import annotations

import math
from dataclasses import FrozenInstanceError

import pytest

from nightshift.backoff import Backoff, poll_until
from tests.support import FakeClock


def test_delays_grow_by_the_factor_up_to_the_cap() -> None:
    assert Backoff(initial=1, factor=3, max=20).delays(5) == [1, 3, 9, 20, 20]
    assert Backoff(initial=0.02, factor=1, max=0.02).delays(3) == [0.02, 0.02, 0.02]


def test_the_defaults_are_the_polling_schedule() -> None:
    assert Backoff() == Backoff(initial=2, factor=2, max=30, jitter=0)
    assert Backoff().delays(6) == [2, 4, 8, 16, 30, 30]


def test_a_long_night_stays_at_the_cap_without_overflow() -> None:
    assert Backoff(initial=1, factor=1e10, max=60).delay(10_000) == 60
    assert Backoff(initial=2, factor=1.01, max=30).delay(1_000) == 30
    assert Backoff(initial=2, factor=2, max=math.inf).delays(3) == [2, 4, 8]
    assert Backoff(initial=0, factor=2, max=0).delay(10_000) == 0


def test_jitter_is_added_before_the_cap_from_the_given_source() -> None:
    backoff = Backoff(initial=1, factor=2, max=5, jitter=0.5)
    assert backoff.delays(4, rand=lambda: 0.0) == [1, 2, 4, 5]
    assert backoff.delays(4, rand=lambda: 0.5) == [1.25, 2.25, 4.25, 5]
    assert backoff.delay(0, rand=lambda: 0.999) == pytest.approx(1.4995)


def test_jitter_stays_within_its_bounds() -> None:
    backoff = Backoff(initial=1, factor=2, max=100, jitter=0.5)
    for n in range(6):
        low, high = backoff.delay(n, rand=lambda: 0.0), backoff.delay(n, rand=lambda: 1.0)
        assert (low, high) == (2**n, 2**n + 0.5)
        assert low <= backoff.delay(n) <= high  # the real random source


def test_no_jitter_never_asks_the_random_source() -> None:
    def boom() -> float:
        raise AssertionError("asked for a random number")

    assert Backoff().delays(3, rand=boom) == [2, 4, 8]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"initial": -1},
        {"initial": 5, "max": 1},
        {"factor": 0.5},
        {"jitter": -0.1},
        {"jitter": math.inf},
        {"initial": math.nan},
    ],
)
def test_nonsense_is_rejected(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="invalid backoff"):
        Backoff(**kwargs)


def test_a_bad_count_or_draw_is_rejected() -> None:
    with pytest.raises(ValueError, match="from 0"):
        Backoff().delay(-1)
    with pytest.raises(ValueError, match="jitter draw"):
        Backoff(jitter=1).delay(0, rand=lambda: 1.5)


def test_it_is_a_frozen_hashable_value() -> None:
    backoff = Backoff(initial=1, factor=2, max=4)
    with pytest.raises(FrozenInstanceError):
        backoff.initial = 2  # type: ignore[misc]
    assert {backoff, Backoff(1, 2, 4)} == {backoff}


def test_poll_until_waits_by_the_backoff_and_gives_up_at_the_timeout() -> None:
    clock, slept = FakeClock(), []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.advance(seconds)

    backoff = Backoff(initial=1, factor=2, max=4)
    assert not poll_until(lambda: False, 10, backoff, sleep=sleep, clock=clock)
    assert slept == [1, 2, 4, 3]  # the last wait is cut to what is left
    slept.clear()
    checks = iter([False, False, True])
    assert poll_until(lambda: next(checks), 10, backoff, sleep=sleep, clock=clock)
    assert slept == [1, 2]
