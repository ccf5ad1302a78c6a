"""Dwell detection in a whole night: on time between polls, once per level, across a rerun."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from nightshift.budgets.current import current_budgets
from nightshift.engine.events import ExpectedDurations, LevelChanged
from nightshift.store.ledger import Ledger
from tests.dwell_night import NIGHT, Q, R, S, budgets, dwell_night, dwell_of, rows
from tests.support import EPOCH, FakeClock, new_ledger_url, wait_until

WATCH = ("slow", "queued", "watch")
ALERT = ("slow", "queued", "alert")


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    ledger = Ledger(new_ledger_url(tmp_path / "ledger.db"), "test")
    yield ledger
    ledger.close()


def test_each_level_once_across_many_polls(tmp_path: Path, ledger: Ledger) -> None:
    script = [Q] * 40 + [S]
    load = lambda _l, _n, _m: budgets("queued")  # noqa: E731
    with dwell_night(tmp_path, ledger, script, load, poll="1s") as night:
        night.run_out(1.0)
    assert night.backend.calls["slow"] == 41  # a poll every second, the whole wait long
    assert night.levels() == [WATCH, ALERT]
    assert rows(ledger) == [WATCH, ALERT]
    # both levels reach the AlertSink, which sends what `notify.alert_levels` lists
    assert [(a.state, a.level) for a in night.alerts.sent] == [
        ("queued", "watch"),
        ("queued", "alert"),
    ]
    # each went out when the wait passed its level: p95 (10 s) and 2 x p95, give or take a poll
    watch, alert = (e.alert for e in night.events if isinstance(e, LevelChanged))
    assert 10 < watch.dwell_s <= 12 and 20 < alert.dwell_s <= 22


def test_a_rerun_re_attaching_repeats_nothing(tmp_path: Path, ledger: Ledger) -> None:
    load = lambda _l, _n, _m: budgets("queued")  # noqa: E731
    owns = [True]
    # the first night raises both levels, then loses its lease: the job stays queued in the ledger
    # polled every second: the dwell floor (3 polls) stays below the budget's 10 s
    with dwell_night(
        tmp_path, ledger, [Q] * 100, load, poll="1s", owns_night=lambda: owns[0]
    ) as first:
        first.move(100)  # the first poll: queued
        wait_until(lambda: first.state() == "queued", what="queued")
        first.move(25)  # past 2 x p95 with no poll: both levels at once
        wait_until(lambda: rows(ledger) == [WATCH, ALERT], what="both levels kept")
        owns[0] = False
    assert first.levels() == [WATCH, ALERT] and len(first.alerts.sent) == 2
    assert ledger.get_job(NIGHT, "slow").state == "queued"

    again = Ledger(ledger.url, "test")
    # before its queued_timeout (15m) runs out
    later = FakeClock(epoch=EPOCH + timedelta(minutes=5))
    try:
        with dwell_night(tmp_path, again, [Q, Q, S], load, clock=later) as second:
            dwell = dwell_of(second.ctx)
            assert dwell is not None
            assert dwell.raised() == {WATCH, ALERT}  # seeded from the log
            second.run_out(5.0)  # queued for 200 s: far past both levels, polled and ticked
        assert second.backend.submitted == []  # re-attached, not submitted again
        assert [e.state for e in second.events if hasattr(e, "state")][-1] == "succeeded"
        assert second.levels() == [] and second.alerts.sent == []
        assert rows(again) == [WATCH, ALERT]
    finally:
        again.close()


def test_a_night_that_lost_its_lease_keeps_and_announces_nothing(
    tmp_path: Path, ledger: Ledger
) -> None:
    load = lambda _l, _n, _m: budgets("queued")  # noqa: E731
    with dwell_night(
        tmp_path, ledger, [Q] * 100, load, poll="1s", owns_night=lambda: False
    ) as night:
        night.move(100)
        wait_until(lambda: night.state() == "queued", what="queued")
        dwell = dwell_of(night.ctx)
        assert dwell is not None
        night.move(25)
        wait_until(lambda: dwell.raised() == {WATCH, ALERT}, what="the levels passed")
    # the night is over, its timer joined: whatever it was doing has been done
    assert rows(ledger) == []
    assert night.levels() == [] and night.alerts.sent == []


def _shape(events: list) -> list[tuple[str, str, str]]:
    """Each event's kind, job and state: what a night without budgets must keep the same."""
    out = []
    for event in events:
        label = getattr(event, "label", None) or getattr(
            getattr(event, "outcome", None), "label", ""
        )
        out.append((type(event).__name__, label, str(getattr(event, "state", ""))))
    return out


def test_a_night_with_no_history_behaves_as_before(tmp_path: Path) -> None:
    shapes = []
    for load in (current_budgets, None):  # an empty ledger's budgets; no detection at all
        folder = tmp_path / ("learned" if load else "none")
        folder.mkdir()
        ledger = Ledger(new_ledger_url(folder / "ledger.db"), "test")
        try:
            with dwell_night(folder, ledger, [Q] * 30 + [R] * 30 + [S], load, poll="1s") as n:
                assert (dwell_of(n.ctx) is not None) == (load is not None)
                n.run_out(1.0)
            shapes.append(_shape(n.events))
            assert not any(isinstance(e, LevelChanged | ExpectedDurations) for e in n.events)
            assert rows(ledger) == [] and n.alerts.sent == []
            assert [t.to_state for t in ledger.dwells(NIGHT, "slow")][-1] == "succeeded"
        finally:
            ledger.close()
    assert shapes[0] == shapes[1]


def test_budgets_that_cannot_be_read_log_one_line_and_the_night_runs(
    tmp_path: Path, ledger: Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(_ledger: Ledger, _now: object, _min_samples: int) -> None:
        raise RuntimeError("snapshot table missing\nsecond line")

    with (
        caplog.at_level(logging.WARNING, logger="nightshift.detection"),
        dwell_night(tmp_path, ledger, [Q, S], broken, poll="1s") as night,  # type: ignore[arg-type]
    ):
        assert dwell_of(night.ctx) is None
        night.run_out(1.0)
    lines = [r.getMessage() for r in caplog.records if r.name == "nightshift.detection"]
    assert lines == [
        "no dwell watch tonight: the budgets could not be read: "
        "RuntimeError: snapshot table missing"
    ]
    assert [t.to_state for t in ledger.dwells(NIGHT, "slow")][-1] == "succeeded"
