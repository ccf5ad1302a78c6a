"""``nightshift plan --accuracy``: the forecast itself measured, over the last nights.

Each night's first run kept its forecast when it started (``store/forecasts``); its actual
finish is when the run's last job ended, by its ledger rows. A night whose run did not end every
job it forecast (interrupted, ended early), or whose forecast knew nothing of some job (it gave no
finish), is left out.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from nightshift.cli import exits

if TYPE_CHECKING:
    from nightshift.config.catalogue import Catalogue
    from nightshift.engine.forecast_check import Accuracy, NightCheck

__all__ = ["DEFAULT_NIGHTS", "show_accuracy"]

DEFAULT_NIGHTS = 30


def show_accuracy(catalogue: Catalogue, nights: int, as_json: bool) -> int:
    """Print the forecast finish against the actual finish of the last ``nights`` nights."""
    from nightshift.config.settings import load_settings
    from nightshift.engine.forecast_check import accuracy
    from nightshift.store.ledger import Ledger

    ledger = Ledger(load_settings().ledger_url(), catalogue.key)
    try:
        checks = _checks(ledger, nights)
    finally:
        ledger.close()
    measured = accuracy(checks)
    if as_json:
        print(json.dumps(_as_json(checks, measured)))
    elif measured is None:
        print(f"no night of {catalogue.shown} has a kept forecast and an actual finish yet")
    else:
        _print(measured)
    return exits.OK


def _checks(ledger: Any, nights: int) -> list[NightCheck]:
    """The last ``nights`` nights with a forecast and a finish: each night's first run."""
    from nightshift.engine.forecast_check import check_night
    from nightshift.engine.night_forecast import unknown_jobs
    from nightshift.store.forecasts import Forecasts

    store = Forecasts(ledger.engine, ledger.catalogue)
    out: list[NightCheck] = []
    for night in store.nights():
        if len(out) >= nights:
            break
        first = store.of_night(night)[0]
        if unknown_jobs(first.body.get("jobs", []), first.body.get("kept", [])):
            continue  # it forecast no finish: some jobs were counted as 0 s
        check = check_night(first, ledger.dwells(night))
        if check.finished is not None:
            out.append(check)
    return out


def _iso(at: datetime | None) -> str | None:
    return None if at is None else at.astimezone(UTC).isoformat(timespec="seconds")


def _as_json(checks: list[NightCheck], measured: Accuracy | None) -> dict[str, Any]:
    rows = [
        {
            "night": c.night,
            "run_id": c.run_id,
            "start": _iso(c.start),
            "finish_p50": _iso(c.expected),
            "finish_p95": _iso(c.expected_p95),
            "finished": _iso(c.finished),
            "error_s": None if c.error_s is None else round(c.error_s, 1),
            "error_pct": None if c.error_pct is None else round(c.error_pct, 1),
        }
        for c in checks
    ]
    return {
        "nights": rows,
        "median_abs_error_s": None if measured is None else round(measured.median_abs_s, 1),
        "median_abs_error_pct": None if measured is None else round(measured.median_abs_pct, 1),
        "p90_abs_error_s": None if measured is None else round(measured.p90_abs_s, 1),
        "worst": None if measured is None else rows[checks.index(measured.worst)],
        # the jobs most often late against their forecast: [label, nights late]
        "often_late": [] if measured is None else [list(x) for x in measured.often_late],
    }


def _signed(seconds: float) -> str:
    from nightshift.config.durations import format_duration

    return ("+" if seconds >= 0 else "-") + format_duration(abs(seconds))


def _pct(pct: float | None) -> str:
    return "" if pct is None else f" ({pct:+.0f} %)"


def _print(measured: Accuracy) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"the forecast against the night, the last {len(measured.nights)} (UTC)")
    for column in ("night", "start", "forecast p50", "finished", "error"):
        table.add_column(column)
    for c in measured.nights:
        error = c.error_s or 0.0
        table.add_row(
            c.night,
            f"{c.start.astimezone(UTC):%H:%M:%S}",
            _clock(c.expected, c.start),
            _clock(c.finished, c.start),
            _signed(error) + _pct(c.error_pct),
        )
    console.print(table)
    worst = measured.worst
    line = (
        f"median absolute error {_signed(measured.median_abs_s)[1:]}"
        f" ({measured.median_abs_pct:.0f} % of the night), p90 "
        f"{_signed(measured.p90_abs_s)[1:]}; worst {worst.night}: "
        f"{_signed(worst.error_s or 0.0)}{_pct(worst.error_pct)}"
    )
    console.print(line, markup=False, highlight=False, soft_wrap=True)
    if measured.often_late:
        n = len(measured.nights)
        said = ", ".join(f"{label} ({times} of {n} nights)" for label, times in measured.often_late)
        console.print(f"most often late: {said}", markup=False, highlight=False, soft_wrap=True)


def _clock(at: datetime | None, start: datetime) -> str:
    """``05:40:12``, with ``+1d`` on a later day than the start."""
    if at is None:
        return "-"
    days = (at.astimezone(UTC).date() - start.astimezone(UTC).date()).days
    return f"{at.astimezone(UTC):%H:%M:%S}" + (f" +{days}d" if days else "")
