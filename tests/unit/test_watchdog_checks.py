"""The watchdog's checks on literal values, at their boundaries (no database)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from nightshift.budgets.lookup import Budget, Budgets
from nightshift.store.alert_log import DWELL, INCIDENT, STALE, STOPPED, STREAK
from nightshift.watchdog.checks import (
    InFlight,
    LabelRecord,
    LeaseRow,
    NightOutcome,
    Rules,
    dwell_findings,
    group_stalls,
    stale_findings,
    stale_limit,
    stopped_findings,
    streak_findings,
)

NOW = datetime(2026, 11, 29, 3, 0, tzinfo=UTC)
BUDGETS = Budgets(
    states={("cat", "etl", "queued"): Budget(30.0, 100.0, 9)},
    backends={("cat", "command", "running"): Budget(10.0, 50.0, 20, "backend")},
)


def job(label: str = "etl", state: str = "queued", ago: float = 0.0, **kw: str) -> InFlight:
    fields = {"catalogue": "cat", "night": "2026-11-29", "backend": "command"} | kw
    return InFlight(
        fields["catalogue"],
        fields["night"],
        label,
        fields["backend"],
        state,
        NOW - timedelta(seconds=ago),
    )


# --- dwell


def test_several_stalls_of_one_backend_in_one_state_are_one_incident_finding() -> None:
    stalled = [job(f"gen:{i}", "running", ago=200.0) for i in range(4)]
    stalled += [job("etl", "queued", ago=250.0)]  # the same backend, another state
    found = dwell_findings(stalled, BUDGETS, NOW)
    assert len(found) == 5
    backends = {j.label: j.backend for j in stalled}
    told = group_stalls(found, backends, NOW)
    assert [(a.kind, a.label) for a in told] == [
        (INCIDENT, "command/running#watchdog"),
        (DWELL, "etl"),
    ]
    assert told[0].detail == (
        "cat: command: 4 jobs stalled in running (gen:0, gen:1, gen:2 and 1 more) "
        "night 2026-11-29, past twice their p95"
    )
    two = group_stalls(found[:2], backends, NOW)  # two are each their own
    assert [a.kind for a in two] == [DWELL, DWELL]


def test_a_job_at_exactly_twice_p95_is_not_yet_an_alert() -> None:
    assert dwell_findings([job(ago=200.0)], BUDGETS, NOW) == []


def test_a_job_past_twice_p95_is_one_dwell_alert_with_its_measures() -> None:
    [alert] = dwell_findings([job(ago=200.5)], BUDGETS, NOW)
    assert (alert.kind, alert.level, alert.state, alert.raised_by) == (
        DWELL,
        "alert",
        "queued",
        "watchdog",
    )
    assert (alert.catalogue, alert.night, alert.label) == ("cat", "2026-11-29", "etl")
    assert (alert.dwell_s, alert.p95_s, alert.at) == (200.5, 100.0, NOW)
    assert alert.detail == "cat/etl queued for 3m (p95 2m, x2.0) night 2026-11-29"


def test_a_label_without_its_own_budget_uses_its_backends() -> None:
    found = dwell_findings([job("new", "running", ago=101.0)], BUDGETS, NOW)
    assert [(a.label, a.p95_s) for a in found] == [("new", 50.0)]
    # said so: a new job's level is its backend's, not its own
    assert "running for 2m (p95 50s pooled from command, x2.0)" in (found[0].detail or "")


def test_no_budget_raises_nothing_and_a_zero_p95_is_held_to_the_floor() -> None:
    zero = Budgets(states={("cat", "etl", "queued"): Budget(0.0, 0.0, 9)})
    (found,) = dwell_findings([job(ago=10_000.0)], zero, NOW)
    assert "queued for 2h47m (p95 0ms, floor 5s)" in (found.detail or "")
    assert dwell_findings([job(ago=9.0)], zero, NOW) == []  # within twice the floor
    assert dwell_findings([job("etl", "submitted", ago=10_000.0)], BUDGETS, NOW) == []


# --- stopped


def lease(expires_in: float, key: str = "cat") -> dict[str, LeaseRow]:
    return {key: LeaseRow(key, "host:42:abcd", NOW + timedelta(seconds=expires_in))}


def test_a_lease_that_expires_now_is_still_live() -> None:
    assert stopped_findings([job()], lease(0.0), {}, NOW) == []


def test_an_expired_lease_with_jobs_in_flight_is_one_stopped_alert_per_night() -> None:
    jobs = [job("b", "running"), job("a")]
    [alert] = stopped_findings(jobs, lease(-0.001), {}, NOW)
    assert (alert.kind, alert.level, alert.label, alert.state) == (STOPPED, "alert", "", "")
    assert alert.night == "2026-11-29"
    assert alert.detail == (
        "cat night 2026-11-29 stopped watching: its lease (host:42:abcd) expired 1ms ago; "
        "2 in flight: a (queued), b (running)"
    )


def test_no_lease_row_at_all_means_nobody_watches() -> None:
    [alert] = stopped_findings([job()], {}, {}, NOW)
    assert "no night holds its lease" in (alert.detail or "")


def test_a_live_lease_covers_the_newest_night_only() -> None:
    jobs = [job(night="2026-11-28"), job(night="2026-11-29")]
    activity = {
        ("cat", "2026-11-28"): NOW - timedelta(hours=20),
        ("cat", "2026-11-29"): NOW - timedelta(minutes=1),
    }
    [alert] = stopped_findings(jobs, lease(30.0), activity, NOW)
    assert alert.night == "2026-11-28"
    assert "runs a newer night" in (alert.detail or "")


def test_leases_are_per_catalogue() -> None:
    jobs = [job(catalogue="other")]
    assert [a.catalogue for a in stopped_findings(jobs, lease(30.0), {}, NOW)] == ["other"]


# --- stale

DAY = 24 * 3600.0


def record(success_ago: float | None, first_ago: float = 10 * DAY) -> LabelRecord:
    success = None if success_ago is None else NOW - timedelta(seconds=success_ago)
    return LabelRecord(
        "cat",
        "etl",
        "2026-11-19",
        NOW - timedelta(seconds=first_ago),
        "2026-11-27" if success else None,
        success,
    )


def test_a_daily_label_is_stale_past_its_interval_plus_a_grace() -> None:
    limit = stale_limit(DAY)
    assert limit == 30 * 3600.0  # a day and a quarter of one
    assert stale_findings("cat", ["etl"], {"etl": record(limit)}, NOW) == []
    [alert] = stale_findings("cat", ["etl"], {"etl": record(limit + 1)}, NOW)
    assert (alert.kind, alert.label, alert.night) == (STALE, "etl", "2026-11-27")
    assert (
        alert.detail
        == "cat/etl stale: last success 30h00m ago, more than 30h00m (night 2026-11-27)"
    )


def test_the_schedule_sets_the_limit_and_a_given_one_wins() -> None:
    hourly = Rules(interval_s=3600.0)
    assert hourly.stale_s == 2 * 3600.0  # an hour's grace at least
    assert len(stale_findings("cat", ["etl"], {"etl": record(2 * 3600.0 + 1)}, NOW, hourly)) == 1
    assert Rules(stale_after_s=60.0, interval_s=3600.0).stale_s == 60.0


def test_a_label_that_ran_and_failed_within_its_interval_is_not_stale() -> None:
    # last success two days ago, last night's run failed: the digest said so already
    failed_last_night = dataclasses.replace(
        record(2 * DAY), last_night="2026-11-29", last_at=NOW - timedelta(hours=7)
    )
    assert stale_findings("cat", ["etl"], {"etl": failed_last_night}, NOW) == []
    missed = dataclasses.replace(failed_last_night, last_at=NOW - timedelta(hours=31))
    assert len(stale_findings("cat", ["etl"], {"etl": missed}, NOW)) == 1


def test_messages_name_a_catalogue_by_its_name_never_its_path() -> None:
    key = "/home/me/checkout/nightshift.yaml"
    [alert] = stale_findings(key, ["etl"], {"etl": record(2 * DAY)}, NOW)
    assert alert.catalogue == key and alert.detail is not None
    assert alert.detail.startswith("nightshift/etl stale:") and "/home" not in alert.detail


def test_a_label_that_never_finished_is_new_not_stale() -> None:
    assert stale_findings("cat", ["etl", "brand-new"], {}, NOW) == []


def test_a_label_that_never_succeeded_is_stale_from_its_first_run() -> None:
    limit = stale_limit(DAY)
    [alert] = stale_findings("cat", ["etl"], {"etl": record(None, limit + 60)}, NOW)
    assert alert.night == "2026-11-19"
    assert "never succeeded (first run 30h01m ago)" in (alert.detail or "")
    assert stale_findings("cat", ["etl"], {"etl": record(None, limit)}, NOW) == []


def test_only_the_catalogues_labels_are_checked_and_the_window_is_configurable() -> None:
    records = {"etl": record(2 * 3600.0)}
    assert stale_findings("cat", [], records, NOW) == []
    assert stale_findings("cat", ["etl"], records, NOW, Rules(stale_after_s=7200.0)) == []
    assert len(stale_findings("cat", ["etl"], records, NOW, Rules(stale_after_s=7199.0))) == 1


# --- streak


def nights(*states: str, label: str = "etl") -> list[NightOutcome]:
    return [NightOutcome("cat", f"2026-11-{20 + i}", label, s) for i, s in enumerate(states)]


def test_two_bad_nights_are_no_streak_three_are() -> None:
    assert streak_findings(nights("succeeded", "failed", "timeout"), NOW) == []
    [alert] = streak_findings(nights("succeeded", "failed", "timeout", "partial"), NOW)
    assert (alert.kind, alert.label, alert.night) == (STREAK, "etl", "2026-11-21")
    assert alert.detail == (
        "cat/etl not ok 3 nights in a row since 2026-11-21: "
        "2026-11-21 failed, 2026-11-22 timeout, 2026-11-23 partial"
    )


def test_a_longer_streak_keeps_its_first_night_so_it_is_raised_once() -> None:
    three = streak_findings(nights("failed", "failed", "failed"), NOW)
    five = streak_findings(nights("failed", "failed", "failed", "lost", "skipped"), NOW)
    assert [a.key for a in three] == [a.key for a in five]
    assert "not ok 5 nights" in (five[0].detail or "")


def test_a_success_last_night_ends_the_streak() -> None:
    assert streak_findings(nights("failed", "failed", "failed", "succeeded"), NOW) == []


def test_streak_length_and_labels_are_configurable() -> None:
    rows = nights("failed", "failed") + nights("failed", label="gone")
    assert [a.label for a in streak_findings(rows, NOW, Rules(streak_nights=2))] == ["etl"]
    assert streak_findings(rows, NOW, Rules(streak_nights=1), labels=["gone"])[0].label == "gone"


def test_rules_refuse_nonsense() -> None:
    with pytest.raises(ValueError, match="streak_nights"):
        Rules(streak_nights=0)
    with pytest.raises(ValueError, match="stale_after_s"):
        Rules(stale_after_s=0)


def test_the_watchdogs_findings_are_warnings_of_a_pass_that_went_fine(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import logging

    from nightshift.watchdog.run import LogFindingSink

    [alert] = stale_findings("cat", ["etl"], {"etl": record(2 * DAY)}, NOW)
    with caplog.at_level(logging.INFO, logger="test.watchdog"):
        LogFindingSink(logging.getLogger("test.watchdog")).send(alert)
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
