"""A retried night's artifacts say which try they are and whether they are current (pure)."""

from __future__ import annotations

from nightshift.orchestration.artifact_tries import described, superseded


def test_a_first_try_is_described_as_before_and_a_retry_says_it_is_current() -> None:
    assert described("partial: 3/5 succeeded", attempt=1) == "partial: 3/5 succeeded"
    assert (
        described("partial: 3/5 succeeded", attempt=2) == "try 2, current: partial: 3/5 succeeded"
    )


def test_an_earlier_tries_description_says_it_was_superseded_once() -> None:
    first = "partial: 2/5 succeeded"
    assert superseded(first, by=2) == "try 1, superseded by try 2: partial: 2/5 succeeded"
    second = described("partial: 3/5 succeeded", attempt=2)
    assert superseded(second, by=3) == "try 2, superseded by try 3: partial: 3/5 succeeded"
    again = superseded(first, by=2)
    assert superseded(again, by=3) == "try 1, superseded by try 3: partial: 2/5 succeeded"
    assert superseded(described("x", attempt=3), by=3) is None  # this try's own
    assert superseded(None, by=2) == "try 1, superseded by try 2: "
