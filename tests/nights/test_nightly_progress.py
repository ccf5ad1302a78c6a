"""The progress artifact at a night's end, read back through a real Prefect server."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from nightshift.flows.nightly import nightly
from nightshift.orchestration.progress import PROGRESS_KEY

pytestmark = pytest.mark.usefixtures("prefect_server")

PY = json.dumps(sys.executable)
CATALOGUE = """\
defaults: {poll: {initial: 0.2s, factor: 2, max: 0.5s}, stagger: 0s, retries: 0, deadline: 60s}
jobs:
"""


def command(label: str, code: str) -> str:
    return f"  - {{label: '{label}', backend: command, argv: [{PY}, -c, {json.dumps(code)}]}}\n"


def test_a_finished_night_is_a_full_bar_with_its_jobs_not_ok_beside_it(sandbox: Path) -> None:
    """Not '6 of 6 finished, 3 not ok' beside 'Progress: 50%' (the bar counted ok jobs)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        ArtifactFilterKey,
    )

    body = "".join(command(f"ok-{i}", "print(1)") for i in range(3))
    body += "".join(command(f"broken-{i}", "raise SystemExit(3)") for i in range(3))
    path = sandbox / "nightshift.yaml"
    path.write_text(CATALOGUE + body, encoding="utf-8")

    state = nightly(catalog=str(path), run_dir=str(sandbox / "run"), return_state=True)

    assert state.is_failed()  # partial: three jobs failed
    only = ArtifactFilter(
        flow_run_id=ArtifactFilterFlowRunId(any_=[state.state_details.flow_run_id]),
        key=ArtifactFilterKey(any_=[PROGRESS_KEY]),
    )
    with get_client(sync_client=True) as client:
        (progress,) = client.read_artifacts(artifact_filter=only)
    assert progress.description == "Jobs of the night finished: 6 of 6, 3 not ok (3 failed)"
    assert progress.data == 100.0
