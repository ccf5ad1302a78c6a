"""Watch and alert levels against learned budgets: classification, once per night, wake-ups."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest

from nightshift.budgets.lookup import Budget, classify
from nightshift.engine.alerts import Alert, AlertSink, LogAlertSink
from nightshift.engine.detection import BudgetTable, Detector, level_moments

T0 = datetime(2026, 11, 29, 1, 0, tzinfo=UTC)
QUEUED = Budget(p50=300.0, p95=600.0)  # watch past 10 min, alert past 20 min
RUNNING = Budget(p50=1200.0, p95=1800.0)
BUDGETS = BudgetTable({("etl", "queued"): QUEUED, ("etl", "running"): RUNNING})


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def detector(raised=()) -> Detector:
    return Detector("2026-11-29", "nightly", BUDGETS, raised=raised)


def observe(d: Detector, state: str, entered: float, now: float, label: str = "etl"):
    return d.observe(label, state, entered_at=at(entered), now=at(now), backend="cli")


def levels(alerts: list[Alert]) -> list[tuple[str, str]]:
    return [(a.state, a.level) for a in alerts]


@pytest.mark.parametrize(
    ("dwell", "level"),
    [
        (0.0, "ok"),
        (600.0, "ok"),  # exactly p95 is still normal
        (600.001, "watch"),
        (1200.0, "watch"),  # exactly 2 x p95 is a watch, not yet an alert
        (1200.001, "alert"),
        (86400.0, "alert"),
    ],
)
def test_classification_at_the_boundaries(dwell: float, level: str) -> None:
    assert classify(dwell, QUEUED) == level


def test_no_budget_never_alerts() -> None:
    assert classify(10**9, None) == "ok"
    d = detector()
    for minute in range(0, 24 * 60, 5):
        assert observe(d, "queued", 0, minute * 60, label="new-job") == []
        assert d.tick(at(minute * 60)) == []
    assert d.next_wake() is None
    assert d.raised == frozenset()


def test_a_budget_of_zero_is_held_to_the_floor_and_p50_above_p95_is_refused() -> None:
    # a queue that always started work at once (p95 0) and now holds it for an hour: named,
    # at the floor's levels, not only when queued_timeout ends it (issue 40)
    d = Detector("2026-11-29", "cat", BudgetTable({("etl", "queued"): Budget(p50=0.0, p95=0.0)}))
    found = d.observe("etl", "queued", entered_at=at(0), now=at(3600), backend="cli")
    assert levels(found) == [("queued", "watch"), ("queued", "alert")]
    assert found[-1].measure() == "1h00m (p95 0.0s, floor 5.0s)"
    with pytest.raises(ValueError):
        Budget(p50=20.0, p95=10.0)


def test_each_level_is_announced_once_across_many_polls() -> None:
    d = detector()
    seen = [a for s in range(0, 3 * 3600, 30) for a in observe(d, "queued", 0, s)]
    seen += [a for s in range(0, 3 * 3600, 7) for a in d.tick(at(s))]
    assert levels(seen) == [("queued", "watch"), ("queued", "alert")]
    assert d.raised == {("etl", "queued", "watch"), ("etl", "queued", "alert")}


def test_watch_then_alert_escalation_carries_the_dwell_and_budget() -> None:
    d = detector()
    assert observe(d, "queued", 0, 600) == []
    (watch,) = observe(d, "queued", 0, 630)
    assert observe(d, "queued", 0, 1200) == []
    (alert,) = observe(d, "queued", 0, 1230)
    assert (watch.level, watch.dwell_s, watch.p95_s, watch.at) == ("watch", 630.0, 600.0, at(630))
    assert (alert.level, alert.dwell_s, alert.at) == ("alert", 1230.0, at(1230))
    assert (alert.night, alert.catalogue, alert.label, alert.backend, alert.state) == (
        "2026-11-29",
        "nightly",
        "etl",
        "cli",
        "queued",
    )


def test_a_skipped_level_is_announced_before_the_alert() -> None:
    d = detector()
    assert levels(observe(d, "queued", 0, 5000)) == [("queued", "watch"), ("queued", "alert")]


def test_a_new_state_starts_over() -> None:
    d = detector()
    assert levels(observe(d, "queued", 0, 700)) == [("queued", "watch")]
    # running since 800 s: its dwell counts from there, not from the submit
    assert observe(d, "running", 800, 800 + 1800) == []
    assert levels(observe(d, "running", 800, 800 + 1801)) == [("running", "watch")]
    assert levels(d.tick(at(800 + 3601))) == [("running", "alert")]


def test_a_state_entered_again_does_not_repeat_its_levels_tonight() -> None:
    d = detector()
    assert levels(observe(d, "queued", 0, 700)) == [("queued", "watch")]
    observe(d, "running", 800, 900)
    # a retry queues again: its watch was announced tonight; its alert was not
    assert observe(d, "queued", 1000, 1700) == []
    assert levels(observe(d, "queued", 1000, 2300)) == [("queued", "alert")]


def test_a_rerun_seeded_with_tonights_raised_levels_repeats_none() -> None:
    first = detector()
    raised = [a.key for s in range(0, 4000, 30) for a in observe(first, "queued", 0, s)]
    assert raised == [("etl", "queued", "watch"), ("etl", "queued", "alert")]
    rerun = detector(raised=raised)
    for s in range(4000, 8000, 30):
        assert observe(rerun, "queued", 0, s) == []
        assert rerun.tick(at(s)) == []
    assert rerun.next_wake() is None
    # what it did not raise yet, it still raises
    assert levels(observe(rerun, "running", 8000, 8000 + 1801)) == [("running", "watch")]


def test_a_rerun_seeded_with_a_watch_still_raises_the_alert() -> None:
    rerun = detector(raised=[("etl", "queued", "watch")])
    assert levels(observe(rerun, "queued", 0, 5000)) == [("queued", "alert")]


def test_next_wake_times_are_the_first_moments_past_p95_and_twice_p95() -> None:
    d = detector()
    observe(d, "queued", 100, 100)
    watch_at, alert_at = at(100 + 600 + 1e-6), at(100 + 1200 + 1e-6)
    assert level_moments(QUEUED, at(100)) == {"watch": watch_at, "alert": alert_at}
    assert d.next_change_at("etl") == d.next_wake() == watch_at
    assert d.tick(watch_at - timedelta(microseconds=1)) == []
    assert levels(d.tick(watch_at)) == [("queued", "watch")]
    assert d.next_wake() == alert_at
    assert levels(d.tick(alert_at)) == [("queued", "alert")]
    assert d.next_wake() is None


def test_next_wake_is_the_earliest_over_watched_jobs_and_forgets_final_ones() -> None:
    budgets = BudgetTable({("a", "running"): RUNNING, ("b", "queued"): QUEUED})
    d = Detector("n", "c", budgets)
    d.observe("a", "running", entered_at=at(0), now=at(0), backend="cli")
    d.observe("b", "queued", entered_at=at(50), now=at(50), backend="gemini_batch")
    assert d.next_wake() == at(650 + 1e-6)
    d.forget("b")
    assert d.next_wake() == at(1800 + 1e-6)
    assert d.next_change_at("b") is None


def test_the_log_sink_is_an_alert_sink(caplog: pytest.LogCaptureFixture) -> None:
    sink: AlertSink = LogAlertSink(logging.getLogger("test.alerts"))
    d = detector()
    with caplog.at_level(logging.INFO, logger="test.alerts"):
        for alert in observe(d, "queued", 0, 3 * 3600):
            sink.send(alert)
    # a watch is for the record (INFO), an alert for someone to act on (ERROR)
    assert [r.levelno for r in caplog.records] == [logging.INFO, logging.ERROR]
    assert caplog.records[1].getMessage() == (
        "alert: nightly/etl (cli) queued for 3h00m (p95 10m, x18.0) night 2026-11-29"
    )


def test_a_state_that_is_normally_instant_is_named_only_past_the_floor() -> None:
    # one real night of history: `submitted` pooled p95 129 ms; a normal submit took 0.26-2 s
    table = BudgetTable({("etl", "submitted"): Budget(0.08, 0.129, 6, "backend")})
    d = Detector("n", "c", table)
    assert observe(d, "submitted", 0, 2.0) == []
    assert d.next_change_at("etl") == at(5.0 + 1e-6)  # woken at the floor, not never
    assert levels(observe(d, "submitted", 0, 3600)) == [
        ("submitted", "watch"),
        ("submitted", "alert"),
    ]


def test_the_floor_holds_every_level_back() -> None:
    table = BudgetTable({("etl", "running"): Budget(1.0, 1.41, 30)})
    d = Detector("n", "c", table, floor_s=6.0, name="nightly")  # polled at most every 2 s
    assert observe(d, "running", 0, 5.9) == []
    assert d.next_change_at("etl") == at(6.0 + 1e-6)
    watch = observe(d, "running", 0, 6.5)
    assert levels(watch) == [("running", "watch")] and watch[0].limit_s == 6.0
    assert watch[0].line() == (
        "watch: nightly/etl (cli) running for 6.5s (p95 1.4s, x4.6, floor 6.0s) night n"
    )
    assert levels(observe(d, "running", 0, 12.0)) == []  # 2 x the floor is not past it
    assert levels(observe(d, "running", 0, 12.1)) == [("running", "alert")]


def test_the_nights_log_has_a_watch_at_info_and_an_alert_at_error_once_each(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from nightshift.engine.events import LevelChanged, LogSink

    sink = LogSink(logging.getLogger("test.night"))
    with caplog.at_level(logging.DEBUG, logger="test.night"):
        for alert in observe(detector(), "queued", 0, 3 * 3600):
            sink(LevelChanged(alert))
    assert [(r.levelno, r.getMessage().split(":")[0]) for r in caplog.records] == [
        (logging.INFO, "watch"),
        (logging.ERROR, "alert"),
    ]


def test_a_level_from_the_backends_pooled_budget_says_so() -> None:
    pooled = BudgetTable({("new", "queued"): Budget(300.0, 600.0, 12, "backend")})
    d = Detector("2026-11-29", "nightly", pooled)
    _watch, alert = d.observe("new", "queued", entered_at=at(0), now=at(1300), backend="cli")
    assert alert.pooled and "(p95 10m pooled from cli, x2.2)" in alert.line()
    own = detector()
    (mine, _) = observe(own, "queued", 0, 1300)
    assert not mine.pooled and "pooled" not in mine.line()
