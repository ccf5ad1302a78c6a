"""A hundred jobs and more in flight at once hold a bounded number of threads (one night, the
real Prefect server, the fake agy CLI). A thousand on one worker: ``bench/scale.py``."""

from __future__ import annotations

import json
import threading
from datetime import datetime
from pathlib import Path

import pytest

from nightshift.config.settings import load_settings
from nightshift.flows.nightly import nightly
from nightshift.store.ledger import Ledger

pytestmark = pytest.mark.usefixtures("prefect_server")

# enough that a thread per job in flight shows well past the bound (at least 60 in flight at
# once against 48); 300 cost this test 74 s of CPU (the fake CLI, the server) for no more power
JOBS = 120
# the night's own threads on top of what the process had: job pools, the watcher and its
# status calls, the lease; the thread-pool runner took one per job in flight
EXTRA_THREADS = 48


class PeakThreads:
    """The most threads this process had while counting: looked at as each thread starts."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.peak = threading.active_count()
        self.counting = True
        start = threading.Thread.start

        def counted(thread: threading.Thread) -> None:
            start(thread)
            if self.counting:
                self.peak = max(self.peak, threading.active_count())

        monkeypatch.setattr(threading.Thread, "start", counted)


def most_at_once(spans: list[tuple[datetime, datetime]]) -> int:
    """The most spans open at one instant."""
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def test_a_hundred_and_more_jobs_in_flight_hold_few_threads(
    sandbox: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = [
        "defaults:",
        "  poll: {initial: 0.5s, factor: 2, max: 2s}",
        "  stagger: 0s",
        "  deadline: 600s",
        "jobs:",
    ]
    lines += [
        f"  - {{label: j{i:03d}, backend: cli, task: 'w [queue=0 run=30]'}}" for i in range(JOBS)
    ]
    path = sandbox / "nightshift.yaml"
    path.write_text("\n".join(lines) + "\n")
    run_dir = sandbox / "run"
    before = threading.active_count()
    threads = PeakThreads(monkeypatch)
    state = nightly(catalog=str(path), run_dir=str(run_dir), night="2000-01-01", return_state=True)
    threads.counting = False
    summary = json.loads((run_dir / "summary.json").read_text())
    assert state.is_completed(), [j for j in summary["jobs"] if j["state"] != "succeeded"][:3]
    ledger = Ledger(load_settings().ledger_url(), str(path.resolve()))
    records = [ledger.get_job("2000-01-01", f"j{i:03d}") for i in range(JOBS)]
    ledger.close()
    spans = [(r.submitted_at, r.finished_at) for r in records if r and r.submitted_at]
    assert all(end is not None for _, end in spans)
    # most of the night was in flight together, so a thread per waiting job would show
    assert most_at_once(spans) >= JOBS // 2  # type: ignore[arg-type]
    assert threads.peak - before <= EXTRA_THREADS, (before, threads.peak)
