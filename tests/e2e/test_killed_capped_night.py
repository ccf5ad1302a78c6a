"""kill -9 of a capped night: the rerun, started at once (the dead night's lease is taken over,
not waited out), gets the dead night's Prefect slots back, re-attaches its jobs in flight and
submits the rest, each exactly once (temporary and real server)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest

from nightshift.store.lease import Lease
from nightshift.store.ledger import Ledger
from tests.prefect_processes import migrated_home, prefect_site
from tests.support import wait_until

REPO = Path(__file__).resolve().parents[2]
NIGHTSHIFT = Path(sys.executable).parent / "nightshift"
NIGHT = "2026-12-01"
JOBS = 5
CATALOGUE = """\
name: capped-kill
defaults: {poll: {initial: 0.2s, max: 0.5s}, stagger: 0s, deadline: 30s}
limits: {cli: 2}
cli: {executable: "%(py)s -m nightshift.sandbox.agy"}
jobs:
%(jobs)s
"""


@contextmanager
def server(kind: str, root: Path) -> Iterator[dict[str, str]]:
    """The environment of a night on the temporary server, or on a real one."""
    if kind == "temporary":
        yield {"PREFECT_HOME": str(migrated_home(root / "prefect-home"))}
        return
    with prefect_site(root / "site") as site:
        yield {k: v for k, v in site.env.items() if k.startswith("PREFECT_")}


@pytest.mark.parametrize("kind", ["temporary", "real"])
def test_a_rerun_after_kill_9_of_a_capped_night_finishes_every_job_once(
    tmp_path: Path, kind: str
) -> None:
    jobs = "\n".join(
        f"  - {{label: j{i}, backend: cli, task: 'job {i} [queue=0 run=4]'}}" for i in range(JOBS)
    )
    catalogue = tmp_path / "nightshift.yaml"
    catalogue.write_text(CATALOGUE % {"py": sys.executable, "jobs": jobs})
    agy_state = tmp_path / "agy"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "NIGHTSHIFT_"))}
    base |= {
        "NIGHTSHIFT_STATE_DIR": str(tmp_path / "state"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "AGY_STATE_DIR": str(agy_state),
        "PYTHONPATH": str(REPO),
    }
    argv = [str(NIGHTSHIFT), "run", "--catalog", str(catalogue), "--night", NIGHT, "--json"]
    ledger = Ledger(f"sqlite:///{tmp_path / 'state' / 'ledger.sqlite3'}", "capped-kill")
    with server(kind, tmp_path) as prefect_env:
        env = base | prefect_env
        first = subprocess.Popen(
            argv, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:

            def two_in_flight() -> bool:
                assert first.poll() is None, "the first night ended before the kill"
                records = [ledger.get_job(NIGHT, f"j{i}") for i in range(JOBS)]
                return sum(1 for r in records if r is not None and r.external_id) >= 2

            wait_until(two_in_flight, 240, "two capped jobs in flight", interval=0.2)
        finally:
            first.send_signal(signal.SIGKILL)  # no cleanup: its slots stay taken
            first.wait()
        held = Lease(ledger.engine, "capped-kill").holder()
        assert held is not None and held[1] > datetime.now(UTC)  # 60 s left: the ttl's default
        rerun = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    summary = json.loads(rerun.stdout.strip().splitlines()[-1])
    states = {job["label"]: job["state"] for job in summary["jobs"]}
    assert (rerun.returncode, states) == (0, {f"j{i}": "succeeded" for i in range(JOBS)}), (
        rerun.stdout[-3000:] + rerun.stderr[-3000:]
    )
    made = list((agy_state / "jobs").glob("agy-*.json"))
    assert len(made) == JOBS  # 5 submissions in all: the 2 in flight re-attached
    ledger.close()
