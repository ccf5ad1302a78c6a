"""The night's forecast at its start: kept in the ledger, published as the run's first artifact.

Made from the budgets the night then watches with (read once, on their own: ``night_budgets``),
its plan, its caps, stagger and rates, from the night's actual start: the simulation takes
milliseconds. Nothing here may fail the night: budgets that cannot be read, a forecast that
cannot be made, kept or published is one warning in the night's log.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC, datetime
from typing import Any

from prefect.artifacts import create_markdown_artifact

from nightshift.budgets.current import starting_budgets
from nightshift.budgets.lookup import Budgets
from nightshift.config.durations import format_duration
from nightshift.engine.handoffs import handoff_gaps
from nightshift.engine.night_forecast import (
    basis_words,
    forecast_body,
    forecast_night,
    unknown_jobs,
    unknown_line,
)
from nightshift.orchestration.artifact_tries import described
from nightshift.orchestration.forecast_report import FORECAST_KEY, render_forecast
from nightshift.orchestration.prepared_night import PreparedNight
from nightshift.orchestration.report_inputs import catalogue_name
from nightshift.store.forecasts import Forecasts, StoredForecast

__all__ = ["forecast_at_start", "night_budgets", "stored_forecast"]


def _why(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def stored_forecast(
    prepared: PreparedNight,
    budgets: Budgets,
    run_id: str,
    start: datetime,
    kept: Collection[str] = (),
) -> StoredForecast:
    """The run's forecast of its night from ``start``, as the ledger keeps it."""
    catalogue, plan = prepared.catalogue, prepared.plan
    backend_of = {x: catalogue.job(x).backend for x in plan.labels}
    gaps = handoff_gaps(plan.chains, backend_of, prepared.ledger.state_times, start)
    made = forecast_night(catalogue, plan, budgets, start=start, kept=kept, gaps=gaps)
    return StoredForecast(
        night=prepared.night,
        run_id=run_id,
        made_at=datetime.now(UTC),
        start=start,
        finish_p50=made.finish_p50,
        finish_p95=made.finish_p95,
        critical_path=made.critical_path,
        body=forecast_body(made, kept),
    )


def night_budgets(prepared: PreparedNight, logger: Any) -> Budgets | None:
    """The budgets the night watches with and forecasts from: the latest snapshot however old
    (learning waits for the night's end, ``night_end.py``); None, said once, when they could
    not be read (the dwell watch tries again and says so too)."""
    catalogue, ledger = prepared.catalogue, prepared.ledger
    try:
        return starting_budgets(ledger, datetime.now(UTC), catalogue.defaults.min_samples)
    except Exception as exc:
        logger.warning("no forecast tonight: the budgets could not be read: %s", _why(exc))
        return None


def forecast_at_start(
    prepared: PreparedNight,
    budgets: Budgets | None,
    run_id: str,
    logger: Any,
    *,
    kept: Collection[str] = (),
    publish: bool = True,
) -> None:
    """Forecast the night from now with ``budgets`` (None: none could be read, no forecast),
    keep it and (``publish``) make it the ``nightly-forecast`` artifact."""
    if budgets is None:
        return
    catalogue, ledger = prepared.catalogue, prepared.ledger
    start = datetime.now(UTC)
    try:
        stored = stored_forecast(prepared, budgets, run_id, start, kept)
    except Exception as exc:  # a bug in the forecast must not stop the night
        logger.warning("no forecast tonight: %s", _why(exc))
        return
    jobs, kept_ = stored.body.get("jobs", []), stored.body.get("kept", [])
    unknown = unknown_jobs(jobs, kept_)
    if unknown:  # a finish resting on jobs counted as 0 s is no finish
        said = unknown_line(unknown, len(jobs))
        logger.info("forecast: %s", said)
    else:
        length = (stored.finish_p50 - start).total_seconds()
        said = f"finish {stored.finish_p50:%H:%M} UTC (p50), {stored.finish_p95:%H:%M} UTC (p95)"
        logger.info(
            "forecast %s: the night should finish at %s UTC (p50, in %s), %s (p95); "
            "critical path %s",
            basis_words(jobs, kept_),
            f"{stored.finish_p50:%H:%M:%S}",
            format_duration(length),
            f"{stored.finish_p95:%H:%M:%S}",
            " -> ".join(stored.critical_path) or "none",
        )
    try:
        Forecasts(ledger.engine, catalogue.key).save(stored)
    except Exception as exc:  # the morning report goes without it
        logger.warning("the forecast could not be kept in the ledger: %s", _why(exc))
    if publish:
        try:
            create_markdown_artifact(
                render_forecast(stored, catalogue_name(catalogue)),
                key=FORECAST_KEY,
                description=described(said),
            )
        except Exception as exc:  # a view: the night goes on without it
            logger.warning("the forecast artifact could not be published: %s", _why(exc))
