"""The budgets flow under a real Prefect server: a stored snapshot, its artifacts and its PNG."""

from __future__ import annotations

import asyncio
import base64
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from nightshift.budgets.current import latest_snapshot
from nightshift.config.settings import load_settings
from nightshift.flows.budgets import budgets
from nightshift.store.ledger import Ledger

pytestmark = pytest.mark.usefixtures("prefect_server")

PNG = b"\x89PNG\r\n\x1a\n"


def _fill(catalogue: str, label: str, nights: int, queued: float = 30.0) -> None:
    """``nights`` finished nights of ``label`` through the real Ledger, the latest an hour ago."""
    ledger = Ledger(load_settings().ledger_url(), catalogue)
    end = datetime.now(UTC) - timedelta(hours=1)
    for i in range(nights):
        start = end - timedelta(days=nights - i, seconds=queued * (1 + i / 10) + 600)
        states = [("queued", 0.0), ("running", queued * (1 + i / 10)), ("succeeded", 600.0)]
        at = start
        for state, after in states:
            at += timedelta(seconds=after)
            ledger.transition(f"n{i}", "run", label, "cli", f"x{i}", state, at=at, attempt=1)
    ledger.close()


def _artifacts(flow_run_id: UUID) -> dict[str, Any]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    async def read() -> list[Any]:
        async with get_client() as client:
            flt = ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
            return await client.read_artifacts(artifact_filter=flt)

    return {a.key: a for a in asyncio.run(read())}


def test_the_flow_stores_a_snapshot_and_publishes_its_table_and_picture(sandbox: Path) -> None:
    _fill("team-a", "etl", 9)
    _fill("team-a", "gen:[x]|y", 3)  # learning, and a label markdown could mangle
    _fill("team-b", "load", 8, queued=5.0)
    run_dir = sandbox / "budgets-run"

    state = budgets(run_dir=str(run_dir), return_state=True)

    assert state.is_completed()
    out = state.result()
    ledger = Ledger(load_settings().ledger_url())
    stored = latest_snapshot(ledger)
    ledger.close()
    assert stored is not None and out["snapshot"] == stored.info.id
    assert out["dwells"] == stored.info.dwells == 2 * (9 + 3 + 8)
    assert set(stored.tables.states["catalogue"]) == {"team-a", "team-b"}
    plots = sorted(Path(p).name for p in out["plots"])
    assert plots == ["budgets-team-a.png", "budgets-team-b.png"]
    for name in plots:
        data = (run_dir / name).read_bytes()
        assert data.startswith(PNG) and len(data) > 10_000
    assert "| etl | queued | 9 |" in (run_dir / "budgets.md").read_text()

    artifacts = _artifacts(state.state_details.flow_run_id)
    assert set(artifacts) == {"budgets", "budgets-plot"}
    table = artifacts["budgets"].data
    assert table.startswith(f"# Dwell budgets, snapshot {stored.info.id}")
    assert "| label | state | n | p50 | p95 | watch at | alert at | source |" in table
    assert r"| gen:\[x\]\|y | (whole job) | 3 | - | - | - | - | learning (n=3) |" in table
    picture = artifacts["budgets-plot"].data
    embedded = picture.split("data:image/png;base64,")[1].split(")")[0]
    assert base64.b64decode(embedded) == (run_dir / "budgets-team-a.png").read_bytes()


def test_the_flow_on_an_empty_ledger_stores_an_empty_snapshot(sandbox: Path) -> None:
    state = budgets(return_state=True)

    assert state.is_completed()
    out = state.result()
    assert (out["dwells"], out["plots"]) == (0, [])
    run_dir = Path(out["run_dir"])
    assert run_dir.parent.parent == load_settings().state_dir / "runs" / "budgets"
    assert "nothing learned yet" in (run_dir / "budgets.md").read_text()
    assert set(_artifacts(state.state_details.flow_run_id)) == {"budgets"}
