"""A job's usual duration: one definition of p10/p50/p95 from its nights."""

from __future__ import annotations

import math

import pytest

from nightshift.usual import Usual, percentile, usual_after_submit


def test_percentiles_interpolate_between_samples_like_numpy() -> None:
    values = [10.0, 20.0, 30.0, 40.0, 50.0]
    assert [percentile(values, q) for q in (0, 10, 50, 95, 100)] == [10, 14, 30, 48, 50]


def test_one_night_is_its_own_p10_p50_and_p95() -> None:
    assert Usual.of([70.0]) == Usual.exactly(70.0) == Usual(70.0, 70.0, 70.0, 1)
    assert Usual.of([]) is None


def test_each_night_is_one_sample_its_states_after_submit_summed() -> None:
    rows = [
        ("n1", "etl", "submitting", 5.0),  # before the submit's answer: not counted
        ("n1", "etl", "queued", 10.0),
        ("n1", "etl", "running", 50.0),
        ("n2", "etl", "queued", math.nan),  # a resubmission's first row has no dwell
        ("n2", "etl", "running", 80.0),
        ("n1", "report", "running", 7.0),
    ]
    found = usual_after_submit(rows)
    assert found["etl"] == Usual(p10=62.0, p50=70.0, p95=79.0, n=2)
    assert found["report"] == Usual.exactly(7.0)


def test_a_dwell_whose_clocks_disagree_counts_nothing() -> None:
    rows = [
        ("n1", "etl", "running", 50.0),
        ("n2", "etl", "queued", 10.0),
        ("n2", "etl", "running", -290.0),  # two hosts' clocks 5 minutes apart
        ("n3", "etl", "running", 3 * 86_400.0),  # longer than any night
    ]
    # n2's whole night is left out: its sum would be wrong by as much as the clocks disagree
    assert usual_after_submit(rows)["etl"] == Usual.exactly(50.0)


def test_nonsense_is_rejected() -> None:
    with pytest.raises(ValueError, match="p10 <= p50 <= p95"):
        Usual(5.0, 4.0, 6.0)
    with pytest.raises(ValueError, match="at least one value"):
        percentile([], 50)
