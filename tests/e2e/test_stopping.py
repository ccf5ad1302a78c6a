"""Stopping ``nightshift run`` as operators do: Ctrl-C or SIGTERM to its process group.

A real ``nightshift run`` in a session of its own, the fake agy job CLI and command jobs, the
temporary Prefect server (``tests/stopping_night.py``): the signal stops the night within 5 s
(130 / 143), the jobs keep running out there and in flight in the ledger, the lease is free, and
a rerun re-attaches to them without submitting anything twice. Three hundred jobs and a night
whose server dies: ``test_stopping_many.py``.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from nightshift.states import LIVE as LIVE_STATES
from tests.stopping_night import START_S, STOP_S, Night, kill_jobs, signalled, stop
from tests.support import wait_until

pytestmark = [
    pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc"),
    pytest.mark.timeout(900),  # two server starts on a busy 2-core machine
]


@pytest.mark.picture  # as a user's night: its report drawn (on by default)
@pytest.mark.parametrize(
    ("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"]
)
def test_a_signal_to_the_group_stops_the_night_and_a_rerun_re_attaches(
    tmp_path: Path, sig: int, code: int
) -> None:
    # 600 s at most, should the test leave it behind
    release = f"for i in $(seq 3000); do [ -e {tmp_path / 'release'} ] && break; sleep 0.2; done"
    night = Night(
        tmp_path,
        [
            "  - {label: a, backend: cli, task: 'a [queue=0 run=600]'}",
            "  - {label: b, backend: cli, task: 'b [queue=0 run=600]'}",
            # a command job that runs until the test lets it end
            f"  - {{label: c, backend: command, argv: [sh, -c, '{release}']}}",
        ],
        limits="{cli: 3}",  # a Prefect limit: its slots must be given back
    )
    first = night.start(1)
    try:
        wait_until(lambda: night.in_flight(3), START_S, "three jobs in flight", interval=0.2)
        took = signalled(first, sig)
        assert first.returncode == code, night.err(1)
        assert took <= STOP_S, f"stopped {took:.1f}s after the signal"
        # the summary says why and what is still out there; one line says what to do
        summary = night.out(1)
        assert summary["reason"] == "interrupted" and summary["exit_code"] == code
        left = {j["label"]: j["external_id"] for j in summary["left_running"]}
        assert set(left) == {"a", "b", "c"} and all(left.values())
        line = [x for x in night.err(1).splitlines() if x.startswith("interrupted:")]
        assert len(line) == 1 and "3 job(s) left running" in line[0]
        assert "nightshift run" in line[0] and "nightshift cancel" in line[0]
        # the jobs still run out there and in flight in the ledger; the lease is free
        assert night.agy("jobs", "get", left["a"])["state"] == "running"
        assert {s for s, _ in night.jobs().values()} <= LIVE_STATES
        assert {label: i for label, (_, i) in night.jobs().items()} == left
        assert night.lease_holder() is None
        assert set(night.slots_taken().values()) == {0}, night.slots_taken()
        # the Prefect UI shows the night's run ended as interrupted, not running for ever
        (run,) = night.flow_runs()
        assert run[1:] == ("Interrupted", "FAILED"), run
        submitted = night.submits()
        assert submitted == 3
        # the rerun starts at once and re-attaches to the three, still running; once it asks
        # the job CLI about them, they end (the test lets them: no fixed wait)
        asked = len(night.calls.read_text().splitlines())
        second = night.start(2)
        try:
            wait_until(
                lambda: len(night.calls.read_text().splitlines()) > asked,
                START_S,
                "the rerun asking about its jobs",
                interval=0.2,
            )
            night.end_agy_jobs_now()
            (tmp_path / "release").touch()
            second.wait(timeout=START_S)
        finally:
            stop(second)
        assert second.returncode == 0, night.err(2)
        assert night.submits() == submitted
        rerun = night.out(2)
        assert {j["label"]: j["external_id"] for j in rerun["jobs"]} == left
        assert {j["state"] for j in rerun["jobs"]} == {"succeeded"}
    finally:
        stop(first)
        kill_jobs(night)
