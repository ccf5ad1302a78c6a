"""A night's watch and alert rows in the alert log, on SQLite and PostgreSQL, raised on time."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from nightshift.budgets.lookup import FLOOR_S
from nightshift.store.alert_log import DWELL, AlertLog
from nightshift.store.ledger import Ledger
from tests.dwell_night import NIGHT, S, budgets, dwell_night, dwell_of, rows
from tests.support import EPOCH, wait_until

WATCH = ("slow", "submitted", "watch")
ALERT = ("slow", "submitted", "alert")
TICK = timedelta(microseconds=1)


@pytest.fixture
def ledger(db_url: str) -> Iterator[Ledger]:
    ledger = Ledger(db_url, "test")
    yield ledger
    ledger.close()


def test_watch_then_alert_at_their_moments_with_no_poll_between(
    tmp_path: Path, ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    load = lambda _l, _n, _m: budgets("submitted")  # noqa: E731
    # the floor of 100 s polls would be 300 s: this test is about the timer, so only FLOOR_S
    monkeypatch.setattr("nightshift.engine.dwell_watch.dwell_floor", lambda _poll: FLOOR_S)
    # polled every 100 s: the job sits in `submitted` from EPOCH, past both levels before a poll
    with dwell_night(tmp_path, ledger, [S], load) as night:
        dwell = dwell_of(night.ctx)
        assert dwell is not None
        watch_at, alert_at = (
            EPOCH + timedelta(seconds=10) + TICK,
            EPOCH + timedelta(seconds=20) + TICK,
        )
        wait_until(lambda: dwell.waiting_for == watch_at, what="the timer set for the watch")
        night.move(10)  # exactly p95: still ok
        wait_until(lambda: dwell.waiting_for == watch_at, what="the timer back to sleep")
        assert rows(ledger) == [] and night.levels() == []
        night.move(1e-6)
        wait_until(lambda: rows(ledger) == [WATCH], what="the watch row")
        wait_until(lambda: dwell.waiting_for == alert_at, what="the timer set for the alert")
        # kept first, then told and sent by the dwell watch's deliverer, off the loop
        wait_until(lambda: night.levels() == [WATCH], what="the watch told")
        wait_until(lambda: len(night.alerts.sent) == 1, what="the watch sent")
        assert [a.level for a in night.alerts.sent] == ["watch"]  # the sink sends what it lists
        night.move(10)
        wait_until(lambda: rows(ledger) == [WATCH, ALERT], what="the alert row")
        # the row is written before the level is told to the sinks: wait for both (CI, loaded)
        wait_until(lambda: night.levels() == [WATCH, ALERT], what="the alert told")
        wait_until(lambda: len(night.alerts.sent) == 2, what="the alert sent")
        assert [(a.level, a.at) for a in night.alerts.sent] == [
            ("watch", watch_at),
            ("alert", alert_at),
        ]
        assert night.backend.calls["slow"] == 0  # no poll saw any of it: the timer did
        night.run_out(100.0)
    assert night.backend.calls["slow"] == 1
    watch, alert = AlertLog(ledger.engine).alerts(catalogue="test", night=NIGHT)
    assert (watch.kind, watch.raised_by, watch.at, watch.p95_s) == (DWELL, "night", watch_at, 10.0)
    assert watch.dwell_s == pytest.approx(10.000001) and alert.dwell_s == pytest.approx(20.000001)
    assert alert.at == alert_at and alert.detail is not None and "x2.0" in alert.detail
    # the rerun's seed reads them back
    assert AlertLog(ledger.engine).raised("test", NIGHT) == {WATCH, ALERT}
