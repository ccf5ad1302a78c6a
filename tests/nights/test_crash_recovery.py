"""A night killed mid-way: its detached jobs live on, its lease runs out, the rerun re-attaches."""

from __future__ import annotations

import signal
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from nightshift.config.settings import load_settings
from nightshift.flows.nightly import nightly
from nightshift.store.lease import Lease
from nightshift.store.ledger import Ledger
from tests.support import start_run, wait_until

NIGHT = "2026-11-27"
CATALOGUE = """\
name: crash-test
defaults: {poll: {initial: 0.2s, max: 0.5s}, stagger: 0s}
jobs:
  - {label: quick, backend: command, argv: [%(py)s, -c, "print('quick')"]}
  - label: long
    backend: command
    argv: [%(py)s, -c, "import time; print('working', flush=True); time.sleep(6); print('done')"]
"""


@pytest.mark.usefixtures("prefect_server")
def test_a_killed_night_is_resumed_without_resubmitting(
    sandbox: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NIGHTSHIFT_LEASE_TTL", "2")
    path = sandbox / "nightshift.yaml"
    path.write_text(CATALOGUE % {"py": sys.executable})
    first = start_run(path, NIGHT)
    ledger = Ledger(load_settings().ledger_url(), "crash-test")
    try:

        def long_is_running() -> bool:
            record = ledger.get_job(NIGHT, "long")
            quick = ledger.get_job(NIGHT, "quick")
            running = [t for t in ledger.dwells(NIGHT, "long") if t.to_state == "running"]
            return bool(record and quick and quick.state == "succeeded" and running)

        wait_until(long_is_running, 60, "the first night to start 'long'", interval=0.1)
    finally:
        first.send_signal(signal.SIGKILL)  # no cleanup, no lease release, no summary
        first.wait()
    long_before = ledger.get_job(NIGHT, "long")

    # the crashed night's lease runs out on its own
    lease = Lease(ledger.engine, "crash-test")
    held = lease.holder()
    assert held is not None and held[0] != lease.owner
    wait_until(lambda: datetime.now(UTC) > held[1], 10, "the lease to expire", interval=0.1)

    run_dir = sandbox / "rerun"
    state = nightly(catalog=str(path), night=NIGHT, run_dir=str(run_dir), return_state=True)
    assert state.is_completed()
    long_after = ledger.get_job(NIGHT, "long")
    assert long_after.external_id == long_before.external_id  # re-attached, not re-submitted
    assert long_after.attempts == 1
    assert ledger.get_job(NIGHT, "quick").attempts == 1
    jobs_dir = Path(load_settings().state_dir) / "jobs"
    assert len([d for d in jobs_dir.iterdir() if d.name.startswith("long-")]) == 1
