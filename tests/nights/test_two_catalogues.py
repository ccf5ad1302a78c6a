"""Two catalogues sharing one ledger and a job label: each night runs its own job."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from nightshift.config.settings import load_settings
from nightshift.flows.nightly import nightly
from nightshift.store.ledger import Ledger

pytestmark = pytest.mark.usefixtures("prefect_server")

NIGHT = "2026-11-29"
CATALOGUE = """\
name: %(name)s
defaults: {poll: {initial: 0.1s, max: 0.5s}, stagger: 0s, deadline: 60s}
jobs:
  - label: etl
    backend: command
    argv: [%(py)s, -c, "open(%(marker)r, 'a').write('%(name)s\\\\n')"]
"""


def _night(sandbox: Path, name: str, marker: Path) -> dict[str, str]:
    path = sandbox / f"{name}.yaml"
    path.write_text(CATALOGUE % {"name": name, "py": sys.executable, "marker": str(marker)})
    run_dir = sandbox / f"run-{name}"
    state = nightly(catalog=str(path), night=NIGHT, run_dir=str(run_dir), return_state=True)
    assert state.is_completed(), state.message
    (job,) = json.loads((run_dir / "summary.json").read_text())["jobs"]
    return job


def test_a_label_another_catalogue_ran_tonight_still_runs(sandbox: Path) -> None:
    marker = sandbox / "ran.txt"

    first = _night(sandbox, "team-a", marker)
    second = _night(sandbox, "team-b", marker)

    # before jobs were keyed by catalogue, team-b's etl was "already succeeded earlier
    # tonight" with team-a's external id, and never ran
    assert marker.read_text().splitlines() == ["team-a", "team-b"]
    assert (first["state"], second["state"]) == ("succeeded", "succeeded")
    assert second["external_id"] != first["external_id"]
    assert "earlier tonight" not in (second["detail"] or "")
    url = load_settings().ledger_url()
    records = {name: Ledger(url, name).get_job(NIGHT, "etl") for name in ("team-a", "team-b")}
    assert {name: r.external_id if r else None for name, r in records.items()} == {
        "team-a": first["external_id"],
        "team-b": second["external_id"],
    }
