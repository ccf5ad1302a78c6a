"""A scheduled run's missed-night check on a real ledger and the Slack emulator: the nights it
names are named once, in one alert, whichever run finds them first (no Prefect server: the
schedule's nights are handed in as Prefect would give them)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from nightshift.orchestration.missed_nights import check_missed
from nightshift.orchestration.night_setup import notifier_for
from nightshift.orchestration.prepared_night import prepare_night
from nightshift.sandbox.slack_emulator import SlackEmulator
from nightshift.store.missed_nights import MissedNights

TOKEN = "xoxb-missed-3f1c"
ALERTS = "#night-alerts"
CATALOGUE = """\
name: missed
defaults: {missed: %(policy)s}
notify:
  slack: {base_url: "%(url)s", timeout: 2}
  routes: {alert: {channel: "%(alerts)s"}}
jobs:
  - {label: a, backend: command, argv: ["true"]}
"""
D = ["2026-12-04", "2026-12-05", "2026-12-06"]
SLOTS = {night: datetime.fromisoformat(f"{night}T02:00:00+00:00") for night in D}
NOW = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)
LOG = logging.getLogger("test-missed")


@pytest.fixture
def slack(sandbox: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SlackEmulator]:
    monkeypatch.setenv("SLACK_BOT_TOKEN", TOKEN)
    with SlackEmulator(TOKEN) as emulator:
        yield emulator


def _check(sandbox: Path, slack: SlackEmulator, night: str, policy: str = "latest") -> object:
    path = sandbox / "nightshift.yaml"
    path.write_text(CATALOGUE % {"policy": policy, "url": slack.base_url, "alerts": ALERTS})
    prepared = prepare_night(path, night=night)
    try:
        notifier = notifier_for(prepared.catalogue, prepared.ledger, LOG)
        return check_missed(
            prepared, "nightshift.yaml", notifier, LOG, now=NOW, due=dict(SLOTS), by=night
        )
    finally:
        prepared.close()


@pytest.mark.parametrize("first", [D[2], D[0]], ids=["tonight-first", "the-oldest-first"])
def test_missed_nights_are_named_once_in_one_alert_whichever_run_comes_first(
    sandbox: Path, slack: SlackEmulator, first: str
) -> None:
    decisions = {night: _check(sandbox, slack, night) for night in [first, *sorted(D)]}

    tonight, stale = decisions[D[2]], decisions[D[0]]
    assert (tonight.runs_own, stale.runs_own, decisions[D[1]].runs_own) == (True, False, False)
    (alert,) = slack.in_channel(ALERTS)
    assert "2 nights missed: 2026-12-04, 2026-12-05" in alert.text
    said = str(alert.blocks)
    assert "02:00 UTC" in said and "the latest night due (2026-12-06) runs" in said
    assert (
        "nightshift backfill --catalogue nightshift.yaml --from 2026-12-04 --to 2026-12-05" in said
    )
    path = sandbox / "nightshift.yaml"
    prepared = prepare_night(path, night=D[2])
    try:
        named = MissedNights(prepared.ledger.engine, prepared.catalogue.key).all()
    finally:
        prepared.close()
    assert [(m.night, m.scheduled_at, m.named_by) for m in named] == [
        (D[0], SLOTS[D[0]], first),
        (D[1], SLOTS[D[1]], first),
    ]
    assert all(m.announced_at is not None for m in named)
    # the watchdog finds them missed, and does not name them a second time
    from nightshift.config.settings import load_settings
    from nightshift.watchdog.run import watch_once

    report = watch_once(load_settings().ledger_url(), catalogue="missed", now=NOW)
    assert [(a.kind, a.night) for a in report.found] == [("missed", D[0]), ("missed", D[1])]
    assert report.raised == []


def test_all_runs_the_missed_nights_first_and_names_none(
    sandbox: Path, slack: SlackEmulator
) -> None:
    decision = _check(sandbox, slack, D[2], policy="all")
    assert decision.nights == D
    assert slack.in_channel(ALERTS) == []


def test_the_late_line_names_the_nights_missed_since_the_previous_night_that_ran(
    sandbox: Path, slack: SlackEmulator
) -> None:
    from nightshift.orchestration.missed_nights import late_of

    _check(sandbox, slack, D[2])  # names D-2 and D-1
    path = sandbox / "nightshift.yaml"
    tonight = prepare_night(path, night=D[2])
    try:
        tonight.ledger.record_submit(D[2], "a", "command", "a-1", 1)  # tonight ran
        started = "2026-12-06T09:12:00+00:00"
        line = late_of(tonight, SLOTS[D[2]], started)
        assert line == (
            "ran late: scheduled 2026-12-06 02:00 UTC, started 2026-12-06 09:12 UTC (7h12m late); "
            "missed before it: 2026-12-04 (never run), 2026-12-05 (never run)"
        )
    finally:
        tonight.close()
    tomorrow = prepare_night(path, night="2026-12-07")
    try:  # on time, and the nights missed before the last one are old news
        on_time = "2026-12-07T02:00:30+00:00"
        assert late_of(tomorrow, datetime(2026, 12, 7, 2, 0, tzinfo=UTC), on_time) is None
    finally:
        tomorrow.close()
