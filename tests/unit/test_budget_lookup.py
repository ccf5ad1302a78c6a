"""The budgets a night looks up, and ok/watch/alert at their exact boundaries."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest

from nightshift.budgets import Budget, Budgets, classify
from nightshift.budgets.columns import HISTORY_COLUMNS
from nightshift.budgets.lookup import FLOOR_POLLS, FLOOR_S, dwell_floor
from nightshift.budgets.table import at_least, budget_tables

NOW = datetime(2026, 11, 29, 6, 0, tzinfo=UTC)
BUDGET = Budget(p50=40.0, p95=100.0, n=12, source="job")


@pytest.mark.parametrize(
    ("dwell_s", "level"),
    [
        (0.0, "ok"),
        (100.0, "ok"),  # exactly p95 is still normal
        (100.001, "watch"),
        (200.0, "watch"),  # exactly 2 x p95 is still only watch
        (200.001, "alert"),
        (1e9, "alert"),
    ],
)
def test_classify_at_the_boundaries(dwell_s: float, level: str) -> None:
    assert classify(dwell_s, BUDGET) == level


def test_no_budget_is_always_ok() -> None:
    assert classify(1e9, None) == "ok"


def test_a_floor_keeps_an_instant_state_from_alerting_at_once() -> None:
    instant = Budget(p50=0.0, p95=0.0, n=30, source="job")

    assert classify(0.5, instant) == "ok"  # normally instant: held to the floor (5 s)
    assert classify(1e9, instant) == "alert"  # and named past twice it, as any state is
    quick = Budget(p50=1.0, p95=2.0, n=30, source="job")
    assert classify(5.0, quick) == "ok"  # the default floor, FLOOR_S
    assert classify(61, quick, floor_s=60) == "watch"
    assert classify(121, quick, floor_s=60) == "alert"
    assert classify(101, BUDGET, floor_s=60) == "watch"  # a p95 above the floor stands


def test_a_normally_instant_state_is_held_to_the_floor_like_any_other() -> None:
    # issue 17: a pooled `submitted` p95 of 129 ms alerted normal jobs at 0.26 s: the floor
    # keeps them quiet; issue 40: a queue that always started work at once and now holds it
    # is named at the floor, not left to its queued_timeout
    submitted = Budget(p50=0.08, p95=0.129, n=6, source="backend")
    assert submitted.instant and submitted.limits() == (FLOOR_S, 2 * FLOOR_S)
    assert [classify(s, submitted) for s in (0.26, 2.0, 5.0)] == ["ok", "ok", "ok"]
    assert [classify(s, submitted) for s in (5.1, 10.0, 10.1)] == ["watch", "watch", "alert"]


def test_the_floor_is_a_few_seconds_or_a_few_polls() -> None:
    assert dwell_floor(0.5) == FLOOR_S
    assert dwell_floor(30.0) == FLOOR_POLLS * 30.0
    assert Budget(1.0, 1.4, 30).limits(dwell_floor(2.0)) == (6.0, 12.0)


def test_compared_unrounded() -> None:
    # 1.41 s against a p95 of 1.4 s would be "1s against 1s" once rounded
    assert classify(1.41, Budget(1.0, 1.4, 30), floor_s=0) == "watch"
    assert classify(1.399, Budget(1.0, 1.4, 30), floor_s=0) == "ok"


def test_a_budget_says_where_it_watches_and_alerts() -> None:
    assert (BUDGET.watch_at, BUDGET.alert_at) == (100.0, 200.0)


def _history() -> pd.DataFrame:
    rows = []
    for i in range(7):
        at = NOW - timedelta(days=i + 1)
        night = f"night-{i}"
        rows += [
            ("cat", night, "r", "big", "cli", "queued", 10.0 + i, at),
            ("cat", night, "r", "big", "cli", "running", 100.0, at),
        ]
    rows += [("cat", f"n{i}", "r", "small", "cli", "queued", 50.0, NOW) for i in range(3)]
    rows += [("cat", f"n{i}", "r", "small", "cli", "fallback", 5.0, NOW) for i in range(3)]
    frame = pd.DataFrame(rows, columns=HISTORY_COLUMNS)
    frame["at"] = pd.to_datetime(frame["at"], utc=True).dt.as_unit("us")
    return frame


def _budgets() -> Budgets:
    tables = budget_tables(_history(), NOW)
    return Budgets.from_frames(tables.states, tables.backends, tables.jobs)


def test_the_lookup_follows_the_state_table() -> None:
    budgets = _budgets()

    assert budgets.budget("cat", "big", "running") == Budget(100.0, 100.0, 7, "job")
    # small has 3 queued dwells of its own: cli's pooled queued budget, from 10 dwells
    small = budgets.budget("cat", "small", "queued")
    assert small is not None
    assert (small.source, small.n) == ("backend", 10)
    assert budgets.budget("cat", "small", "fallback") is None  # learning (n=3)
    assert budgets.budget("cat", "big", "fallback") is None  # never seen
    assert budgets.budget("other", "big", "running") is None  # another catalogue


def test_a_label_with_no_history_borrows_its_backends_budget() -> None:
    budgets = _budgets()

    borrowed = budgets.budget("cat", "brand-new", "running", backend="cli")

    assert borrowed == Budget(100.0, 100.0, 7, "backend")
    assert budgets.budget("cat", "brand-new", "running") is None  # backend unknown
    assert budgets.budget("cat", "brand-new", "queued", backend="gemini_batch") is None
    # cli's fallback state has 3 dwells in all: too few to lend
    assert budgets.budget("cat", "brand-new", "fallback", backend="cli") is None


def test_the_whole_job_lookup() -> None:
    budgets = _budgets()

    whole = budgets.job("cat", "big")
    assert whole is not None
    assert (whole.p50, whole.n, whole.source) == (113.0, 7, "job")
    assert budgets.job("cat", "small") is None  # three nights: learning


def test_budgets_are_frozen() -> None:
    budgets = _budgets()

    with pytest.raises(dataclasses.FrozenInstanceError):
        budgets.states = {}  # type: ignore[misc]
    with pytest.raises(TypeError):
        budgets.states[("cat", "x", "queued")] = BUDGET  # type: ignore[index]


def test_an_empty_snapshot_has_no_budgets() -> None:
    empty = budget_tables(pd.DataFrame(columns=HISTORY_COLUMNS).astype({"at": "M8[us, UTC]"}), NOW)

    budgets = Budgets.from_frames(*empty)

    assert budgets.budget("cat", "big", "queued", backend="cli") is None
    assert budgets.job("cat", "big") is None


@pytest.mark.parametrize("min_samples", [1, 3, 7, 8])
def test_budgets_stored_from_one_sample_read_as_a_catalogue_with_min_samples_learns(
    min_samples: int,
) -> None:
    # a snapshot keeps every job's own budget (learned with min_samples=1); a reader applies its
    # catalogue's `defaults.min_samples` and gets what the table would have chosen with it
    stored = budget_tables(_history(), NOW, min_samples=1)
    direct = budget_tables(_history(), NOW, min_samples=min_samples)

    read = Budgets.from_frames(*stored, min_samples=min_samples)

    assert read == Budgets.from_frames(*direct, min_samples=min_samples)
    # and so does the pandas side, for people (`nightshift budgets`, the budgets flow)
    pd.testing.assert_frame_equal(at_least(stored, min_samples).states, direct.states)
    pd.testing.assert_frame_equal(at_least(stored, min_samples).jobs, direct.jobs)


def test_min_samples_3_learns_from_3_nights_the_default_needs_7() -> None:
    stored = budget_tables(_history(), NOW, min_samples=1)

    three = Budgets.from_frames(*stored, min_samples=3)
    default = Budgets.from_frames(*stored)

    assert three.job("cat", "small") == Budget(55.0, 55.0, 3, "job")  # queued 50 + fallback 5
    assert three.budget("cat", "small", "fallback") == Budget(5.0, 5.0, 3, "job")
    assert default.job("cat", "small") is None
    assert default.budget("cat", "small", "fallback") is None
    small = default.budget("cat", "small", "queued")  # its own 3 too few: cli's, from 10
    assert small is not None and (small.source, small.n) == ("backend", 10)
