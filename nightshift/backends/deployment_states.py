"""Prefect flow run states as Nightshift sees them (pure: plain values in, JobStatus out).

| Prefect state type | ExternalState | why |
|---|---|---|
| SCHEDULED (also Late, AwaitingRetry), PENDING | queued | no process runs the flow yet |
| RUNNING (also Retrying) | running | |
| PAUSED | running | it has started and waits for input: the job's timeout and the night's
  deadline bound it, the queue timer (meant for a job no worker took) does not |
| COMPLETED | succeeded | |
| FAILED, CRASHED | failed | the state's message says why (the flow's exception, a dead process) |
| CANCELLED | cancelled | |
| CANCELLING | cancelled | the run can only end Cancelled; the night does not wait for a worker
  to confirm (with no worker alive it never would) |
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from nightshift.backends.base import ExternalState, JobStatus

__all__ = ["STATE_TYPES", "external_state", "flow_run_status"]

STATE_TYPES: dict[str, ExternalState] = {
    "SCHEDULED": ExternalState.QUEUED,
    "PENDING": ExternalState.QUEUED,
    "RUNNING": ExternalState.RUNNING,
    "PAUSED": ExternalState.RUNNING,
    "COMPLETED": ExternalState.SUCCEEDED,
    "FAILED": ExternalState.FAILED,
    "CRASHED": ExternalState.FAILED,
    "CANCELLED": ExternalState.CANCELLED,
    "CANCELLING": ExternalState.CANCELLED,
}


def external_state(state_type: str | None) -> ExternalState:
    """The ExternalState of a Prefect state type name (``"RUNNING"``); no state yet: queued.

    An unknown type (a newer Prefect) raises ValueError naming it.
    """
    if state_type is None:
        return ExternalState.QUEUED  # a run the server has not given a state yet
    try:
        return STATE_TYPES[state_type.upper()]
    except KeyError:
        raise ValueError(
            f"Prefect state type {state_type!r} is not one of {', '.join(STATE_TYPES)}"
        ) from None


def _utc(at: datetime | None) -> datetime | None:
    if at is None:
        return None
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)


def flow_run_status(run: Any) -> JobStatus:
    """A JobStatus of a Prefect ``FlowRun`` (read only: id, name, created, start/end times,
    state type, name, message and timestamp).

    ``created_at`` is when the run was created (queued since); ``started_at`` its start time;
    ``finished_at`` its end time, else (Cancelling) when it entered that state.
    """
    state = run.state
    type_name = None if state is None else str(getattr(state.type, "value", state.type))
    ours = external_state(type_name)
    state_at = _utc(state.timestamp) if state is not None else None
    started = _utc(run.start_time)
    finished = _utc(run.end_time) if ours.final else None
    if ours.final and finished is None:
        finished = state_at
    if ours is ExternalState.RUNNING and started is None:
        started = state_at
    detail = None
    if state is not None and ours is not ExternalState.SUCCEEDED:
        name = state.name or str(type_name).title()
        # a final state says why; a waiting one only when it is not the plain one (Late,
        # AwaitingRetry, Retrying, Paused, Suspended)
        if ours.final or type_name == "PAUSED" or name.upper() != type_name:
            message = (state.message or "").strip().splitlines()
            detail = f"{name}: {message[0]}" if message else name
    return JobStatus(
        state=ours,
        started_at=started,
        finished_at=finished,
        detail=detail,
        extra={
            "flow_run_id": str(run.id),
            "flow_run_name": run.name,
            "state_type": type_name,
            "state_name": None if state is None else state.name,
        },
        created_at=_utc(run.created),
    )
