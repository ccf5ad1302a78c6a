"""Quiet by default: one real night of history, then a normal night, raises nothing."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from nightshift.budgets.current import build_snapshot, current_budgets
from nightshift.config.settings import load_settings
from nightshift.flows.nightly import nightly
from nightshift.store.alert_log import AlertLog
from nightshift.store.ledger import Ledger

pytestmark = pytest.mark.usefixtures("prefect_server")

PY = json.dumps(sys.executable)
# seven job-CLI jobs (their backend's pooled budgets need 7 samples) and three commands, each
# with its own usual times: one night of them is all the history there is
CATALOGUE = """\
name: quiet
defaults: {poll: {initial: 0.5s, factor: 2, max: 2s}, stagger: 0.1s, deadline: 120s}
jobs:
%s"""
CLI = '  - {label: "gen:%d", backend: cli, task: "gen %d [queue=%.1f run=%.1f]"}\n'
CMD = "  - {label: 'cmd:%d', backend: command, argv: [%s, -c, 'import time; time.sleep(%.1f)']}\n"


def _catalogue(sandbox: Path) -> Path:
    jobs = "".join(CLI % (i, i, 1.0 + 0.3 * i, 0.5 + 0.4 * i) for i in range(7))
    jobs += "".join(CMD % (i, PY, 0.3 + 0.5 * i) for i in range(3))
    path = sandbox / "nightshift.yaml"
    path.write_text(CATALOGUE % jobs)
    return path


def test_one_real_night_of_history_then_a_normal_night_raises_nothing(sandbox: Path) -> None:
    path = _catalogue(sandbox)
    first = nightly(catalog=str(path), night="2026-11-30", return_state=True)
    assert first.is_completed()
    url = load_settings().ledger_url()
    ledger = Ledger(url, "quiet")
    try:
        # what normal is, learned from that one night (as `nightshift budgets --rebuild` does)
        build_snapshot(ledger, datetime.now(UTC))
        budgets = current_budgets(ledger, datetime.now(UTC))
        pooled = {state for (cat, backend, state) in budgets.backends if cat == "quiet"}
        assert {"submitting", "submitted", "running"} <= pooled  # budgets to cry wolf with
    finally:
        ledger.close()

    second = nightly(catalog=str(path), night="2026-12-01", return_state=True)
    assert second.is_completed()
    ledger = Ledger(url, "quiet")
    try:
        raised = AlertLog(ledger.engine).alerts(catalogue="quiet", night="2026-12-01")
    finally:
        ledger.close()
    assert [(r.label, r.state, r.level, r.dwell_s, r.p95_s) for r in raised] == []
