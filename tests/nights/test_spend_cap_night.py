"""The spend cap from outside: three Gemini batches on the emulator, a cap below their sum, the
Slack emulator counting what the alert route heard; then the night rerun with the cap raised."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from nightshift.config.settings import load_settings
from nightshift.flows.nightly import nightly
from nightshift.sandbox.gemini_emulator import BatchScript, GeminiEmulator
from nightshift.sandbox.slack_emulator import SlackEmulator
from nightshift.store.ledger import Ledger
from tests.support import write_rows

pytestmark = pytest.mark.usefixtures("prefect_server")

TOKEN = "xoxb-spend-7f0c"
ALERTS, DIGEST = "#night-alerts", "#night-digest"
NIGHT = "2026-12-05"
LABELS = ("report:a", "report:b", "report:c")


def _catalogue(slack_url: str, cap: float) -> str:
    batches = "".join(
        f"  - {{label: '{x}', backend: gemini_batch, model: gemini-2.5-flash, input: rows.jsonl,"
        f" output: out/{x[-1]}.jsonl}}\n"
        for x in LABELS
    )
    return f"""\
name: paid
defaults: {{poll: {{initial: 0.2s, max: 0.5s}}, stagger: 0s, deadline: 60s, retries: 0,
            spend: {{usd: {cap}}}}}
notify:
  env: test
  slack: {{base_url: "{slack_url}", timeout: 2}}
  routes:
    partial: {{channel: "{DIGEST}"}}
    failed: {{channel: "{DIGEST}"}}
    alert: {{channel: "{ALERTS}"}}
jobs:
{batches}"""


@pytest.fixture
def slack(sandbox: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SlackEmulator]:
    monkeypatch.setenv("SLACK_BOT_TOKEN", TOKEN)
    with SlackEmulator(TOKEN) as emulator:
        yield emulator


def _learned(usd: float) -> None:
    """Ten past nights in which each batch's results said it cost ``usd``."""
    ledger = Ledger(load_settings().ledger_url(), "paid")
    try:
        for i in range(10):
            night, at = f"2026-11-{i + 1:02d}", datetime.now(UTC) - timedelta(days=i + 2)
            for label in LABELS:
                ledger.record_submit(night, label, "gemini_batch", f"batches/{i}", 1, at=at)
                data = {"cost_usd": usd, "ok": True}
                ledger.record_state(night, label, "succeeded", finished_at=at, data=data)
    finally:
        ledger.close()


def _run(sandbox: Path, slack: SlackEmulator, cap: float) -> dict:
    path = sandbox / "nightshift.yaml"
    path.write_text(_catalogue(slack.base_url, cap))
    run_dir = sandbox / f"run-{cap:g}"
    nightly(catalog=str(path), night=NIGHT, run_dir=str(run_dir), return_state=True)
    return json.loads((run_dir / "summary.json").read_text())


def test_a_cap_below_three_batches_submits_two_skips_one_alerts_once_and_a_raised_cap_submits_it(
    sandbox: Path, slack: SlackEmulator, emulator: GeminiEmulator
) -> None:
    write_rows(sandbox / "rows.jsonl", 3)
    for label in LABELS:
        emulator.script_batch(label, BatchScript(running_s=0.3))
    _learned(20.0)

    summary = _run(sandbox, slack, 50)
    states = {j["label"]: j for j in summary["jobs"]}
    (skipped,) = [x for x, j in states.items() if j["state"] == "skipped"]
    assert states[skipped]["detail"] == "spend cap: $40 spent or committed + $20 expected > $50"
    assert sorted(j["state"] for j in states.values()) == ["skipped", "succeeded", "succeeded"]
    assert emulator.count("batches.create") == 2  # never submitted past the cap
    alerts = slack.in_channel(ALERTS)
    assert len(alerts) == 1  # the alert route heard it once, as it happened
    assert f"`{skipped}` (gemini_batch) not submitted: spend cap: $40" in json.dumps(
        alerts[0].blocks
    )
    spend = summary["spend"]
    assert spend["cap_usd"] == 50 and spend["refused"] == [skipped]
    assert 0 < spend["spent_usd"] < 1  # the two batches' tokens, not their $20 estimates
    (digest,) = slack.in_channel(DIGEST)
    assert "spend: " in (digest.text or "") and "not submitted by the cap" in (digest.text or "")

    # the night rerun with a raised cap: only the batch the cap held back is submitted
    again = _run(sandbox, slack, 70)
    assert emulator.count("batches.create") == 3
    assert {j["label"]: j["state"] for j in again["jobs"]}[skipped] == "succeeded"
    assert again["exit_code"] == 0
