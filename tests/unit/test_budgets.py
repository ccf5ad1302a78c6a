"""Budget tables from literal history frames: the window, final states, the fallback chain."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest

from nightshift.budgets.columns import (
    BACKEND_BUDGET_COLUMNS,
    HISTORY_COLUMNS,
    JOB_BUDGET_COLUMNS,
    STATE_BUDGET_COLUMNS,
)
from nightshift.budgets.table import (
    FINAL,
    backend_budgets,
    budget_tables,
    clock_disagreements,
    job_budgets,
    recent_dwells,
    state_budgets,
)

NOW = datetime(2026, 11, 29, 6, 0, tzinfo=UTC)
NAN = np.nan

Row = tuple[str, str, str, str, str, float, datetime]  # night, label, backend, state, dwell, at


def history(*rows: Row, catalogue: str = "cat", run_id: str = "run-1") -> pd.DataFrame:
    """A frame shaped like Ledger.history() plus the catalogue column."""
    frame = pd.DataFrame(
        [(catalogue, night, run_id, *rest) for night, *rest in rows], columns=HISTORY_COLUMNS
    )
    for column in HISTORY_COLUMNS[:-2]:
        frame[column] = frame[column].astype(str)
    frame["dwell_s"] = frame["dwell_s"].astype(float)
    frame["at"] = pd.to_datetime(frame["at"], utc=True).dt.as_unit("us")
    return frame


def nightly(label: str, state: str, dwells: list[float], backend: str = "cli") -> list[Row]:
    """One dwell a night for ``label`` in ``state``, the latest ending an hour before NOW."""
    rows = []
    for i, dwell in enumerate(dwells):
        at = NOW - timedelta(days=len(dwells) - i, hours=-23)
        rows.append((f"night-{i:02d}", label, backend, state, dwell, at))
    return rows


def states_frame(rows: list[tuple[object, ...]]) -> pd.DataFrame:
    """An expected state table from (catalogue, label, state, backend, n, p50, p95, source, n')."""
    frame = pd.DataFrame(
        [(*r[:7], r[6] * 1.0, r[6] * 2.0, r[7], r[8], f"{r[7]} (n={r[8]})") for r in rows],
        columns=STATE_BUDGET_COLUMNS,
    )
    return frame.astype({"n": "int64", "source_n": "int64", "p50": float, "p95": float})


def test_a_job_with_enough_samples_has_its_own_budget() -> None:
    frame = history(*nightly("etl", "queued", [1, 2, 3, 4, 5, 6, 7]))

    got = state_budgets(frame, NOW)

    # linear interpolation: p95 sits 0.7 of the way from the 6th to the 7th sample
    expected = states_frame([("cat", "etl", "queued", "cli", 7, 4.0, 6.7, "job", 7)])
    pd.testing.assert_frame_equal(got, expected)


def test_every_non_final_state_of_a_job_gets_a_row() -> None:
    frame = history(
        *nightly("etl", "submitted", [1.0] * 7),
        *nightly("etl", "queued", [10.0] * 7),
        *nightly("etl", "running", [100.0] * 7),
        *nightly("etl", "fallback", [1000.0] * 7),
    )

    got = state_budgets(frame, NOW)

    expected = states_frame(
        [
            ("cat", "etl", "fallback", "cli", 7, 1000.0, 1000.0, "job", 7),
            ("cat", "etl", "queued", "cli", 7, 10.0, 10.0, "job", 7),
            ("cat", "etl", "running", "cli", 7, 100.0, 100.0, "job", 7),
            ("cat", "etl", "submitted", "cli", 7, 1.0, 1.0, "job", 7),
        ]
    )
    pd.testing.assert_frame_equal(got, expected)


def test_dwells_in_final_states_are_not_budgeted() -> None:
    # a dwell in a final state is the gap before a rerun resubmitted the job
    finals = [("n", "etl", "cli", state, 3600.0, NOW) for state in sorted(FINAL)]
    frame = history(*nightly("etl", "running", [5.0] * 7), *finals)

    got = state_budgets(frame, NOW)

    assert list(got["state"]) == ["running"]
    assert {"succeeded", "failed", "cancelled", "timeout", "stuck_queued"} <= FINAL
    assert not {"submitting", "submitted", "queued", "running", "fallback", "lost"} & FINAL


def test_only_the_window_counts_and_its_start_is_included() -> None:
    start = NOW - timedelta(days=30)
    frame = history(
        ("a", "etl", "cli", "queued", 1.0, start),  # exactly 30 days old: counts
        ("b", "etl", "cli", "queued", 2.0, start - timedelta(microseconds=1)),  # older
        ("c", "etl", "cli", "queued", 4.0, NOW),  # ends now: counts
        ("d", "etl", "cli", "queued", 8.0, NOW + timedelta(microseconds=1)),  # after now
    )

    assert list(recent_dwells(frame, NOW)["dwell_s"]) == [1.0, 4.0]
    assert list(state_budgets(frame, NOW, min_samples=2)["n"]) == [2]


def test_a_dwell_whose_clocks_disagree_is_kept_out_of_learning_and_named() -> None:
    # two hosts wrote one job's rows, the second's clock 5 minutes behind: a negative dwell;
    # and one 5 days long, across a night no state lasts
    frame = history(
        *nightly("etl", "queued", [10.0] * 7),
        ("skewed", "etl", "cli", "queued", -290.0, NOW),
        ("stale", "etl", "cli", "queued", 5 * 86_400.0, NOW),
        ("ok", "etl", "cli", "queued", 86_400.0, NOW),  # a whole day still counts
    )

    assert list(recent_dwells(frame, NOW)["night"])[-1] == "ok"
    assert len(recent_dwells(frame, NOW)) == 8
    assert list(state_budgets(frame, NOW)["n"]) == [8]
    left_out = clock_disagreements(frame, NOW)
    assert list(left_out["night"]) == ["skewed", "stale"]
    assert list(left_out["dwell_s"]) == [-290.0, 5 * 86_400.0]


def test_the_window_is_an_argument() -> None:
    frame = history(*nightly("etl", "queued", [1, 2, 3, 4, 5, 6, 7]))

    # the nightly rows end 6..0 days and 23 hours before NOW: three fit in 3 days
    got = state_budgets(frame, NOW, window=timedelta(days=3), min_samples=1)

    assert list(got["n"]) == [3]
    assert list(got["p50"]) == [6.0]


def test_small_samples_fall_back_to_the_backend_then_to_learning() -> None:
    frame = history(
        *nightly("big", "queued", [10.0] * 7),  # enough on its own
        *nightly("small", "queued", [40.0, 40.0, 40.0]),  # 3: uses cli's queued (10 rows)
        *nightly("small", "running", [5.0, 5.0, 5.0]),  # cli's running has 3 rows: learning
    )

    got = state_budgets(frame, NOW)

    # the pooled p95 of seven 10 s and three 40 s dwells: 40, p50: 10
    expected = states_frame(
        [
            ("cat", "big", "queued", "cli", 7, 10.0, 10.0, "job", 7),
            ("cat", "small", "queued", "cli", 3, 10.0, 40.0, "backend", 10),
            ("cat", "small", "running", "cli", 3, NAN, NAN, "learning", 3),
        ]
    )
    pd.testing.assert_frame_equal(got, expected)
    assert list(got["basis"]) == ["job (n=7)", "backend (n=10)", "learning (n=3)"]


def test_the_fallback_uses_the_backend_a_label_ran_on_last() -> None:
    frame = history(
        *nightly("pool", "queued", [10.0] * 7, backend="cli"),
        *nightly("pool2", "queued", [99.0] * 7, backend="gemini_batch"),
        ("old", "moved", "gemini_batch", "queued", 1.0, NOW - timedelta(days=5)),
        ("new", "moved", "cli", "queued", 1.0, NOW - timedelta(days=1)),
        *nightly("gone", "fallback", [5.0] * 7, backend="gemini_batch"),
        ("old", "moved", "gemini_batch", "fallback", 5.0, NOW - timedelta(days=5)),
    )

    got = state_budgets(frame, NOW).set_index(["label", "state"])

    assert got.loc[("moved", "queued"), "backend"] == "cli"
    assert got.loc[("moved", "queued"), "p95"] == 10.0  # cli pooled: seven 10 s and one 1 s
    # cli has never been in fallback: gemini_batch's budget is not borrowed for it
    assert got.loc[("moved", "fallback"), "basis"] == "learning (n=1)"


def test_catalogues_are_kept_apart() -> None:
    a = history(*nightly("etl", "queued", [10.0] * 7), catalogue="a")
    b = history(*nightly("etl", "queued", [20.0] * 3), catalogue="b")

    got = state_budgets(pd.concat([a, b], ignore_index=True), NOW)

    assert list(got["catalogue"]) == ["a", "b"]
    assert list(got["source"]) == ["job", "learning"]  # b does not borrow a's cli budget


def test_backend_budgets_pool_every_label_of_the_backend() -> None:
    frame = history(
        *nightly("x", "queued", [1.0, 3.0]),
        *nightly("y", "queued", [5.0]),
        *nightly("z", "queued", [7.0], backend="gemini_batch"),
    )

    got = backend_budgets(frame, NOW)

    expected = pd.DataFrame(
        [("cat", "cli", "queued", 3, 3.0, 4.8), ("cat", "gemini_batch", "queued", 1, 7.0, 7.0)],
        columns=BACKEND_BUDGET_COLUMNS,
    ).astype({"n": "int64"})
    pd.testing.assert_frame_equal(got, expected)


def test_the_whole_job_sums_a_nights_dwells_across_its_runs() -> None:
    rows: list[Row] = []
    for i in range(7):
        night, at = f"night-{i}", NOW - timedelta(days=7 - i)
        rows += [(night, "etl", "cli", "queued", 60.0, at), (night, "etl", "cli", "running", i, at)]
    first = history(*rows[:12], run_id="run-1")
    # the last night: the first run was killed while running; a rerun re-attached and saw the
    # job through, after an hour in `failed` that is not the job's time
    rerun = history(rows[13], ("night-6", "etl", "cli", "failed", 3600.0, NOW), run_id="run-2")
    last_queued = history(rows[12], run_id="run-1")
    frame = pd.concat([first, last_queued, rerun], ignore_index=True)

    got = job_budgets(frame, NOW)

    # one sample a night: 60 + i seconds for i = 0..6
    expected = pd.DataFrame(
        [("cat", "etl", "cli", 7, 63.0, 65.7, 65.7, 131.4, "job", 7, "job (n=7)")],
        columns=JOB_BUDGET_COLUMNS,
    ).astype({"n": "int64", "source_n": "int64"})
    pd.testing.assert_frame_equal(got, expected)


def test_a_job_with_few_nights_is_still_learning_as_a_whole() -> None:
    frame = history(*nightly("etl", "running", [10.0, 20.0, 30.0]))

    got = job_budgets(frame, NOW)

    expected = pd.DataFrame(
        [("cat", "etl", "cli", 3, NAN, NAN, NAN, NAN, "learning", 3, "learning (n=3)")],
        columns=JOB_BUDGET_COLUMNS,
    ).astype({"n": "int64", "source_n": "int64", "p50": float})
    pd.testing.assert_frame_equal(got, expected)


def test_one_pass_gives_the_same_three_tables() -> None:
    frame = history(
        *nightly("etl", "queued", [1, 2, 3, 4, 5, 6, 7]),
        *nightly("other", "running", [3.0, 4.0]),
    )

    tables = budget_tables(frame, NOW)

    pd.testing.assert_frame_equal(tables.states, state_budgets(frame, NOW))
    pd.testing.assert_frame_equal(tables.backends, backend_budgets(frame, NOW))
    pd.testing.assert_frame_equal(tables.jobs, job_budgets(frame, NOW))


def test_an_empty_history_gives_empty_tables_with_their_columns() -> None:
    tables = budget_tables(history(), NOW)

    assert list(tables.states.columns) == STATE_BUDGET_COLUMNS
    assert list(tables.backends.columns) == BACKEND_BUDGET_COLUMNS
    assert list(tables.jobs.columns) == JOB_BUDGET_COLUMNS
    assert tables.states.empty and tables.backends.empty and tables.jobs.empty


def test_a_naive_now_is_refused() -> None:
    with pytest.raises(ValueError, match="naive"):
        state_budgets(history(), NOW.replace(tzinfo=None))


def test_the_history_columns_are_the_ledgers_plus_the_catalogue() -> None:
    from nightshift.store.ledger import HISTORY_COLUMNS as LEDGER_COLUMNS

    assert ["catalogue", *LEDGER_COLUMNS] == HISTORY_COLUMNS
