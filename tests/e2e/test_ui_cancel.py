"""Cancel in the Prefect UI stops the work: a real server, a process worker, a deployed night.

The flow run is set Cancelling through the API, as the UI's Cancel button does; the worker stops
the night's process and the flow's ``on_cancellation`` hook cancels the external jobs in flight
(they cost money), from the ledger. The run ends Cancelled, the jobs cancelled out there and in
the ledger.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nightshift.store.ledger import Ledger
from tests.prefect_processes import prefect_site
from tests.support import wait_until

REPO = Path(__file__).resolve().parents[2]
SKIP = shutil.ignore_patterns(".venv", ".git", ".nightshift", "__pycache__", ".*_cache", ".tools")
PY = sys.executable
NIGHT = "2026-11-28"
NAME = "ui-cancel"
CATALOGUE = f"""\
name: {NAME}
defaults: {{poll: {{initial: 0.5s, factor: 2, max: 1s}}, stagger: 0s, deadline: 900s}}
jobs:
  - {{label: a, backend: cli, task: 'a [queue=0 run=600]'}}
  - {{label: b, backend: cli, task: 'b [queue=0 run=600]'}}
  - {{label: c, backend: command, argv: [sleep, '600']}}
"""

pytestmark = [
    pytest.mark.skipif(not Path("/proc").is_dir(), reason="kills its jobs by pid"),
    pytest.mark.timeout(900),  # a server, a worker and a deploy on a busy 2-core machine
]


def _jobs(url: str) -> dict[str, tuple[str, str | None]]:
    ledger = Ledger(url, NAME)
    try:
        with ledger.engine.begin() as conn:
            rows = conn.exec_driver_sql(
                "select label, state, external_id from jobs where catalogue = ? and night = ?",
                (NAME, NIGHT),
            ).all()
    finally:
        ledger.close()
    return {row[0]: (row[1], row[2]) for row in rows}


def _agy(env: dict[str, str], job_id: str) -> Any:
    out = subprocess.run(
        [PY, "-m", "nightshift.sandbox.agy", "jobs", "get", job_id, "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out)


def test_cancel_from_the_ui_cancels_the_jobs_and_the_run_ends_cancelled(tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.states import Cancelling

    checkout = tmp_path / "checkout"
    shutil.copytree(REPO, checkout, ignore=SKIP)
    (checkout / "nightshift.yaml").write_text(CATALOGUE)
    state = tmp_path / "state"
    nights = {
        "NIGHTSHIFT_STATE_DIR": str(state),
        "NIGHTSHIFT_AGY": f"{PY} -m nightshift.sandbox.agy",
        "AGY_STATE_DIR": str(tmp_path / "agy"),
        "PYTHONPATH": str(checkout),
    }
    url = f"sqlite:///{state / 'ledger.sqlite3'}"
    try:
        with prefect_site(
            tmp_path, pool="nightshift", worker_cwd=checkout, extra_env=nights
        ) as site:
            deployed = site.prefect("deploy", "--all", cwd=checkout)
            assert deployed.returncode == 0, deployed.stdout + deployed.stderr
            with temporary_settings({PREFECT_API_URL: site.api}):
                run = run_deployment(
                    "nightly/nightly-batch-daily", parameters={"night": NIGHT}, timeout=0
                )

                def in_flight() -> bool:
                    jobs = _jobs(url) if (state / "ledger.sqlite3").exists() else {}
                    return len([j for j in jobs.values() if j[1]]) == 3 and all(
                        s in ("queued", "running", "submitted") for s, _ in jobs.values()
                    )

                wait_until(in_flight, 300, "three jobs in flight", interval=0.5)
                with get_client(sync_client=True) as client:  # as the UI's Cancel does
                    client.set_flow_run_state(run.id, Cancelling(), force=True)

                def ended() -> bool:
                    with get_client(sync_client=True) as client:
                        found = client.read_flow_run(run.id).state
                    return found is not None and found.is_final()

                wait_until(ended, 180, "the flow run to end", interval=0.5)
                with get_client(sync_client=True) as client:
                    final = client.read_flow_run(run.id).state
                assert final is not None and final.type.value == "CANCELLED", (
                    f"{final}\n{site.log_tail()}"
                )
            jobs = _jobs(url)
            assert {s for s, _ in jobs.values()} == {"cancelled"}, (jobs, site.log_tail())
            env = {**os.environ, **nights}
            for label in ("a", "b"):
                assert _agy(env, str(jobs[label][1]))["state"] == "cancelled"
            for path in (state / "jobs").glob("*/child.pid"):
                pid = int(json.loads(path.read_text())["pid"])
                wait_until(lambda p=pid: not _alive(p), 30, "the command job to end")
    finally:
        for path in (state / "jobs").glob("*/child.pid"):
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.killpg(int(json.loads(path.read_text())["pid"]), signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return status not in ("Z", "X")
