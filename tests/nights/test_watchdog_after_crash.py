"""A night killed with a job in flight: the watchdog, reading only the ledger, names it once."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from nightshift.config.loader import load_catalogue
from nightshift.config.settings import load_settings
from nightshift.flows.watchdog import watchdog
from nightshift.store.alert_log import DWELL, STOPPED, AlertLog, AlertRecord
from nightshift.store.lease import Lease
from nightshift.store.ledger import Ledger
from nightshift.watchdog.run import watch_once
from tests.support import REPO, start_run, wait_until

NIGHT = "2026-11-29"
CATALOGUE = """\
name: watched
defaults: {poll: {initial: 0.2s, max: 0.5s}, stagger: 0s}
jobs:
  - label: long
    backend: command
    argv: [%(py)s, -c, "import os, time\\nwhile not os.path.exists('%(stop)s'): time.sleep(0.2)"]
"""
RUNNING_P95_S = 300.0  # seeded: long normally runs 5 minutes; 2 x p95 = 10 minutes


class _Kept:
    def __init__(self) -> None:
        self.sent: list[AlertRecord] = []

    def send(self, alert: AlertRecord) -> None:
        self.sent.append(alert)


def _seed_history(ledger: Ledger, now: datetime) -> None:
    """Eight earlier nights of ``long``: a second queued, five minutes running, succeeded."""
    for day in range(8, 0, -1):
        start = now - timedelta(days=day, hours=-2)  # the last success well within 24 h
        night = start.date().isoformat() + "-seed"
        ledger.record_submit(night, "long", "command", f"seed-{day}", 1, at=start)
        moments = [("queued", 0.0), ("running", 1.0), ("succeeded", 1.0 + RUNNING_P95_S)]
        for state, offset in moments:
            at = start + timedelta(seconds=offset)
            ledger.transition(night, "seed", "long", "command", f"seed-{day}", state, at, 1)
        ledger.record_state(night, "long", "succeeded", finished_at=at)


@pytest.mark.usefixtures("prefect_server")
def test_the_watchdog_names_a_killed_nights_overstaying_job_once(
    sandbox: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NIGHTSHIFT_LEASE_TTL", "2")
    stop = sandbox / "stop-long"
    path = sandbox / "nightshift.yaml"
    path.write_text(CATALOGUE % {"py": sys.executable, "stop": stop})
    url = load_settings().ledger_url()
    ledger = Ledger(url, "watched")
    _seed_history(ledger, datetime.now(UTC))
    night = start_run(path, NIGHT)
    try:
        try:

            def long_is_running() -> bool:
                return any(t.to_state == "running" for t in ledger.dwells(NIGHT, "long"))

            wait_until(long_is_running, 90, "the night to start 'long'", interval=0.1)
        finally:
            night.send_signal(signal.SIGKILL)  # no cleanup, no lease release, no summary
            night.wait()
        held = Lease(ledger.engine, "watched").holder()
        assert held is not None
        wait_until(lambda: datetime.now(UTC) > held[1], 10, "the lease to expire", interval=0.1)

        # eleven minutes on (past 2 x p95 of running), the night long dead: one pass
        later = datetime.now(UTC) + timedelta(minutes=11)
        labels = [job.label for job in load_catalogue(path).jobs]
        sink = _Kept()
        report = watch_once(url, catalogue="watched", labels=labels, sink=sink, now=later)
        assert [(a.kind, a.label, a.state, a.night) for a in sink.sent] == [
            (STOPPED, "", "", NIGHT),
            (DWELL, "long", "running", NIGHT),
        ]
        assert report.raised == sink.sent and report.in_flight == 1
        stopped, dwell = sink.sent
        assert "stopped watching: its lease" in (stopped.detail or "")
        assert "1 in flight: long (running)" in (stopped.detail or "")
        assert dwell.p95_s == RUNNING_P95_S and (dwell.dwell_s or 0) > 2 * RUNNING_P95_S

        # the next pass finds the same and raises nothing new
        again = watch_once(url, catalogue="watched", labels=labels, sink=sink, now=later)
        assert (len(again.found), again.raised, len(sink.sent)) == (2, [], 2)
        rows = AlertLog(ledger.engine).alerts(catalogue="watched")
        assert [(r.kind, r.raised_by) for r in rows] == [(STOPPED, "watchdog"), (DWELL, "watchdog")]

        # the flow, now (not yet past 2 x p95): the stopped night, already raised, nothing new
        result = watchdog(catalog=str(path), sink=sink)
        assert (result["in_flight"], result["found"], result["raised"]) == (1, 1, [])

        # the CLI, the same (not yet past 2 x p95): the stopped night, already raised, nothing new
        cli = [sys.executable, "-m", "nightshift.cli.main", "watchdog", "--json"]
        out = subprocess.run(
            [*cli, "--catalogue", str(path)], cwd=REPO, capture_output=True, text=True, check=True
        )
        shown = json.loads(out.stdout)
        assert (shown["in_flight"], shown["found"], shown["raised"]) == (1, 1, [])
    finally:
        stop.touch()  # the detached job ends on its own
        ledger.close()
