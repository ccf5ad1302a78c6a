"""The nightly flow's ``on_cancellation`` hook (the UI's Cancel): its jobs in flight cancelled."""

from __future__ import annotations

from typing import Any

from prefect.logging.loggers import flow_run_logger
from prefect.states import State

from nightshift.config.loader import load_catalogue
from nightshift.config.settings import load_settings
from nightshift.engine.cancelling import cancel_night
from nightshift.engine.plan import which_night
from nightshift.store.ledger import Ledger

__all__ = ["cancel_in_flight"]


def cancel_in_flight(flow: Any, flow_run: Any, state: State) -> None:
    """``on_cancellation`` (the UI's Cancel): the night's external jobs still in flight are
    cancelled (they cost money), from the ledger, whatever became of the night's process."""
    logger = flow_run_logger(flow_run, flow)
    params = flow_run.parameters or {}
    settings = load_settings()
    catalogue = load_catalogue(
        params.get("catalogue") or params.get("catalog") or "nightshift.yaml"
    )
    night = which_night(params.get("night"), flow_run.expected_start_time)
    reason = f"cancelled in Prefect: flow run {flow_run.name} was cancelled"
    ledger = Ledger(settings.ledger_url(), catalogue.key)
    try:
        done = cancel_night(
            catalogue, settings, ledger, night, only=params.get("only"), reason=reason
        )
    finally:
        ledger.close()
    for job in done.jobs:
        what = f"not cancelled: {job.error}" if job.error else "cancelled"
        logger.warning("%s (%s %s): %s", job.label, job.backend, job.external_id, what)
