"""A deployed night whose catalogue is missing: one ERROR line naming where it looked."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from nightshift.flows.nightly import nightly
from nightshift.flows.watchdog import watchdog

pytestmark = pytest.mark.usefixtures("prefect_server")


@pytest.mark.parametrize("flow", [nightly, watchdog])
def test_a_missing_catalogue_is_one_error_line_with_its_absolute_path(
    sandbox: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, flow: object
) -> None:
    monkeypatch.chdir(sandbox)
    # a deployment runs in the folder it was deployed from, with `catalog: nightshift.yaml`
    assert not (sandbox / "nightshift.yaml").exists()
    with caplog.at_level(logging.INFO):
        state = flow(catalog="nightshift.yaml", return_state=True)  # type: ignore[operator]
    assert state.is_failed()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, [r.getMessage() for r in errors]
    line = errors[0].getMessage()
    assert str(sandbox / "nightshift.yaml") in line and "nightshift init" in line
    assert "\n" not in line
    assert not any(r.exc_info for r in caplog.records), "no traceback"
    assert "Traceback" not in caplog.text
