"""The night's forecast at its start: kept in the ledger, and never the reason a night fails."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from nightshift.config.loader import parse_catalogue
from nightshift.engine.plan import plan_night
from nightshift.orchestration import night_forecast
from nightshift.orchestration.night_forecast import forecast_at_start, night_budgets
from nightshift.orchestration.prepared_night import PreparedNight
from nightshift.store.forecasts import Forecasts
from nightshift.store.ledger import Ledger
from tests.support import new_ledger_url

CATALOGUE = """\
name: team-a
jobs:
  - {label: a, backend: command, argv: [x]}
  - {label: b, backend: command, argv: [x], depends_on: [a]}
"""


def _prepared(tmp_path: Path) -> PreparedNight:
    catalogue = parse_catalogue(CATALOGUE, tmp_path / "nightshift.yaml")
    return PreparedNight(
        settings=None,  # type: ignore[arg-type]
        catalogue=catalogue,
        night="2026-03-01",
        only=None,
        plan=plan_night(catalogue),
        ledger=Ledger(new_ledger_url(tmp_path / "ledger.db"), catalogue.key),
        run_path=tmp_path / "run",
    )


def test_the_forecast_is_kept_with_the_runs_id_and_its_budgets_handed_on(tmp_path: Path) -> None:
    prepared = _prepared(tmp_path)

    budgets = night_budgets(prepared, logging.getLogger("t"))
    assert budgets is not None
    forecast_at_start(prepared, budgets, "run-1", logging.getLogger("t"), publish=False)

    (kept,) = Forecasts(prepared.ledger.engine, prepared.catalogue.key).of_night("2026-03-01")
    assert kept.run_id == "run-1" and kept.critical_path == ["a", "b"]
    assert [j["basis"] for j in kept.body["jobs"]] == ["none", "none"]  # nothing learned yet
    prepared.close()


def test_a_forecast_that_cannot_be_kept_or_read_is_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    prepared = _prepared(tmp_path)
    logger = logging.getLogger("t")

    def refuse(*_: Any, **__: Any) -> None:
        raise OSError("database is locked")

    monkeypatch.setattr(Forecasts, "save", refuse)
    with caplog.at_level(logging.WARNING):
        forecast_at_start(prepared, night_budgets(prepared, logger), "run-1", logger, publish=False)
    assert (
        "the forecast could not be kept in the ledger: OSError: database is locked" in caplog.text
    )

    monkeypatch.setattr(night_forecast, "starting_budgets", refuse)
    with caplog.at_level(logging.WARNING):
        assert night_budgets(prepared, logger) is None
    assert "no forecast tonight: the budgets could not be read: OSError" in caplog.text
    prepared.close()


def test_a_forecast_with_nothing_learned_gives_no_finish_on_any_page(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from nightshift.orchestration.forecast_report import forecast_lines, render_forecast

    prepared = _prepared(tmp_path)
    with caplog.at_level(logging.INFO):
        logger = logging.getLogger("t")
        forecast_at_start(prepared, night_budgets(prepared, logger), "run-1", logger, publish=False)
    said = "2 of 2 jobs have nothing learned yet (a, b): no finish time"
    assert f"forecast: {said}" in caplog.text
    assert "should finish" not in caplog.text and "critical path" not in caplog.text
    (kept,) = Forecasts(prepared.ledger.engine, prepared.catalogue.key).of_night("2026-03-01")
    page = render_forecast(kept, "team-a")
    assert said in page and "learned budgets" not in page
    assert "should finish" not in page and "Critical path" not in page
    assert "| none: nothing learned |" in page
    lines = forecast_lines({"unknown": ["a", "b"], "jobs": 2})
    assert lines[-1] == f"No forecast to hold the night against: {said}."
    prepared.close()
