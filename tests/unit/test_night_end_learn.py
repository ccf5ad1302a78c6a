"""The night's end learns the budgets again and says what tomorrow's night will watch with."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest

from nightshift.config.loader import parse_catalogue
from nightshift.orchestration.night_end import _learn
from nightshift.store.ledger import Ledger
from tests.support import new_ledger_url

CATALOGUE = "name: learn\njobs:\n  - {label: a, backend: command, argv: [x]}\n"


def _setup(tmp_path: Path, url: str) -> SimpleNamespace:
    catalogue = parse_catalogue(CATALOGUE, tmp_path / "nightshift.yaml")
    settings = SimpleNamespace(ledger_url=lambda: url)
    prepared = SimpleNamespace(settings=settings, catalogue=catalogue)
    return SimpleNamespace(prepared=prepared, logger=logging.getLogger("t"))


def test_one_night_of_history_is_learned_and_said_to_be_still_learning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = new_ledger_url(tmp_path / "ledger.db")
    ledger = Ledger(url, "learn")
    t = datetime.now(UTC) - timedelta(hours=3)
    for state, after in (("submitting", 0), ("submitted", 1), ("running", 1), ("succeeded", 5)):
        t += timedelta(seconds=after)
        ledger.transition("2026-12-06", "r1", "a", "command", "e1", state, at=t)
    ledger.close()
    with caplog.at_level(logging.INFO):
        _learn(_setup(tmp_path, url))  # type: ignore[arg-type]
    assert "every one still learning (fewer than 7 samples)" in caplog.text
    assert "tomorrow's night watches with them" not in caplog.text
