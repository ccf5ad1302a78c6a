"""Dwells within one attempt only: a rerun's resubmission does not count the idle gap."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from nightshift.engine.events import JobChanged
from nightshift.engine.ledger_sink import LedgerSink
from nightshift.loop import NightLoop
from nightshift.store.ledger import DWELL_S, STATE, Ledger

T0 = datetime(2026, 11, 29, 1, 0, tzinfo=UTC)
NIGHT = "2026-11-29"


def _walk(
    ledger: Ledger, run_id: str, attempt: int | None, states: list[tuple[str, float]]
) -> None:
    for state, offset_s in states:
        at = T0 + timedelta(seconds=offset_s)
        ledger.transition(NIGHT, run_id, "etl", "cli", "ext", state, at=at, attempt=attempt)


def _chain(ledger: Ledger) -> list[tuple[str | None, str, float | None, int | None]]:
    return [(r.from_state, r.to_state, r.dwell_s, r.attempt) for r in ledger.dwells(NIGHT)]


def test_a_reruns_idle_gap_is_not_a_dwell(db_url: str) -> None:
    _walk(Ledger(db_url), "run-1", 1, [("submitting", 0), ("queued", 5), ("failed", 65)])
    # the rerun, an hour later in a new process, resubmits as attempt 2
    _walk(Ledger(db_url), "run-2", 2, [("submitting", 3665), ("queued", 3668), ("succeeded", 3700)])

    ledger = Ledger(db_url)
    assert _chain(ledger) == [
        (None, "submitting", None, 1),
        ("submitting", "queued", 5.0, 1),
        ("queued", "failed", 60.0, 1),
        ("failed", "submitting", None, 2),  # the chain stays readable; the gap is no dwell
        ("submitting", "queued", 3.0, 2),
        ("queued", "succeeded", 32.0, 2),
    ]
    history = ledger.history(since=T0)
    assert list(zip(history[STATE], history[DWELL_S], strict=True)) == [
        ("submitting", 5.0),
        ("queued", 60.0),
        ("submitting", 3.0),
        ("queued", 32.0),
    ]


def test_a_night_killed_mid_state_leaves_no_gap_in_that_state(db_url: str) -> None:
    # the night died while the job was queued; the rerun resubmitted two hours later
    _walk(Ledger(db_url), "run-1", 1, [("submitting", 0), ("queued", 5)])
    _walk(Ledger(db_url), "run-2", 2, [("submitting", 7200), ("queued", 7204)])

    ledger = Ledger(db_url)
    assert _chain(ledger)[2:] == [
        ("queued", "submitting", None, 2),
        ("submitting", "queued", 4.0, 2),
    ]
    assert list(ledger.history(since=T0)[DWELL_S]) == [5.0, 4.0]


def test_a_new_attempt_may_begin_in_the_state_the_last_one_ended_in(db_url: str) -> None:
    ledger = Ledger(db_url)
    _walk(ledger, "run-1", 1, [("submitting", 0), ("submitting", 30)])  # a repeat: ignored
    _walk(ledger, "run-2", 2, [("submitting", 600), ("queued", 610)])

    assert _chain(ledger) == [
        (None, "submitting", None, 1),
        ("submitting", "submitting", None, 2),
        ("submitting", "queued", 10.0, 2),
    ]


def test_an_unknown_attempt_measures_as_before(db_url: str) -> None:
    ledger = Ledger(db_url)
    _walk(ledger, "run-1", None, [("queued", 0), ("running", 10)])
    _walk(ledger, "run-2", 3, [("succeeded", 70)])

    assert _chain(ledger) == [
        (None, "queued", None, None),
        ("queued", "running", 10.0, None),
        ("running", "succeeded", 60.0, 3),
    ]


def test_the_ledger_sink_writes_each_events_attempt(db_url: str, night_loop: NightLoop) -> None:
    ledger = Ledger(db_url, "nightly.yaml")
    sink = LedgerSink(ledger, "run-1", loop=night_loop)
    for attempt, state, offset_s in [(1, "queued", 0), (1, "failed", 20), (2, "queued", 900)]:
        at = T0 + timedelta(seconds=offset_s)
        sink(JobChanged(NIGHT, "nightly.yaml", "etl", "cli", attempt, "ext", state, at, None))

    assert _chain(ledger) == [
        (None, "queued", None, 1),
        ("queued", "failed", 20.0, 1),
        ("failed", "queued", None, 2),
    ]
