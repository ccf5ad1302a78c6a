"""Deploying as the README says: `prefect deploy --all` from a checkout, and serving beside it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SKIP = shutil.ignore_patterns(".venv", ".git", ".nightshift", "__pycache__", ".*_cache", ".tools")

pytestmark = pytest.mark.usefixtures("prefect_server")


def prefect(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """The prefect CLI as a user runs it, against the session's server."""
    from prefect.settings import PREFECT_API_URL

    env = {k: v for k, v in os.environ.items() if not k.startswith("NIGHTSHIFT_")}
    env["PREFECT_API_URL"] = str(PREFECT_API_URL.value())
    return subprocess.run(
        [sys.executable, "-m", "prefect", "--no-prompt", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def read(name: str, flow: str = "nightly") -> Any:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return client.read_deployment_by_name(f"{flow}/{name}")


def test_deploy_all_as_the_readme_says_runs_nights_in_the_checkout(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    shutil.copytree(REPO, checkout, ignore=SKIP)
    created = prefect(["work-pool", "create", "nightshift", "--type", "process"], checkout)
    assert created.returncode == 0 or "already exists" in created.stdout, created
    deployed = prefect(["deploy", "--all"], checkout)  # NIGHTSHIFT_HOME and the rest unset
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr

    deployment = read("nightly-batch-daily")
    assert deployment.work_pool_name == "nightshift"
    # the flow runs in the checkout it was deployed from, so its state folder is found there
    assert deployment.pull_steps == [
        {"prefect.deployments.steps.set_working_directory": {"directory": str(checkout)}}
    ]
    env = (deployment.job_variables or {}).get("env", {})
    assert "NIGHTSHIFT_STATE_DIR" not in env, env  # was "/.nightshift" when deployed without it
    assert deployment.concurrency_options.collision_strategy.value == "ENQUEUE"

    others = {
        "budgets-weekly": "budgets",
        "watchdog": "watchdog",
        "ledger-retention-daily": "ledger-retention",
    }
    for name, flow in others.items():
        assert read(name, flow).work_pool_name == "nightshift"
    assert read("watchdog", "watchdog").schedules[0].schedule.interval.total_seconds() == 600

    # serving registers deployments of its own and leaves the worker's ones as they were
    from deployments.serve import SUFFIX, served_deployments

    for served_one in served_deployments():
        served_one.apply()
    served = read("nightly-batch-daily" + SUFFIX)
    assert served.tags == ["nightshift"]
    assert served.global_concurrency_limit is not None
    assert served.global_concurrency_limit.limit == 1
    assert served.concurrency_options.collision_strategy.value == "ENQUEUE"
    assert served.schedules[0].schedule.cron == "0 2 * * *"
    assert served.schedules[0].schedule.timezone == "UTC"
    for name, flow in others.items():
        assert read(name + SUFFIX, flow).schedules
    still = read("nightly-batch-daily")
    assert (still.work_pool_name, still.pull_steps, still.paused) == (
        "nightshift",
        deployment.pull_steps,
        False,
    )
