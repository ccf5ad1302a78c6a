"""The forecasts a night keeps at its start: one row per run, read back by night."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from nightshift.store.forecasts import Forecasts, StoredForecast
from nightshift.store.ledger import Ledger
from tests.support import new_ledger_url

T0 = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)


def _forecast(night: str, run_id: str, minutes: int) -> StoredForecast:
    return StoredForecast(
        night=night,
        run_id=run_id,
        made_at=T0,
        start=T0,
        finish_p50=T0 + timedelta(minutes=minutes),
        finish_p95=T0 + timedelta(minutes=2 * minutes),
        critical_path=["extract", "load"],
        body={"jobs": [{"label": "extract", "end_p50": T0.isoformat()}], "kept": []},
    )


def test_forecasts_are_kept_per_run_and_read_back_by_night(tmp_path: Path) -> None:
    ledger = Ledger(new_ledger_url(tmp_path / "ledger.db"), "team-a")
    store = Forecasts(ledger.engine, "team-a")
    store.save(_forecast("2026-03-01", "run-1", 60))
    store.save(_forecast("2026-03-01", "run-2", 30))  # a rerun of the night
    store.save(_forecast("2026-03-02", "run-3", 45))
    Forecasts(ledger.engine, "team-b").save(_forecast("2026-03-03", "run-4", 10))

    night = store.of_night("2026-03-01")

    assert [f.run_id for f in night] == ["run-1", "run-2"]
    assert night[0] == _forecast("2026-03-01", "run-1", 60)  # times come back aware, in UTC
    assert store.nights() == ["2026-03-02", "2026-03-01"]  # newest first, this catalogue's
    assert Forecasts(ledger.engine, "team-b").nights() == ["2026-03-03"]
    ledger.close()
