"""``nightshift notify [--flush]``: what waits in the outbox, and delivering it once."""

from __future__ import annotations

from pathlib import Path

import pytest

from nightshift.cli import exits
from nightshift.cli.main import main
from nightshift.config.notify import NotifyConfig
from nightshift.config.settings import load_settings
from nightshift.engine.outcomes import JobOutcome, NightSummary, Outcome, Severity
from nightshift.notify.notifier import Notifier
from nightshift.notify.send import SlackSender
from nightshift.sandbox.slack_emulator import SlackEmulator
from nightshift.store.ledger import Ledger
from nightshift.store.outbox import Outbox

TOKEN = "xoxb-cli-31d8e0b2"
PARTIAL = NightSummary(
    Severity.PARTIAL,
    [JobOutcome("etl", Outcome.SUCCEEDED, 60), JobOutcome("audit", Outcome.FAILED, 720)],
    "2026-11-29T01:00:00+00:00",
    "2026-11-29T01:30:00+00:00",
)


def test_a_digest_kept_while_slack_was_down_is_listed_then_flushed_once(
    sandbox: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", TOKEN)
    with SlackEmulator(TOKEN) as slack:
        config = NotifyConfig.model_validate(
            {"slack": {"base_url": slack.base_url}, "routes": {"partial": {"channel": "#d"}}}
        )
        ledger = Ledger(load_settings().ledger_url())
        slack.down()
        notifier = Notifier(
            config, catalogue="nightly", outbox=Outbox(ledger.engine),
            sender=SlackSender(config.slack, backoff_s=0.0),
        )  # fmt: skip
        assert not notifier.night_end(PARTIAL, night="2026-11-29")[0].ok
        ledger.close()
        slack.up()

        listed = main(["notify"])
        out = capsys.readouterr().out
        flushed = main(["notify", "--flush"])
        flush_out = capsys.readouterr().out
        again = main(["notify", "--flush"])

    assert listed == 1
    assert "waiting #1 (digest to #d, nightly night 2026-11-29): cannot reach Slack" in out
    assert flushed == 0 and again == 0
    assert "sent #1 (digest to #d, nightly night 2026-11-29)" in flush_out
    assert "flushed: 1 sent, 0 waiting" in flush_out
    assert [m.channel for m in slack.messages] == ["#d"]
    assert TOKEN not in out + flush_out


def test_an_invalid_catalogue_is_exit_4(sandbox: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = sandbox / "bad.yaml"
    bad.write_text("jobs:\n  - {label: a, backend: command, argv: [echo]}\nnotify: {envv: x}\n")

    assert main(["notify", "--flush", "--catalogue", str(bad)]) == exits.BAD_CATALOGUE
    assert "field 'notify.envv': unknown key" in capsys.readouterr().err


@pytest.mark.usefixtures("prefect_server")
def test_a_night_whose_digest_slack_refused_says_so_in_one_line(
    sandbox: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    monkeypatch.setenv("SLACK_BOT_TOKEN", TOKEN)
    with SlackEmulator(TOKEN) as slack:
        catalogue = sandbox / "nightshift.yaml"
        catalogue.write_text(
            f"notify:\n  slack: {{base_url: '{slack.base_url}'}}\n"
            "  routes: {failed: {channel: '#alerts'}}\n"
            f"jobs:\n  - {{label: bad, backend: command, argv: [{sys.executable}, -c, "
            "'import sys; sys.exit(3)']}\n"
        )
        slack.down()
        code = main(["run", "--catalogue", str(catalogue)])

    err = capsys.readouterr().err
    assert code == 1  # all failed, whatever Slack did
    [line] = [x for x in err.splitlines() if x.startswith("slack:")]
    assert line.startswith("slack: 1 message(s) wait in the outbox (cannot reach Slack")
    assert line.endswith("`nightshift notify --flush` delivers them")
    assert TOKEN not in err
