"""Prefect flow run states as Nightshift sees them: the mapping alone, on plain values."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from nightshift.backends.base import ExternalState
from nightshift.backends.deployment_states import external_state, flow_run_status

T0 = datetime(2026, 1, 2, 3, 0, tzinfo=UTC)

# every Prefect 3 state type, and what it means to a night
EXPECTED = {
    "SCHEDULED": "queued",
    "PENDING": "queued",
    "RUNNING": "running",
    "PAUSED": "running",
    "COMPLETED": "succeeded",
    "FAILED": "failed",
    "CRASHED": "failed",
    "CANCELLED": "cancelled",
    "CANCELLING": "cancelled",
}


@pytest.mark.parametrize(("prefect", "ours"), EXPECTED.items())
def test_each_prefect_state_type_maps_to_one_external_state(prefect: str, ours: str) -> None:
    assert external_state(prefect) is ExternalState(ours)
    assert external_state(prefect.lower()) is ExternalState(ours)


def test_no_state_yet_is_queued_and_an_unknown_type_is_named() -> None:
    assert external_state(None) is ExternalState.QUEUED
    with pytest.raises(ValueError, match="'HIBERNATING' is not one of"):
        external_state("HIBERNATING")


def run(
    state: str | None, name: str | None = None, message: str | None = None, **times: Any
) -> Any:
    """A FlowRun-shaped value: only what flow_run_status reads."""
    state_obj = None
    if state is not None:
        state_obj = SimpleNamespace(
            type=SimpleNamespace(value=state),
            name=name or state.title(),
            message=message,
            timestamp=times.pop("state_at", T0 + timedelta(minutes=9)),
        )
    return SimpleNamespace(
        id="6f1c", name="brave-otter", state=state_obj, created=T0,
        start_time=times.get("start"), end_time=times.get("end"),
    )  # fmt: skip


def test_times_follow_the_run_for_dwell() -> None:
    start, end = T0 + timedelta(minutes=2), T0 + timedelta(minutes=7)
    queued = flow_run_status(run("SCHEDULED"))
    assert (queued.state, queued.since, queued.detail) == (ExternalState.QUEUED, T0, None)
    running = flow_run_status(run("RUNNING", start=start))
    assert (running.created_at, running.since, running.finished_at) == (T0, start, None)
    done = flow_run_status(run("COMPLETED", start=start, end=end))
    assert (done.state, done.started_at, done.since, done.detail) == (
        ExternalState.SUCCEEDED, start, end, None,
    )  # fmt: skip
    assert done.extra == {
        "flow_run_id": "6f1c", "flow_run_name": "brave-otter",
        "state_type": "COMPLETED", "state_name": "Completed",
    }  # fmt: skip


def test_cancelling_is_final_at_the_moment_it_was_asked() -> None:
    asked = T0 + timedelta(minutes=5)
    status = flow_run_status(
        run("CANCELLING", message="cancelled by Nightshift", start=T0, state_at=asked)
    )
    assert (status.state, status.finished_at) == (ExternalState.CANCELLED, asked)
    assert status.detail == "Cancelling: cancelled by Nightshift"


def test_a_failure_says_why_in_its_first_line() -> None:
    message = "Flow run encountered an exception: ValueError: boom\nTraceback..."
    status = flow_run_status(run("FAILED", message=message, start=T0))
    assert status.state is ExternalState.FAILED
    assert status.detail == "Failed: Flow run encountered an exception: ValueError: boom"
    crashed = flow_run_status(run("CRASHED", message="process exited -9"))
    assert (crashed.state, crashed.detail) == (ExternalState.FAILED, "Crashed: process exited -9")


def test_waiting_states_are_named_only_when_unusual() -> None:
    assert flow_run_status(run("SCHEDULED", name="Late")).detail == "Late"
    retry = flow_run_status(run("SCHEDULED", name="AwaitingRetry"))
    assert (retry.state, retry.detail) == (ExternalState.QUEUED, "AwaitingRetry")
    paused = flow_run_status(run("PAUSED", message="waiting for approval", start=T0))
    assert (paused.state, paused.since) == (ExternalState.RUNNING, T0)
    assert paused.detail == "Paused: waiting for approval"
    assert flow_run_status(run("RUNNING", start=T0)).detail is None


def test_a_naive_time_is_taken_as_utc_and_no_state_is_queued() -> None:
    naive = datetime(2026, 1, 2, 3, 4)
    status = flow_run_status(run("RUNNING", start=naive))
    assert status.started_at == naive.replace(tzinfo=UTC)
    assert flow_run_status(run(None)).state is ExternalState.QUEUED
