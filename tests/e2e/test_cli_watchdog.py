"""``nightshift watchdog``: new alerts one per line, then a headline; --json; its exit codes."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from nightshift.cli import exits
from nightshift.cli.main import build_parser, main
from nightshift.config.settings import load_settings
from nightshift.store.ledger import Ledger


def _failing_three_nights(sandbox: Path) -> Path:
    """Team-a's etl failed the last three nights; nobody holds a lease; nothing in flight."""
    now = datetime.now(UTC)
    ledger = Ledger(load_settings().ledger_url(), "team-a")
    for day in (3, 2, 1):
        at = now - timedelta(days=day)
        night = at.date().isoformat()
        ledger.record_submit(night, "etl", "command", f"x{day}", 1, at=at)
        ledger.record_state(night, "etl", "failed", finished_at=at + timedelta(seconds=5))
    ledger.close()
    catalogue = sandbox / "nightshift.yaml"
    catalogue.write_text("name: team-a\njobs:\n  - {label: etl, backend: command, argv: [x]}\n")
    return catalogue


def test_watchdog_prints_each_new_alert_once(
    sandbox: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    catalogue = _failing_three_nights(sandbox)
    # its last run failed a day ago: within its daily schedule's 30 h, so a streak, not stale
    assert main(["watchdog", "--catalogue", str(catalogue)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out[:1]] == ["alert streak"]
    assert out[1] == "watchdog: 0 jobs in flight, 1 findings, 1 new alerts"
    # a stale limit given by hand wins over the schedule's
    assert main(["watchdog", "--catalogue", str(catalogue), "--stale-after", "12h"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out[:1]] == ["alert stale"]
    assert out[1] == "watchdog: 0 jobs in flight, 2 findings, 1 new alerts (1 raised before)"

    assert main(["watchdog", "--catalogue", str(catalogue), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["catalogue"], shown["found"], shown["raised"]) == ("team-a", 1, [])


def test_watchdog_without_a_catalogue_checks_streaks_not_staleness(
    sandbox: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _failing_three_nights(sandbox)
    assert main(["watchdog", "--streak", "4"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "watchdog: 0 jobs in flight, 0 findings, 0 new alerts",
        "stale labels not checked: give --catalogue to check its labels",
    ]


@pytest.mark.parametrize("flags", [["--stale-after", "a day"], ["--streak", "0"]])
def test_watchdog_refuses_bad_rules_in_one_line(
    sandbox: Path, capsys: pytest.CaptureFixture[str], flags: list[str]
) -> None:
    assert main(["watchdog", *flags]) == exits.USAGE
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("nightshift watchdog: --stale-after/--streak: ")


def test_watchdog_names_a_bad_catalogue_or_ledger(
    sandbox: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["watchdog", "--catalogue", str(sandbox / "missing.yaml")]) == exits.BAD_CATALOGUE
    assert "missing.yaml" in capsys.readouterr().err
    url = "postgresql+psycopg://nightshift:s3cret-pw@127.0.0.1:9/ledger"
    monkeypatch.setenv("NIGHTSHIFT_DATABASE_URL", url)
    assert main(["watchdog"]) == exits.NO_LEDGER
    err = capsys.readouterr().err
    assert err.startswith("cannot open the ledger database ") and "s3cret-pw" not in err


def test_watchdog_spells_it_catalogue_and_still_takes_catalog(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert build_parser().parse_args(["watchdog", "--catalog", "x.yaml"]).catalogue == "x.yaml"
    assert build_parser().parse_args(["watchdog"]).catalogue is None
    with pytest.raises(SystemExit):
        build_parser().parse_args(["watchdog", "--help"])
    out = capsys.readouterr().out
    assert out.count("--catalogue FILE") == 2 and "--catalog " not in out


def test_watchdog_tells_slack_delivers_the_outbox_and_writes_metrics(
    sandbox: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from nightshift.config.notify import NotifyConfig
    from nightshift.engine.outcomes import JobOutcome, NightSummary, Outcome, Severity
    from nightshift.notify.notifier import Notifier
    from nightshift.notify.send import SlackSender
    from nightshift.sandbox.slack_emulator import SlackEmulator
    from nightshift.store.outbox import Outbox

    token = "xoxb-watchdog-7a6b5c"
    monkeypatch.setenv("SLACK_BOT_TOKEN", token)
    catalogue = _failing_three_nights(sandbox)
    with SlackEmulator(token) as slack:
        notify = (
            f"notify:\n  env: test\n  slack: {{base_url: '{slack.base_url}'}}\n  routes:\n"
            "    partial: {channel: '#digest'}\n    alert: {channel: '#alerts'}\n"
        )
        catalogue.write_text(catalogue.read_text() + notify)
        # last night's digest could not be sent: Slack was down
        config = NotifyConfig.model_validate(
            {"slack": {"base_url": slack.base_url}, "routes": {"partial": {"channel": "#digest"}}}
        )
        ledger = Ledger(load_settings().ledger_url(), "team-a")
        slack.down()
        summary = NightSummary(
            Severity.PARTIAL,
            [JobOutcome("etl", Outcome.FAILED, 5), JobOutcome("other", Outcome.SUCCEEDED, 5)],
        )
        sender = SlackSender(config.slack, backoff_s=0.0)
        Notifier(config, catalogue="team-a", outbox=Outbox(ledger.engine), sender=sender).night_end(
            summary, night="2026-11-28"
        )
        ledger.close()
        slack.up()

        assert main(["watchdog", "--catalogue", str(catalogue), "--stale-after", "12h"]) == 0

    channels = [m.channel for m in slack.messages]
    assert channels == ["#digest", "#alerts", "#alerts"]  # the kept digest, then streak and stale
    alerts = slack.in_channel("#alerts")
    assert alerts[1].thread_ts == alerts[0].ts  # one night's alerts share a thread
    metrics = (sandbox / "state" / "metrics" / "nightshift.prom").read_text()
    assert 'nightshift_job_runs_total{catalogue="team-a",job="etl",state="failed"} 3.0' in metrics
    assert token not in capsys.readouterr().out


def test_stale_follows_the_schedule_in_the_prefect_yaml_beside_the_catalogue(
    sandbox: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    catalogue = _failing_three_nights(sandbox)
    # an hourly catalogue whose last run was a day ago missed its schedule: 1 h + 1 h grace.
    # Its schedule paused: after 01:00 UTC an active one would have today's nights named
    # `missed` by the watchdog (no run of them started), which stands in for `stale`
    (sandbox / "prefect.yaml").write_text(
        "deployments:\n"
        "  - name: nightly-batch-hourly\n"
        "    entrypoint: flows/nightly.py:nightly\n"
        "    parameters: {catalog: nightshift.yaml}\n"
        "    schedules: [{cron: '0 * * * *', active: false}]\n"
    )
    assert main(["watchdog", "--catalogue", str(catalogue)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert sorted(line.split(":")[0] for line in out[:2]) == ["alert stale", "alert streak"]
    assert "more than 2h00m" in next(line for line in out if line.startswith("alert stale"))
