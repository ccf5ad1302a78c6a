"""A Gemini batch's clock is its SLA: the night's deadline and queue timer don't cut it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nightshift.flows.nightly import nightly
from nightshift.sandbox.gemini_emulator import BatchScript, GeminiEmulator
from tests.support import write_rows

pytestmark = pytest.mark.usefixtures("prefect_server")

# the defaults (deadline 60m, queued_timeout 15m, sla 24h) with time compressed: the same
# 4:1 deadline to queue timer, and an SLA far longer than both
CATALOGUE = """\
defaults: {poll: {initial: 0.2s, max: 0.5s}, stagger: 0s, deadline: 3s, queued_timeout: 0.75s}
jobs:
  - label: report:slow
    backend: gemini_batch
    model: gemini-2.5-flash
    input: rows.jsonl
    output: out/slow.jsonl
    sla: 60s
  - label: report:stuck
    backend: gemini_batch
    model: gemini-2.5-flash
    input: rows.jsonl
    output: out/stuck.jsonl
    sla: 8s
"""


def test_batches_outlive_the_night_deadline_and_queue_timer_and_fall_back_at_80_percent(
    sandbox: Path, emulator: GeminiEmulator
) -> None:
    write_rows(sandbox / "rows.jsonl", 4)
    (sandbox / "nightshift.yaml").write_text(CATALOGUE)
    # PENDING well past the queue timer, finished well past the night's deadline
    emulator.script_batch("report:slow", BatchScript(queued_s=4, running_s=1))
    emulator.script_batch("report:stuck", BatchScript(queued_s=3600, final="stuck"))

    run_dir = sandbox / "run"
    state = nightly(
        catalog=str(sandbox / "nightshift.yaml"), run_dir=str(run_dir), return_state=True
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    jobs = {job["label"]: job for job in summary["jobs"]}

    slow = jobs["report:slow"]
    assert slow["state"] == "succeeded", slow
    assert slow["duration_s"] > 4  # it outlived both timers that don't apply to batches
    assert emulator.count("batches.cancel") == 1  # only the stuck one, at its fallback
    stuck = jobs["report:stuck"]
    assert stuck["state"] == "succeeded", stuck
    assert stuck["data"]["reconciliation"]["fallback"] == 4
    assert stuck["duration_s"] >= 0.8 * 8
    assert state.is_completed()
    assert summary["exit_code"] == 0
