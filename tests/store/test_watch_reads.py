"""The watchdog's ledger reads and one whole pass, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from nightshift.store.alert_log import DWELL, STALE, STOPPED, STREAK, AlertLog, AlertRecord
from nightshift.store.lease import Lease
from nightshift.store.ledger import Ledger
from nightshift.watchdog import reads
from nightshift.watchdog.checks import InFlight, LabelRecord, NightOutcome
from nightshift.watchdog.run import watch_once

NOW = datetime(2026, 11, 29, 3, 0, tzinfo=UTC)
NIGHT = "2026-11-29"


def _run(ledger: Ledger, night: str, label: str, states: list[str], start: datetime) -> None:
    """A job through ``states`` a minute apart, the jobs row following as a night writes it."""
    ledger.record_submit(night, label, "command", f"{label}-{night}", 1, at=start)
    for i, state in enumerate(states):
        at = start + timedelta(minutes=i)
        ledger.transition(night, "run", label, "command", f"{label}-{night}", state, at, 1)
        if state in ("succeeded", "failed", "timeout"):
            ledger.record_state(night, label, state, finished_at=at)


def _history(ledger: Ledger, days: int = 8) -> None:
    """``days`` earlier nights: etl succeeds each (a minute queued, a minute running)."""
    for day in range(days, 0, -1):
        start = NOW - timedelta(days=day)
        _run(ledger, start.date().isoformat(), "etl", ["queued", "running", "succeeded"], start)


def test_in_flight_jobs_carry_their_newest_transition(db_url: str) -> None:
    ledger = Ledger(db_url, "cat")
    _run(ledger, NIGHT, "etl", ["queued", "running"], NOW - timedelta(minutes=30))
    _run(ledger, NIGHT, "done", ["queued", "succeeded"], NOW - timedelta(minutes=30))
    # submitting: a crash between the ledger's note and the backend's answer
    ledger.record_submit(NIGHT, "half", "command", None, 1, at=NOW, state="submitting")
    # lost: the night gave up on it (and reported it failed); not in flight
    _run(ledger, NIGHT, "gave-up", ["queued", "failed"], NOW - timedelta(minutes=30))
    ledger.record_state(NIGHT, "gave-up", "lost")
    Ledger(db_url, "other").record_submit(NIGHT, "x", "command", "x1", 1, at=NOW)
    Ledger(db_url, "").record_submit(NIGHT, "before-catalogues", "command", "y", 1, at=NOW)

    running_since = NOW - timedelta(minutes=29)
    assert reads.in_flight(ledger.engine, "cat") == [
        InFlight("cat", NIGHT, "etl", "command", "running", running_since),
        InFlight("cat", NIGHT, "half", "command", "submitting", NOW),
    ]
    assert [(j.catalogue, j.label) for j in reads.in_flight(ledger.engine)] == [
        ("cat", "etl"),
        ("cat", "half"),
        ("other", "x"),
    ]
    activity = reads.night_activity(ledger.engine, ["cat"], NIGHT)
    assert activity == {("cat", NIGHT): running_since}
    assert reads.night_activity(ledger.engine, ["cat"], "2026-11-30") == {}


def test_leases_outcomes_and_label_records(db_url: str) -> None:
    ledger = Ledger(db_url, "cat")
    Lease(ledger.engine, "cat", owner="me", ttl_s=60, clock=lambda: NOW).acquire()
    expires_at = reads.leases(ledger.engine)["cat"].expires_at
    if db_url.startswith("sqlite"):  # one host: its clock is the lease's
        assert expires_at == NOW + timedelta(seconds=60)
    else:  # the server's clock, not the host's
        left = expires_at - datetime.now(UTC)
        assert timedelta(seconds=30) < left <= timedelta(seconds=61)

    _history(ledger, days=3)
    failed_at = NOW - timedelta(hours=1)
    _run(ledger, NIGHT, "etl", ["queued", "failed"], failed_at)
    assert reads.outcomes(ledger.engine, "2026-11-27", "cat") == [
        NightOutcome("cat", "2026-11-27", "etl", "succeeded"),
        NightOutcome("cat", "2026-11-28", "etl", "succeeded"),
        NightOutcome("cat", NIGHT, "etl", "failed"),
    ]
    last = NOW - timedelta(days=1)
    assert reads.label_records(ledger.engine, "cat") == {
        "etl": LabelRecord(
            "cat",
            "etl",
            "2026-11-26",
            NOW - timedelta(days=3),
            "2026-11-28",
            last + timedelta(minutes=2),
            NIGHT,  # its last run, whatever its state: tonight's failure
            failed_at + timedelta(minutes=1),
        )
    }
    assert reads.label_records(ledger.engine, "other") == {}


def test_a_pass_raises_each_finding_once(db_url: str) -> None:
    ledger = Ledger(db_url, "cat")
    _history(ledger)  # etl: p95 of a minute in queued and in running
    # tonight etl has been running for 2m01s (past 2 x p95) and nobody holds the lease
    _run(ledger, NIGHT, "etl", ["queued", "running"], NOW - timedelta(minutes=3, seconds=1))
    for day in (3, 2, 1):
        night = (NOW - timedelta(days=day)).date().isoformat()
        _run(ledger, night, "flaky", ["queued", "failed"], NOW - timedelta(days=day))
    # the night itself already raised a watch on etl; its alert is the watchdog's to raise
    log = AlertLog(ledger.engine)
    night_watch = AlertRecord("cat", NIGHT, "etl", DWELL, "watch", "night", NOW, "running")
    assert log.record(night_watch)
    sent: list[AlertRecord] = []

    class Sink:
        def send(self, alert: AlertRecord) -> None:
            sent.append(alert)

    labels = ["etl", "flaky", "new"]
    report = watch_once(db_url, catalogue="cat", labels=labels, sink=Sink(), now=NOW)
    assert [(a.kind, a.label, a.state) for a in sent] == [
        (STOPPED, "", ""),
        (DWELL, "etl", "running"),
        (STREAK, "flaky", ""),  # not stale as well: it ran last night, and failed
    ]
    assert report.raised == sent and report.in_flight == 1
    assert sent[1].detail == "cat/etl running for 2m (p95 1m, x2.0) night 2026-11-29"

    again = watch_once(db_url, catalogue="cat", labels=labels, sink=Sink(), now=NOW)
    assert len(again.found) == 3 and again.raised == [] and len(sent) == 3
    assert [(r.kind, r.raised_by) for r in log.alerts(catalogue="cat", night=NIGHT)] == [
        (DWELL, "night"),
        (STOPPED, "watchdog"),
        (DWELL, "watchdog"),
    ]


def test_a_dwell_alert_the_night_raised_is_not_raised_again(db_url: str) -> None:
    ledger = Ledger(db_url, "cat")
    _history(ledger)
    _run(ledger, NIGHT, "etl", ["queued", "running"], NOW - timedelta(minutes=3, seconds=1))
    log = AlertLog(ledger.engine)
    assert log.record(AlertRecord("cat", NIGHT, "etl", DWELL, "alert", "night", NOW, "running"))

    report = watch_once(db_url, catalogue="cat", now=NOW)
    assert [a.kind for a in report.found] == [STOPPED, DWELL]
    assert [a.kind for a in report.raised] == [STOPPED]


def test_the_morning_after_one_failed_night_of_a_daily_catalogue_is_not_stale(
    db_url: str,
) -> None:
    # etl succeeded every night at 02:00 until last night, which failed (the digest said so);
    # at 09:00 its last success is 31 h old: more than a day, but the job did not miss a night
    ledger = Ledger(db_url, "cat")
    morning = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
    for day in range(8, 0, -1):
        start = datetime(2026, 11, 29, 2, 0, tzinfo=UTC) - timedelta(days=day)
        _run(ledger, start.date().isoformat(), "etl", ["queued", "running", "succeeded"], start)
    _run(ledger, NIGHT, "etl", ["queued", "failed"], datetime(2026, 11, 29, 2, 0, tzinfo=UTC))

    report = watch_once(db_url, catalogue="cat", labels=["etl"], now=morning)
    assert [a.kind for a in report.found] == []
    # a night later with no run at all (the schedule stopped): now it missed its interval
    later = watch_once(db_url, catalogue="cat", labels=["etl"], now=morning + timedelta(days=1))
    assert [(a.kind, a.label) for a in later.raised] == [(STALE, "etl")]


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)  # SQLite: one host's clock
def test_a_watchdog_on_a_host_whose_clock_is_off_judges_by_the_ledgers_clock(
    db_url: str,
) -> None:
    # a night live on a host with the true clock: its lease held, etl running for 30 s where
    # it usually runs a minute
    ledger = Ledger(db_url, "cat")
    true_now = datetime.now(UTC)
    for day in range(8, 0, -1):
        start = true_now - timedelta(days=day)
        _run(ledger, start.date().isoformat(), "etl", ["queued", "running", "succeeded"], start)
    night = true_now.date().isoformat()
    tonight = true_now - timedelta(minutes=1, seconds=30)
    _run(ledger, night, "etl", ["queued", "running"], tonight)
    Lease(ledger.engine, "cat", "host-a", ttl_s=60).acquire()

    for minutes in (5, -5):  # the watchdog's host 5 minutes ahead, then 5 behind

        def skewed(off: int = minutes) -> datetime:
            return datetime.now(UTC) + timedelta(minutes=off)

        report = watch_once(db_url, catalogue="cat", labels=["etl"], host_clock=skewed)
        assert [(a.kind, a.detail) for a in report.found] == [], minutes
        assert abs((report.at - datetime.now(UTC)).total_seconds()) < 30


def test_a_night_named_missed_and_never_run_is_missed_not_its_labels_stale(db_url: str) -> None:
    from nightshift.store.alert_log import MISSED
    from nightshift.store.missed_nights import MissedNights

    ledger = Ledger(db_url, "cat")
    _history(ledger)  # etl succeeded every night up to the one before NOW
    later = NOW + timedelta(days=3)  # then the worker was down: no night for three days
    missed = MissedNights(ledger.engine, "cat")
    slot = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)
    missed.name([("2026-11-30", slot)], by="test", reason="defaults.missed.run is latest")
    missed.name([("2026-12-01", None)], by="test", reason="defaults.missed.run is latest")
    # 12-01 was backfilled since, and succeeded
    ledger.record_submit("2026-12-01", "etl", "command", "backfilled", 1, at=later)
    ledger.record_state("2026-12-01", "etl", "succeeded", finished_at=later)

    report = watch_once(db_url, catalogue="cat", labels=["etl"], now=later)

    assert [(a.kind, a.night) for a in report.raised] == [(MISSED, "2026-11-30")]
    assert report.raised[0].detail == (
        "cat night 2026-11-30 missed: its 02:00 UTC slot passed and it never ran "
        "(defaults.missed.run is latest)"
    )
    again = watch_once(db_url, catalogue="cat", labels=["etl"], now=later)
    assert again.raised == [] and [a.kind for a in again.found] == [MISSED]
    # a week on, nothing ran still: the missed night is old news, the stale label says so
    week = watch_once(db_url, catalogue="cat", labels=["etl"], now=later + timedelta(days=7))
    assert [(a.kind, a.label) for a in week.raised] == [(STALE, "etl")]


def test_nights_that_never_started_are_named_missed_by_the_watchdog(db_url: str) -> None:
    from nightshift.store.alert_log import MISSED
    from nightshift.store.missed_nights import MissedNights

    ledger = Ledger(db_url, "cat")
    _history(ledger)  # nights up to 2026-11-28; then no worker: nothing started since
    schedule = [("0 2 * * *", "UTC")]
    later = datetime(2026, 12, 1, 2, 30, tzinfo=UTC)  # 12-01's slot passed only 30 minutes ago
    night = Lease(ledger.engine, "cat", "a-night", ttl_s=3600, clock=lambda: later)
    night.acquire()

    # a night holds the lease (the next may only wait its turn): nothing named
    held = watch_once(db_url, catalogue="cat", now=later, schedule=schedule)
    assert MissedNights(ledger.engine, "cat").all() == [] and held.raised == []

    night.release()  # that night ended
    free = later + timedelta(minutes=5)
    report = watch_once(db_url, catalogue="cat", labels=["etl"], now=free, schedule=schedule)

    assert [(a.kind, a.night) for a in report.raised] == [
        (MISSED, "2026-11-29"),
        (MISSED, "2026-11-30"),
    ]
    assert "no run of it started (is a worker running?" in report.raised[0].detail
    named = MissedNights(ledger.engine, "cat").all()
    assert [(m.night, m.scheduled_at, m.named_by) for m in named] == [
        ("2026-11-29", datetime(2026, 11, 29, 2, 0, tzinfo=UTC), "watchdog"),
        ("2026-11-30", datetime(2026, 11, 30, 2, 0, tzinfo=UTC), "watchdog"),
    ]
    again = watch_once(db_url, catalogue="cat", labels=["etl"], now=free, schedule=schedule)
    assert again.raised == []
