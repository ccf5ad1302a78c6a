"""A night killed between an external create and its ledger write: the rerun creates nothing."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from nightshift.config.settings import load_settings
from nightshift.flows.nightly import nightly
from nightshift.sandbox.gemini_emulator import BatchScript, GeminiEmulator
from nightshift.store.lease import Lease
from nightshift.store.ledger import Ledger
from tests.support import start_run, wait_until, write_rows

pytestmark = pytest.mark.usefixtures("prefect_server")

NIGHT = "2026-11-28"
DEFAULTS = "defaults: {poll: {initial: 0.2s, max: 0.5s}, stagger: 0s, retries: 0}\n"
CLI = f"name: crash-cli\n{DEFAULTS}jobs:\n  - {{label: gen, backend: cli, task: 'a [run=1]'}}\n"
BATCH = f"""\
name: crash-batch
{DEFAULTS}jobs:
  - {{label: report, backend: gemini_batch, model: gemini-2.5-flash, input: rows.jsonl,
     output: out/report.jsonl}}
"""


def kill_mid_submit(path: Path, created: Callable[[], bool], key: str, label: str) -> None:
    """Start ``nightshift run``, SIGKILL it once its create went through, await its lease."""
    # a session of its own: its hanging job CLI goes with it below
    night = start_run(path, NIGHT, start_new_session=True)
    try:
        wait_until(created, 90, "the external job to be created", interval=0.1)
    finally:
        os.killpg(night.pid, signal.SIGKILL)  # no cleanup, no ledger write, no lease release
        night.wait()
    ledger = Ledger(load_settings().ledger_url(), key)
    try:
        record = ledger.get_job(NIGHT, label)
        assert record is not None and record.state == "submitting" and not record.external_id
        held = Lease(ledger.engine, key).holder()
        assert held is not None
        wait_until(lambda: datetime.now(UTC) > held[1], 20, "the lease to expire", interval=0.1)
    finally:
        ledger.close()


def test_a_job_cli_run_whose_night_died_before_recording_it_is_found_by_the_rerun(
    sandbox: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = sandbox / "agy-calls.jsonl"
    monkeypatch.setenv("NIGHTSHIFT_LEASE_TTL", "2")
    monkeypatch.setenv("AGY_CALL_LOG", str(calls))
    monkeypatch.setenv("AGY_LOSE_RUNS", "1")  # the first run makes its job, then hangs
    monkeypatch.setenv("AGY_LOSE_AS", "hang")
    path = sandbox / "nightshift.yaml"
    path.write_text(CLI)

    def runs() -> int:
        if not calls.exists():
            return 0
        lines = calls.read_text().splitlines()
        return sum(json.loads(line)[0] == "run" for line in lines)

    agy_jobs = sandbox / "agy" / "jobs"
    kill_mid_submit(
        path,
        lambda: runs() == 1 and agy_jobs.is_dir() and any(agy_jobs.iterdir()),
        "crash-cli",
        "gen",
    )

    state = nightly(
        catalog=str(path), night=NIGHT, run_dir=str(sandbox / "rerun"), return_state=True
    )
    assert state.is_completed()
    assert runs() == 1  # re-attached to the job the dead night made: one billed run
    ledger = Ledger(load_settings().ledger_url(), "crash-cli")
    try:
        record = ledger.get_job(NIGHT, "gen")
        assert (record.state, record.attempts) == ("succeeded", 1)
    finally:
        ledger.close()


def test_a_batch_whose_night_died_before_recording_it_is_found_by_the_rerun(
    sandbox: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_rows(sandbox / "rows.jsonl", 3, text="hi")
    path = sandbox / "nightshift.yaml"
    path.write_text(BATCH)
    monkeypatch.setenv("NIGHTSHIFT_LEASE_TTL", "2")
    monkeypatch.setenv("GEMINI_API_KEY", "test-key")
    with GeminiEmulator(api_key="test-key") as emu:
        monkeypatch.setenv("NIGHTSHIFT_GEMINI_BASE_URL", emu.base_url)
        emu.script_batch("report", BatchScript(running_s=0.5))
        emu.inject_faults("hang", "batches.create")  # the batch is made, the answer never comes
        kill_mid_submit(path, lambda: emu.count("batches.create") == 1, "crash-batch", "report")
        state = nightly(
            catalog=str(path), night=NIGHT, run_dir=str(sandbox / "rerun"), return_state=True
        )
        assert state.is_completed()
        assert emu.count("batches.create") == 1
        assert len(emu.batches()) == 1
