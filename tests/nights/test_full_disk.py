"""A ledger that cannot write (its disk full) mid-night: named at once, the night still ends
after its deadline, and once there is room the rerun reports each job's true outcome, each job
run once."""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import nightshift.engine.night as night_module
from nightshift.flows.nightly import nightly
from nightshift.states import FINAL
from nightshift.store.ledger import Ledger, TransitionRow

pytestmark = pytest.mark.usefixtures("prefect_server")

PY = json.dumps(sys.executable)
CATALOGUE = f"""\
name: full
defaults: {{poll: {{initial: 0.2s, max: 0.5s}}, stagger: 0s, deadline: 4s, retries: 0}}
jobs:
  - {{label: ok, backend: command, argv: [{PY}, -c, "import time; time.sleep(1)"]}}
  - {{label: bad, backend: command, argv: [{PY}, -c, "import time; time.sleep(1); exit(3)"]}}
"""


def _full() -> sa.exc.OperationalError:
    return sa.exc.OperationalError(
        "INSERT", {}, sqlite3.OperationalError("database or disk is full")
    )


def test_a_full_ledger_disk_is_named_the_night_ends_and_the_rerun_finds_the_truth(
    sandbox: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = sandbox / "nightshift.yaml"
    path.write_text(CATALOGUE)
    real_transitions, real_state = Ledger.transitions, Ledger.record_state

    def transitions(self: Ledger, rows: Iterable[TransitionRow]) -> None:
        rows = list(rows)
        if any(row[5] in FINAL for row in rows):  # the jobs' ends find the disk full
            raise _full()
        real_transitions(self, rows)

    def record_state(self: Ledger, night: str, label: str, state: str, **kw: Any) -> None:
        if state in FINAL:
            raise _full()
        real_state(self, night, label, state, **kw)

    monkeypatch.setattr(Ledger, "transitions", transitions)
    monkeypatch.setattr(Ledger, "record_state", record_state)
    monkeypatch.setattr(night_module, "DEADLINE_GRACE_S", 1.0)
    started = time.monotonic()
    first = nightly(catalog=str(path), night="2026-12-07", run_dir=str(sandbox / "r1"),
                    return_state=True)  # fmt: skip
    took = time.monotonic() - started
    assert took < 4 + 1 + 20, took  # its deadline, the grace, a loaded machine's margin
    assert "the ledger's disk" in caplog.text and "is full" in caplog.text
    summary = json.loads((sandbox / "r1" / "summary.json").read_text())
    assert "writes not kept" in summary["headline"], summary["headline"]
    assert first is not None

    monkeypatch.setattr(Ledger, "transitions", real_transitions)  # room again
    monkeypatch.setattr(Ledger, "record_state", real_state)
    nightly(catalog=str(path), night="2026-12-07", run_dir=str(sandbox / "r2"), return_state=True)
    again = {
        j["label"]: j for j in json.loads((sandbox / "r2" / "summary.json").read_text())["jobs"]
    }
    # each job's true outcome, each run once (re-attached, not submitted again)
    assert (again["ok"]["state"], again["bad"]["state"]) == ("succeeded", "failed"), again
    assert again["ok"]["attempts"] == again["bad"]["attempts"] == 1, again
    jobs = sandbox / "state" / "jobs"
    assert len(list(jobs.glob("**/exit_code"))) == 2  # two processes ran, no more
