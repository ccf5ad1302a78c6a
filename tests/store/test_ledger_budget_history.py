"""The ledger's history for budgets: every catalogue's dwells, the frame budget_tables reads."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pandas as pd

from nightshift.budgets import columns as budget_columns
from nightshift.budgets.table import budget_tables
from nightshift.store.ledger import BEFORE_CATALOGUES, Ledger

NOW = datetime(2026, 11, 29, 6, 0, tzinfo=UTC)
QUEUED = [10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0]  # one a night, in this order


def _nights(ledger: Ledger, label: str, queued: list[float], running_s: float = 60.0) -> None:
    """One finished job a night: queued for ``queued[i]`` seconds, then running."""
    for i, dwell in enumerate(queued):
        night = f"2026-11-{10 + i:02d}"
        start = NOW - timedelta(days=len(queued) - i)
        for state, offset in [
            ("submitted", 0.0),
            ("queued", 1.0),
            ("running", 1.0 + dwell),
            ("succeeded", 1.0 + dwell + running_s),
        ]:
            at = start + timedelta(seconds=offset)
            ledger.transition(night, f"run-{i}", label, "cli", f"ext-{i}", state, at=at, attempt=1)


def test_the_history_of_all_catalogues_has_the_columns_budgets_read(db_url: str) -> None:
    _nights(Ledger(db_url, "team-a"), "etl", [10.0])
    _nights(Ledger(db_url, "/srv/b/nightshift.yaml"), "etl", [20.0])
    _nights(Ledger(db_url, BEFORE_CATALOGUES), "etl", [30.0])  # belongs to no catalogue

    frame = Ledger(db_url, "anyone").history(NOW - timedelta(days=30), all_catalogues=True)

    assert list(frame.columns) == budget_columns.HISTORY_COLUMNS
    assert sorted(set(frame["catalogue"])) == ["/srv/b/nightshift.yaml", "team-a"]
    assert frame.groupby("catalogue")["dwell_s"].apply(list).to_dict() == {
        "/srv/b/nightshift.yaml": [1.0, 20.0, 60.0],
        "team-a": [1.0, 10.0, 60.0],
    }
    assert str(frame["at"].dtype) == "datetime64[us, UTC]"
    # one catalogue's history keeps its old shape
    mine = Ledger(db_url, "team-a").history(NOW - timedelta(days=30))
    assert list(mine.columns) == budget_columns.HISTORY_COLUMNS[1:]
    pd.testing.assert_frame_equal(
        mine, frame[frame["catalogue"] == "team-a"].drop(columns="catalogue").reset_index(drop=True)
    )


def test_budgets_from_a_real_ledger_match_a_hand_computed_p50_and_p95(db_url: str) -> None:
    ledger = Ledger(db_url, "team-a")
    _nights(ledger, "etl", QUEUED)
    _nights(ledger, "short", [5.0, 5.0, 5.0])  # too few nights: learning

    tables = budget_tables(ledger.history(NOW - timedelta(days=30), all_catalogues=True), NOW)

    states = tables.states.set_index(["label", "state"])
    # 8 queued dwells 10..80: p50 halfway between 40 and 50; p95 at rank 0.95 x 7 = 6.65,
    # i.e. 70 + 0.65 x (80 - 70)
    queued = states.loc[("etl", "queued")]
    assert (queued["n"], queued["p50"], queued["p95"]) == (8, 45.0, 76.5)
    assert (queued["watch_at"], queued["alert_at"], queued["source"]) == (76.5, 153.0, "job")
    running = states.loc[("etl", "running")]
    assert (running["n"], running["p50"], running["p95"], running["source"]) == (
        8,
        60.0,
        60.0,
        "job",
    )
    # "short" has 3 nights of its own, and cli's pooled (backend, state) budget behind it
    short = states.loc[("short", "queued")]
    assert (short["n"], short["source"], short["source_n"]) == (3, "backend", 11)
    # the whole job: 1 + queued + 60 seconds a night
    etl = tables.jobs.set_index("label").loc["etl"]
    assert (etl["n"], etl["p50"], etl["p95"]) == (8, 106.0, 137.5)
