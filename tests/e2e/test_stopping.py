"""Stopping ``nightshift run`` as operators do: Ctrl-C or SIGTERM to its process group.

A real ``nightshift run`` in a session of its own, the fake agy job CLI and command jobs, the
temporary Prefect server: the signal stops the night within 5 s (130 / 143), the jobs keep
running out there and in flight in the ledger, the lease is free, and a rerun re-attaches to
them without submitting anything twice. A night whose Prefect server dies ends with its jobs.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from nightshift.states import LIVE as LIVE_STATES
from nightshift.store.lease import Lease
from nightshift.store.ledger import Ledger
from tests.prefect_processes import children
from tests.support import wait_until

REPO = Path(__file__).resolve().parents[2]
NIGHTSHIFT = Path(sys.executable).parent / "nightshift"
NIGHT = "2026-11-30"
START_S = 300  # the temporary server's first start on a busy 2-core machine, and the submits
STOP_S = 5.0  # the promise: stopped this long after the signal at most

pytestmark = [
    pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc"),
    pytest.mark.timeout(900),  # two server starts on a busy 2-core machine
]


class Night:
    """One catalogue in its own folders, run by the real CLI in a session of its own."""

    def __init__(
        self, tmp: Path, jobs: list[str], name: str = "stopping", limits: str | None = None
    ) -> None:
        self.tmp = tmp
        self.name = name
        self.catalogue = tmp / "n.yaml"
        head = [
            f"name: {name}",
            "defaults: {poll: {initial: 0.5s, factor: 2, max: 1s}, stagger: 0s, deadline: 900s}",
            *([f"limits: {limits}"] if limits else []),
            "jobs:",
        ]
        self.catalogue.write_text("\n".join([*head, *jobs]) + "\n")
        self.calls = tmp / "agy-calls.log"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
        self.env.update(
            NIGHTSHIFT_STATE_DIR=str(tmp / "state"),
            PREFECT_HOME=str(tmp / "prefect"),
            PREFECT_SERVER_ANALYTICS_ENABLED="false",
            PYTHONPATH=str(REPO),
            NIGHTSHIFT_AGY=f"{sys.executable} -m nightshift.sandbox.agy",
            AGY_STATE_DIR=str(tmp / "agy"),
            AGY_CALL_LOG=str(self.calls),
        )
        self.env.pop("NIGHTSHIFT_DATABASE_URL", None)
        self.url = f"sqlite:///{tmp / 'state' / 'ledger.sqlite3'}"

    def start(self, run: int) -> subprocess.Popen[str]:
        argv = [str(NIGHTSHIFT), "run", "--catalogue", str(self.catalogue), "--night", NIGHT]
        return subprocess.Popen(
            [*argv, "--json"],
            env=self.env,
            stdout=(self.tmp / f"out-{run}.txt").open("w"),
            stderr=(self.tmp / f"err-{run}.txt").open("w"),
            start_new_session=True,  # its own process group, as a terminal gives it
            text=True,
        )

    def out(self, run: int) -> dict[str, Any]:
        return dict(json.loads((self.tmp / f"out-{run}.txt").read_text()))

    def err(self, run: int) -> str:
        return (self.tmp / f"err-{run}.txt").read_text()

    def jobs(self) -> dict[str, Any]:
        """label -> (state, external id) in the ledger, once it exists."""
        if not (self.tmp / "state" / "ledger.sqlite3").exists():
            return {}
        ledger = Ledger(self.url, self.name)
        try:
            with ledger.engine.begin() as conn:
                rows = conn.exec_driver_sql(
                    "select label, state, external_id from jobs where catalogue = ? and night = ?",
                    (self.name, NIGHT),
                ).all()
        finally:
            ledger.close()
        return {row[0]: (row[1], row[2]) for row in rows}

    def in_flight(self, count: int) -> bool:
        jobs = self.jobs()
        live = [j for j in jobs.values() if j[0] in LIVE_STATES and j[1]]
        return len(live) >= count

    def submits(self) -> int:
        """``agy run`` calls, and command jobs started: each a submission."""
        runs = 0
        if self.calls.exists():
            runs = sum(1 for line in self.calls.read_text().splitlines() if '"run"' in line)
        folders = self.tmp / "state" / "jobs"
        return runs + (len(list(folders.iterdir())) if folders.is_dir() else 0)

    def lease_holder(self) -> Any:
        ledger = Ledger(self.url, self.name)
        try:
            return Lease(ledger.engine, self.name).holder()
        finally:
            ledger.close()

    def slots_taken(self) -> dict[str, int]:
        """The Prefect limits' taken slots, in the temporary server's database."""
        import sqlite3

        with sqlite3.connect(self.tmp / "prefect" / "prefect.db") as db:
            rows = db.execute("select name, active_slots from concurrency_limit_v2").fetchall()
        return {str(name): int(n) for name, n in rows}

    def agy(self, *argv: str) -> Any:
        out = subprocess.run(
            [sys.executable, "-m", "nightshift.sandbox.agy", *argv, "--json"],
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return json.loads(out)


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _kill_jobs(night: Night) -> None:
    """The detached command jobs outlive the night by design: end them after the test."""
    for path in (night.tmp / "state" / "jobs").glob("*/child.pid"):
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.killpg(int(json.loads(path.read_text())["pid"]), signal.SIGKILL)


def _signalled(proc: subprocess.Popen[str], sig: int) -> float:
    """Send ``sig`` to the run's process group; seconds until it exited (fails past 60 s)."""
    sent = time.monotonic()
    os.killpg(proc.pid, sig)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"nightshift run still alive 60 s after signal {sig}")
    return time.monotonic() - sent


@pytest.mark.parametrize(
    ("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"]
)
def test_a_signal_to_the_group_stops_the_night_and_a_rerun_re_attaches(
    tmp_path: Path, sig: int, code: int
) -> None:
    night = Night(
        tmp_path,
        [
            "  - {label: a, backend: cli, task: 'a [queue=0 run=40]'}",
            "  - {label: b, backend: cli, task: 'b [queue=0 run=40]'}",
            "  - {label: c, backend: command, argv: [sleep, '40']}",
        ],
        limits="{cli: 3}",  # a Prefect limit: its slots must be given back
    )
    first = night.start(1)
    try:
        wait_until(lambda: night.in_flight(3), START_S, "three jobs in flight", interval=0.2)
        took = _signalled(first, sig)
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
        submitted = night.submits()
        assert submitted == 3
        # the rerun starts at once, re-attaches to the three and submits nothing
        second = night.start(2)
        try:
            second.wait(timeout=START_S)
        finally:
            _stop(second)
        assert second.returncode == 0, night.err(2)
        assert night.submits() == submitted
        rerun = night.out(2)
        assert {j["label"]: j["external_id"] for j in rerun["jobs"]} == left
        assert {j["state"] for j in rerun["jobs"]} == {"succeeded"}
    finally:
        _stop(first)
        _kill_jobs(night)


def test_three_hundred_jobs_in_flight_stop_within_five_seconds(tmp_path: Path) -> None:
    jobs = [
        f"  - {{label: j{i:03}, backend: cli, task: 'j{i} [queue=0 run=900]'}}" for i in range(300)
    ]
    night = Night(tmp_path, jobs)
    first = night.start(1)
    try:
        wait_until(lambda: night.in_flight(300), 600, "300 jobs in flight", interval=0.5)
        took = _signalled(first, signal.SIGINT)
        assert first.returncode == 130, night.err(1)[-2000:]
        assert took <= STOP_S, f"stopped {took:.1f}s after the signal"
        summary = night.out(1)
        assert len(summary["left_running"]) == 300
        assert night.lease_holder() is None
        assert night.in_flight(300)  # still in flight in the ledger, with their ids
    finally:
        _stop(first)


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
        _stop(first)
