"""``nightshift run`` as operators start and stop it, for the tests that stop it from outside.

A catalogue in its own folders, run by the real CLI in a session of its own (its own process
group, as a terminal gives it) with its own Prefect home: the temporary Prefect server starts
on a database already at Prefect's last migration (``tests/prefect_processes.migrated_home``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from nightshift.states import LIVE as LIVE_STATES
from nightshift.store.lease import Lease
from nightshift.store.ledger import Ledger
from tests.prefect_processes import QUIET_SERVICES, migrated_home

__all__ = ["NIGHT", "START_S", "STOP_S", "Night", "kill_jobs", "signalled", "stop"]

REPO = Path(__file__).resolve().parents[1]
NIGHTSHIFT = Path(sys.executable).parent / "nightshift"
NIGHT = "2026-11-30"
START_S = 300  # the temporary server's first start on a busy 2-core machine, and the submits
STOP_S = 5.0  # the promise: stopped this long after the signal at most


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
            PREFECT_HOME=str(migrated_home(tmp / "prefect")),
            PREFECT_SERVER_ANALYTICS_ENABLED="false",
            **QUIET_SERVICES,
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

    def end_agy_jobs_now(self) -> None:
        """Each job of the fake agy ends now (succeeds as its task said): the service's own
        time moved on, not the test's clock."""
        for path in (self.tmp / "agy" / "jobs").glob("agy-*.json"):
            rec = json.loads(path.read_text())
            rec["run_s"] = max(0.0, time.time() - rec["created_at"] - rec["queue_s"])
            path.write_text(json.dumps(rec))

    def flow_runs(self) -> list[tuple[str, str, str]]:
        """(name, state name, state type) of each flow run in the temporary server's database,
        oldest first: what the Prefect UI shows of them."""
        import sqlite3

        with sqlite3.connect(self.tmp / "prefect" / "prefect.db") as db:
            rows = db.execute(
                "select name, state_name, state_type from flow_run order by created"
            ).fetchall()
        return [(str(n), str(s), str(t)) for n, s, t in rows]

    def agy(self, *argv: str) -> Any:
        out = subprocess.run(
            [sys.executable, "-m", "nightshift.sandbox.agy", *argv, "--json"],
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return json.loads(out)


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def kill_jobs(night: Night) -> None:
    """The detached command jobs outlive the night by design: end them after the test."""
    for path in (night.tmp / "state" / "jobs").glob("*/child.pid"):
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.killpg(int(json.loads(path.read_text())["pid"]), signal.SIGKILL)


def signalled(proc: subprocess.Popen[str], sig: int) -> float:
    """Send ``sig`` to the run's process group; seconds until it exited (fails past 60 s)."""
    sent = time.monotonic()
    os.killpg(proc.pid, sig)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"nightshift run still alive 60 s after signal {sig}")
    return time.monotonic() - sent
