"""Prefect's temporary server dies with ``nightshift run``, even after a kill -9."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.prefect_processes import QUIET_SERVICES, children, migrated_home
from tests.support import wait_until

REPO = Path(__file__).resolve().parents[2]
NIGHTSHIFT = Path(sys.executable).parent / "nightshift"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_kill_9_of_nightshift_run_leaves_no_temporary_server(tmp_path: Path) -> None:
    catalogue = tmp_path / "n.yaml"
    catalogue.write_text("jobs:\n  - {label: long, backend: command, argv: [sleep, '300']}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(
        NIGHTSHIFT_STATE_DIR=str(tmp_path / "state"),
        PREFECT_HOME=str(migrated_home(tmp_path / "prefect")),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        **QUIET_SERVICES,
        PYTHONPATH=str(REPO),
    )
    env.pop("NIGHTSHIFT_DATABASE_URL", None)
    night = subprocess.Popen(
        [str(NIGHTSHIFT), "run", "--catalog", str(catalogue)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    child_pid = tmp_path / "state" / "jobs"
    try:

        def started() -> bool:
            if list(child_pid.glob("*/child.pid")):
                return True
            assert night.poll() is None, "nightshift run ended before its job started"
            return False

        # the temporary server starts slowly on a busy machine
        wait_until(started, 240, "the job to start", interval=0.2)
        servers = [p for p, cmd in children(night.pid).items() if "uvicorn" in cmd]
        assert servers, "no temporary server among the children of nightshift run"
        night.send_signal(signal.SIGKILL)
        night.wait()
        wait_until(
            lambda: not any(_alive(p) for p in servers),
            30,
            f"the temporary server {servers} to end with its run",
            interval=0.1,
        )
    finally:
        if night.poll() is None:
            night.kill()
            night.wait()
        for path in child_pid.glob("*/child.pid"):  # the detached job outlives us by design
            with contextlib.suppress(ProcessLookupError):
                os.killpg(int(json.loads(path.read_text())["pid"]), signal.SIGKILL)
