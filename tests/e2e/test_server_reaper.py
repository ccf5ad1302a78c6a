"""Prefect's temporary server dies with ``nightshift run``, even after a kill -9; it starts before
the run imports Prefect, and no job inherits it."""

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


def _env(tmp_path: Path) -> dict[str, str]:
    """A night with no Prefect API configured: its temporary server's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(
        NIGHTSHIFT_STATE_DIR=str(tmp_path / "state"),
        PREFECT_HOME=str(migrated_home(tmp_path / "prefect")),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        **QUIET_SERVICES,
        PYTHONPATH=str(REPO),
    )
    env.pop("NIGHTSHIFT_DATABASE_URL", None)
    return env


def test_the_temporary_server_starts_first_and_no_job_inherits_it(tmp_path: Path) -> None:
    """Started before Prefect is imported (its start-up beside ours; Prefect's own would import
    its server into this process first, ~3 s more CPU, and start it only then); the job's
    environment has no PREFECT_API_URL: the server dies with the night, the job outlives it."""
    catalogue = tmp_path / "n.yaml"
    seen = tmp_path / "job.env"
    catalogue.write_text(
        f"jobs:\n  - {{label: e, backend: command, argv: [sh, -c, 'env > {seen}']}}\n"
    )
    env = _env(tmp_path) | {"PYTHONPROFILEIMPORTTIME": "1"}  # each import, on stderr
    done = subprocess.run(
        [str(NIGHTSHIFT), "run", "--catalog", str(catalogue), "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()]
    assert "prefect.flows" in imported  # the night's own imports are on stderr
    assert "prefect.server.api.server" not in imported  # the server is another process
    job_env = dict(line.split("=", 1) for line in seen.read_text().splitlines() if "=" in line)
    assert "PREFECT_API_URL" not in job_env
    assert not any(name.startswith("NIGHTSHIFT_TEMPORARY") for name in job_env)
    # the server's own output, in the run's folder: where a failed start points
    assert [p.name for p in (tmp_path / "state" / "runs").rglob("prefect-server.log")]


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_kill_9_of_nightshift_run_leaves_no_temporary_server(tmp_path: Path) -> None:
    catalogue = tmp_path / "n.yaml"
    catalogue.write_text("jobs:\n  - {label: long, backend: command, argv: [sleep, '300']}\n")
    env = _env(tmp_path)
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


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_ctrl_c_while_the_temporary_server_starts_is_one_line_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    """Before the night's own Ctrl-C handling (its server starting, Prefect being imported): exit
    130 with one line, no traceback, nothing submitted, no server left behind."""
    catalogue = tmp_path / "n.yaml"
    catalogue.write_text("jobs:\n  - {label: j, backend: command, argv: [sleep, '300']}\n")
    night = subprocess.Popen(
        [str(NIGHTSHIFT), "run", "--catalog", str(catalogue)],
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(
            lambda: [p for p, cmd in children(night.pid).items() if "uvicorn" in cmd],
            120,
            "the temporary server to start",
            interval=0.05,
        )
        servers = [p for p, cmd in children(night.pid).items() if "uvicorn" in cmd]
        night.send_signal(signal.SIGINT)
        _out, err = night.communicate(timeout=60)
    finally:
        if night.poll() is None:
            night.kill()
            night.wait()
    assert night.returncode == 130, err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("interrupted"), err
    assert not list((tmp_path / "state").rglob("child.pid"))  # nothing submitted
    wait_until(lambda: not any(_alive(p) for p in servers), 30, "its server to end", 0.1)
