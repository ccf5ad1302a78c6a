"""A night whose ledger's disk fills while its jobs run, stopped from outside (issue 43).

The real ``nightshift run`` in a session of its own (``tests/stopping_night.py``), two command jobs,
and a ledger whose writes fail as SQLite fails on a full disk from the moment the test says so
(``tests/full_disk_cli.py``). One line names the ledger's disk as soon as the jobs' ends cannot be
written; one SIGTERM ends the night within 5 s (before the fix the night waited for its ledger
forever and lived on after the first SIGTERM); once there is room the rerun reports each job's
true outcome, each run once.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.stopping_night import NIGHT, START_S, STOP_S, Night, kill_jobs, signalled, stop
from tests.support import wait_until

pytestmark = [
    pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc"),
    pytest.mark.timeout(900),  # two server starts on a busy 2-core machine
]


def _start(night: Night, run: int, full: Path) -> subprocess.Popen[str]:
    argv = ["run", "--catalogue", str(night.catalogue), "--night", NIGHT, "--json"]
    return subprocess.Popen(
        [sys.executable, "-m", "tests.full_disk_cli", *argv],
        env={**night.env, "NIGHTSHIFT_TEST_FULL": str(full)},
        stdout=(night.tmp / f"out-{run}.txt").open("w"),
        stderr=(night.tmp / f"err-{run}.txt").open("w"),
        start_new_session=True,
        text=True,
    )


def test_a_full_ledger_is_named_one_sigterm_ends_the_night_and_the_rerun_finds_the_truth(
    tmp_path: Path,
) -> None:
    night = Night(
        tmp_path,
        [
            "  - {label: ok, backend: command, argv: [sleep, '4']}",
            "  - {label: bad, backend: command, argv: [sh, -c, 'sleep 4; exit 3']}",
        ],
        name="fulldisk",
    )
    full = tmp_path / "disk-is-full"
    first = _start(night, 1, full)
    try:
        wait_until(lambda: night.in_flight(2), START_S, "two jobs in flight", interval=0.2)
        full.touch()  # from here on the ledger cannot write
        named = "nightshift: the ledger cannot write"
        wait_until(lambda: named in night.err(1), 60, "the full disk named", interval=0.2)
        lines = [x for x in night.err(1).splitlines() if named in x]
        assert len(lines) == 1 and "ledger.sqlite3) is full" in lines[0], lines
        took = signalled(first, signal.SIGTERM)
        assert first.returncode == 143, night.err(1)
        assert took <= STOP_S, f"stopped {took:.1f}s after one SIGTERM"
        full.unlink()  # room again
        second = _start(night, 2, full)
        try:
            second.wait(timeout=START_S)
        finally:
            stop(second)
        again = {j["label"]: j for j in night.out(2)["jobs"]}
        assert (again["ok"]["state"], again["bad"]["state"]) == ("succeeded", "failed"), again
        assert again["ok"]["attempts"] == again["bad"]["attempts"] == 1, again
        assert night.submits() == 2  # two processes started, tonight and on the rerun
    finally:
        stop(first)
        kill_jobs(night)
