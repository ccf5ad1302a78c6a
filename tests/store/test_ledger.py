"""The dwell ledger and job records on a real SQLite file (and PostgreSQL when configured)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest

from nightshift.store.ledger import (
    AT,
    BACKEND,
    DWELL_S,
    HISTORY_COLUMNS,
    LABEL,
    NIGHT,
    RUN_ID,
    STATE,
    JobRecord,
    Ledger,
)

T0 = datetime(2026, 11, 29, 1, 0, tzinfo=UTC)
NIGHT_1 = "2026-11-29"


def _sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'ledger.sqlite3'}"


@pytest.fixture
def url(db_url: str) -> str:
    """Each test runs on SQLite, and on PostgreSQL when NIGHTSHIFT_TEST_POSTGRES_URL is set."""
    return db_url


def _walk(
    ledger: Ledger, label: str, states: list[tuple[str, float]], run_id: str = "run-1"
) -> None:
    for state, offset_s in states:
        ledger.transition(
            NIGHT_1, run_id, label, "cli", "ext-1", state, at=T0 + timedelta(seconds=offset_s)
        )


def test_transitions_compute_from_state_and_dwell(url: str) -> None:
    ledger = Ledger(url)
    _walk(ledger, "etl", [("queued", 0), ("running", 12.5), ("succeeded", 72.5)])

    rows = ledger.dwells(NIGHT_1)

    assert [(r.from_state, r.to_state, r.dwell_s) for r in rows] == [
        (None, "queued", None),
        ("queued", "running", 12.5),
        ("running", "succeeded", 60.0),
    ]
    assert rows[1].at == T0 + timedelta(seconds=12.5)
    assert rows[1].at.tzinfo is not None


def test_a_dwell_across_disagreeing_clocks_is_kept_as_measured(url: str) -> None:
    ledger = Ledger(url)
    # one host's threads a little out of order: 0; a second host 5 minutes behind: as measured
    _walk(ledger, "etl", [("queued", 0), ("running", -0.4), ("succeeded", -300.4)])

    rows = ledger.dwells(NIGHT_1)

    assert [r.dwell_s for r in rows] == [None, 0.0, -300.0]


def test_repeating_the_current_state_writes_nothing(url: str) -> None:
    ledger = Ledger(url)
    _walk(ledger, "etl", [("queued", 0), ("running", 10), ("running", 20), ("succeeded", 30)])

    assert [r.dwell_s for r in ledger.dwells(NIGHT_1)] == [None, 10.0, 20.0]


def test_a_fresh_ledger_continues_the_chain(url: str) -> None:
    _walk(Ledger(url), "etl", [("queued", 0), ("running", 5)], run_id="run-1")

    # a rerun of the night in a new process re-attaches and sees the job finish
    _walk(Ledger(url), "etl", [("succeeded", 65)], run_id="run-2")

    last = Ledger(url).dwells(NIGHT_1, label="etl")[-1]
    assert (last.run_id, last.from_state, last.to_state, last.dwell_s) == (
        "run-2",
        "running",
        "succeeded",
        60.0,
    )


def test_chains_are_per_night_and_label(url: str) -> None:
    ledger = Ledger(url)
    _walk(ledger, "etl", [("queued", 0)])
    _walk(ledger, "report", [("queued", 3)])
    ledger.transition("2026-11-30", "run-9", "etl", "cli", "ext-9", "queued", at=T0)

    assert [r.from_state for r in ledger.dwells(NIGHT_1)] == [None, None]
    assert [r.from_state for r in ledger.dwells("2026-11-30")] == [None]


def test_naive_datetimes_are_refused(url: str) -> None:
    with pytest.raises(ValueError, match="naive"):
        Ledger(url).transition(NIGHT_1, "r", "etl", "cli", None, "queued", at=datetime(2026, 1, 1))


def test_history_is_completed_dwells_since(url: str) -> None:
    ledger = Ledger(url)
    _walk(ledger, "etl", [("queued", 0), ("running", 10), ("succeeded", 70)])
    _walk(ledger, "report", [("queued", 20), ("running", 50)])

    frame = ledger.history(since=T0 + timedelta(seconds=30))

    expected = pd.DataFrame(
        {
            NIGHT: [NIGHT_1, NIGHT_1],
            RUN_ID: ["run-1", "run-1"],
            LABEL: ["report", "etl"],
            BACKEND: ["cli", "cli"],
            STATE: ["queued", "running"],
            DWELL_S: [30.0, 60.0],
            AT: pd.to_datetime(["2026-11-29T01:00:50Z", "2026-11-29T01:01:10Z"], utc=True),
        }
    )
    pd.testing.assert_frame_equal(frame, expected)


def test_history_of_an_empty_ledger_has_the_columns(url: str) -> None:
    frame = Ledger(url).history(since=T0)

    assert list(frame.columns) == HISTORY_COLUMNS
    assert frame.empty
    assert str(frame[AT].dtype) == "datetime64[us, UTC]"


def test_job_records_round_trip(url: str) -> None:
    ledger = Ledger(url)
    assert ledger.get_job(NIGHT_1, "etl") is None

    ledger.record_submit(NIGHT_1, "etl", "gemini_batch", "batches/123", 1, at=T0)
    ledger.record_state(NIGHT_1, "etl", "running")
    done = T0 + timedelta(minutes=5)
    ledger.record_state(
        NIGHT_1, "etl", "failed", finished_at=done, detail="exit 2", data={"exit_code": 2}
    )

    assert Ledger(url).get_job(NIGHT_1, "etl") == JobRecord(
        night=NIGHT_1,
        label="etl",
        backend="gemini_batch",
        external_id="batches/123",
        state="failed",
        attempts=1,
        submitted_at=T0,
        finished_at=done,
        detail="exit 2",
        data={"exit_code": 2},
    )

    # a rerun redoes the failed job: the new try forgets the old outcome
    ledger.record_submit(NIGHT_1, "etl", "gemini_batch", "batches/456", 2, at=done)
    again = ledger.get_job(NIGHT_1, "etl")
    assert again is not None
    assert (again.external_id, again.attempts, again.state) == ("batches/456", 2, "queued")
    assert (again.finished_at, again.detail, again.data) == (None, None, None)


def test_a_state_for_a_never_submitted_job_is_recorded(url: str) -> None:
    ledger = Ledger(url)
    ledger.record_state(NIGHT_1, "etl", "failed", detail="bad input file")

    job = ledger.get_job(NIGHT_1, "etl")
    assert job is not None
    assert (job.backend, job.state, job.attempts, job.detail) == (
        None,
        "failed",
        0,
        "bad input file",
    )


def test_expected_durations_are_medians_of_succeeded_jobs(url: str) -> None:
    ledger = Ledger(url)
    runs = [
        ("etl", "2026-11-26", 100, "succeeded"),
        ("etl", "2026-11-27", 300, "succeeded"),
        ("etl", "2026-11-28", 200, "succeeded"),
        ("etl", "2026-11-29", 9_000, "failed"),
        ("report", "2026-11-28", 40, "succeeded"),
        ("report", "2026-11-01", 4_000, "succeeded"),  # before `since`
        ("other", "2026-11-28", 10, "succeeded"),  # not asked for
    ]
    for label, night, seconds, state in runs:
        start = datetime.fromisoformat(night).replace(hour=1, tzinfo=UTC)
        ledger.record_submit(night, label, "cli", f"{label}-{night}", 1, at=start)
        ledger.record_state(night, label, state, finished_at=start + timedelta(seconds=seconds))

    since = datetime(2026, 11, 20, tzinfo=UTC)
    assert ledger.expected_durations(["etl", "report", "never"], since) == {
        "etl": 200.0,
        "report": 40.0,
    }
    assert ledger.expected_durations([], since) == {}


def test_the_ledger_creates_missing_directories(tmp_path: Path) -> None:
    ledger = Ledger(f"sqlite:///{tmp_path / 'state' / 'deep' / 'ledger.sqlite3'}")
    ledger.transition(NIGHT_1, "r", "etl", "cli", None, "queued", at=T0)

    assert (tmp_path / "state" / "deep" / "ledger.sqlite3").exists()


def test_two_catalogues_with_the_same_label_on_one_night_do_not_see_each_other(url: str) -> None:
    a, b = Ledger(url, "team-a"), Ledger(url, "/srv/team-b/nightshift.yaml")
    a.record_submit(NIGHT_1, "etl", "cli", "job-a", 1, at=T0)
    _walk(a, "etl", [("queued", 0), ("running", 10), ("succeeded", 70)])
    a.record_state(NIGHT_1, "etl", "succeeded", finished_at=T0 + timedelta(seconds=70))

    # b's etl has never run: no record, no chain to continue, no expected duration
    assert b.get_job(NIGHT_1, "etl") is None
    assert b.dwells(NIGHT_1) == []
    assert b.history(since=T0).empty
    assert b.expected_durations(["etl"], since=T0) == {}

    b.record_submit(NIGHT_1, "etl", "gemini_batch", "batches/b", 1, at=T0 + timedelta(seconds=5))
    b.transition(NIGHT_1, "run-b", "etl", "gemini_batch", "batches/b", "queued", at=T0)
    b.transition(NIGHT_1, "run-b", "etl", "gemini_batch", "batches/b", "succeeded", at=T0)
    b.record_state(NIGHT_1, "etl", "succeeded", finished_at=T0 + timedelta(seconds=905))

    # a fresh Ledger per catalogue (a rerun in a new process) reads only its own rows
    a, b = Ledger(url, "team-a"), Ledger(url, "/srv/team-b/nightshift.yaml")
    job_a, job_b = a.get_job(NIGHT_1, "etl"), b.get_job(NIGHT_1, "etl")
    assert job_a is not None and job_b is not None
    assert (job_a.external_id, job_b.external_id) == ("job-a", "batches/b")
    assert [(r.from_state, r.to_state) for r in a.dwells(NIGHT_1, "etl")] == [
        (None, "queued"),
        ("queued", "running"),
        ("running", "succeeded"),
    ]
    assert [(r.from_state, r.to_state) for r in b.dwells(NIGHT_1, "etl")] == [
        (None, "queued"),
        ("queued", "succeeded"),
    ]
    assert list(a.history(since=T0)[STATE]) == ["queued", "running"]
    assert list(b.history(since=T0)[BACKEND]) == ["gemini_batch"]
    assert a.expected_durations(["etl"], since=T0) == {"etl": 70.0}
    assert b.expected_durations(["etl"], since=T0) == {"etl": 900.0}


def test_a_ledger_without_a_catalogue_is_the_default_one(url: str) -> None:
    Ledger(url).record_state(NIGHT_1, "etl", "failed", detail="bad input")

    assert Ledger(url, "default").get_job(NIGHT_1, "etl") is not None
    assert Ledger(url, "other").get_job(NIGHT_1, "etl") is None
