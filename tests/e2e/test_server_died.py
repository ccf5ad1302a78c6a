"""A night whose temporary Prefect server is killed under it ends with its last job, not
minutes later. The real CLI as operators run it (``tests/stopping_night.py``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path

import pytest

from tests.prefect_processes import children
from tests.stopping_night import START_S, STOP_S, Night, stop
from tests.support import wait_until

pytestmark = [
    pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc"),
    pytest.mark.timeout(600),
]


def test_a_night_whose_prefect_server_died_ends_with_its_last_job(tmp_path: Path) -> None:
    night = Night(
        tmp_path,
        [
            "  - {label: a, backend: cli, task: 'a [queue=0 run=20]'}",
            "  - {label: b, backend: cli, task: 'b [queue=0 run=25]'}",
        ],
    )
    first = night.start(1)
    try:
        wait_until(lambda: night.in_flight(2), START_S, "two jobs in flight", interval=0.2)
        servers = [p for p, cmd in children(first.pid).items() if "uvicorn" in cmd]
        assert servers, "no temporary server among the children of nightshift run"
        for pid in servers:
            os.kill(pid, signal.SIGKILL)
        try:
            first.wait(timeout=180)
        except subprocess.TimeoutExpired:
            pytest.fail("nightshift run still alive 180 s after its server died")
        ended = time.time()
        assert first.returncode == 0, night.err(1)[-2000:]
        ids = {label: i for label, (_, i) in night.jobs().items()}
        finished = max(
            datetime.fromisoformat(night.agy("jobs", "get", str(i))["finished_at"]).timestamp()
            for i in ids.values()
        )
        assert ended - finished <= STOP_S, f"ended {ended - finished:.1f}s after its last job"
        assert {j["state"] for j in night.out(1)["jobs"]} == {"succeeded"}
    finally:
        stop(first)
