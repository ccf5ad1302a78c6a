"""The CLI's signal handling on a real process: the first signal asks the night to stop, a
second one exits at once (128 + the signal)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = """\
import threading
import time
from nightshift.cli.stopping import run_stoppable
from nightshift.engine.stopping import NightStop

stop = NightStop()
asked = threading.Event()
stop.on_request(asked.set)

def night():
    print("ready", flush=True)
    asked.wait()
    print("asked", stop.reason, stop.exit_code, flush=True)
    time.sleep(600)  # a night that does not end

run_stoppable(night, stop, lambda: True)
"""


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_the_first_signal_asks_the_night_to_stop_and_a_second_exits_at_once(
    sig: int, code: int
) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(sig)
        assert proc.stdout.readline().split() == ["asked", "interrupted", str(code)]
        assert proc.poll() is None  # the first signal only asks
        sent = time.monotonic()
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == code
        assert time.monotonic() - sent < 5
        assert "stopped at once" in proc.stderr.read() if proc.stderr else False
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
