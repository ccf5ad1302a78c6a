"""Stopping a big night: three hundred jobs in flight stop within 5 s of Ctrl-C, every one
left running with its id. The real CLI as operators run it (``tests/stopping_night.py``); Ctrl-C
of a small night and its rerun: ``test_stopping.py``; a night whose server dies:
``test_server_died.py``.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.stopping_night import STOP_S, Night, signalled, stop
from tests.support import wait_until

pytestmark = [
    pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc"),
    pytest.mark.timeout(900),  # a server start and 300 submits on a busy 2-core machine
]


def test_three_hundred_jobs_in_flight_stop_within_five_seconds(tmp_path: Path) -> None:
    jobs = [
        f"  - {{label: j{i:03}, backend: cli, task: 'j{i} [queue=0 run=900]'}}" for i in range(300)
    ]
    night = Night(tmp_path, jobs)
    first = night.start(1)
    try:
        wait_until(lambda: night.in_flight(300), 600, "300 jobs in flight", interval=0.5)
        took = signalled(first, signal.SIGINT)
        assert first.returncode == 130, night.err(1)[-2000:]
        assert took <= STOP_S, f"stopped {took:.1f}s after the signal"
        summary = night.out(1)
        assert len(summary["left_running"]) == 300
        assert night.lease_holder() is None
        assert night.in_flight(300)  # still in flight in the ledger, with their ids
    finally:
        stop(first)
