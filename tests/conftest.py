"""Shared fixtures: one Prefect test server per session, sandboxed state per test."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# loopback traffic must never go through a proxy (slack-sdk copies HTTPS_PROXY into its client)
os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")


@pytest.fixture(scope="session")
def prefect_server() -> Iterator[None]:
    """A real (temporary) Prefect server for the whole session."""
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    with (
        prefect_test_harness(server_startup_timeout=120),
        temporary_settings({PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}),
    ):
        yield


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """State dir, ledger and fake agy state under tmp_path; the fake agy as NIGHTSHIFT_AGY."""
    monkeypatch.setenv("NIGHTSHIFT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("NIGHTSHIFT_DATABASE_URL", raising=False)
    monkeypatch.setenv("NIGHTSHIFT_AGY", f"{sys.executable} -m sandbox.agy")
    monkeypatch.setenv("AGY_STATE_DIR", str(tmp_path / "agy"))
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    return tmp_path
