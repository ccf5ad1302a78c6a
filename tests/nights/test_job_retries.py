"""The job task's retries: transient errors only, 2 s then doubling, as Prefect's
exponential_backoff gave, and a retry delay Prefect's UI can show (a number: a list is NaN)."""

from __future__ import annotations

import asyncio
import math
from types import SimpleNamespace
from typing import Any

import pytest
from prefect.states import Failed
from prefect.tasks import exponential_backoff

from nightshift.backoff import Backoff
from nightshift.config.catalogue import Defaults
from nightshift.errors import TransientBackendError
from nightshift.tasks.jobs import one_run, retried, run_job, with_retries
from tests.night_kit import retry_delays


def waits(task: Any, retries: int) -> list[float]:
    """The wait Prefect reads before each retry of one task run, after a transient error."""

    async def ask() -> list[float]:
        seen = []
        for run_count in range(1, retries + 1):
            state = Failed(data=TransientBackendError("busy"))
            assert await task.retry_condition_fn(task, SimpleNamespace(run_count=run_count), state)
            seen.append(task.retry_delay_seconds)
        return seen

    return asyncio.run(ask())


def test_the_job_task_retries_twice_after_2_and_4_seconds_with_prefects_jitter() -> None:
    assert run_job.retries == 2
    # Prefect keeps one number, the first wait: what the UI shows as the task run's delay
    assert run_job.retry_delay_seconds == 2
    assert waits(one_run(run_job), 2) == exponential_backoff(backoff_factor=2)(2) == [2, 4]
    assert run_job.retry_delay_seconds == 2  # each run waits on its own copy
    assert run_job.retry_jitter_factor == 0.5


@pytest.mark.parametrize(("retries", "delay"), [(0, 2.0), (1, 0.1), (3, 0.1), (10, 30.0), (2, 0)])
def test_the_catalogue_retry_delay_doubles_per_retry_without_a_cap(
    retries: int, delay: float
) -> None:
    ctx = SimpleNamespace(
        catalogue=SimpleNamespace(defaults=Defaults(retries=retries, retry_delay=delay)),
        stop=SimpleNamespace(requested=False),
    )
    task = with_retries(ctx)  # type: ignore[arg-type]
    expected = exponential_backoff(backoff_factor=delay)(max(retries, 1))
    assert task.retries == retries  # `retries: 0` is 0 on the task run's page too
    assert task.retry_delay_seconds == delay
    assert task.retry_jitter_factor == 0.5
    if retries:
        assert waits(one_run(task), retries) == expected


@pytest.mark.parametrize(("retries", "delay"), [(1, 0.1), (3, 2.0), (10, 30.0), (2, 0)])
def test_the_tests_night_kit_waits_what_the_job_task_waits(retries: int, delay: float) -> None:
    defaults = Defaults(retries=retries, retry_delay=delay)
    ctx = SimpleNamespace(
        catalogue=SimpleNamespace(defaults=defaults), stop=SimpleNamespace(requested=False)
    )
    assert retry_delays(defaults) == waits(one_run(with_retries(ctx)), retries)  # type: ignore[arg-type]


def test_no_retry_for_a_job_that_ran_and_failed_or_a_night_that_stops() -> None:
    from nightshift.engine.outcomes import JobOutcome, Outcome

    stop = SimpleNamespace(requested=False)
    ctx = SimpleNamespace(catalogue=SimpleNamespace(defaults=Defaults(retries=2)), stop=stop)
    task = one_run(with_retries(ctx))  # type: ignore[arg-type]
    ran = Failed(data=JobOutcome("a", Outcome.FAILED, 1.0, 1, detail="exit code 3"))
    busy = Failed(data=TransientBackendError("busy"))
    first = SimpleNamespace(run_count=1)
    assert not asyncio.run(task.retry_condition_fn(task, first, ran))
    stop.requested = True
    assert not asyncio.run(task.retry_condition_fn(task, first, busy))
    assert task.retry_delay_seconds == 2.0  # untouched: no retry was decided


@pytest.mark.usefixtures("prefect_server")
def test_prefect_keeps_a_number_for_the_ui_and_waits_the_doubling_delays() -> None:
    """Through the API: the task run's policy holds one number (the UI shows a list as
    ``NaN``), and its AwaitingRetry states are scheduled 0.2, 0.4 and 0.8 s on (jittered)."""
    from prefect import flow, task
    from prefect.client.orchestration import get_client

    tries: list[int] = []

    @task(task_run_name="flaky")
    async def flaky() -> str:
        tries.append(1)
        if len(tries) <= 3:
            raise TransientBackendError("busy")
        return "ok"

    runner = retried(flaky, Backoff(initial=0.2, factor=2.0, max=math.inf), 3)

    @flow
    async def retrying() -> Any:
        state = await one_run(runner)(return_state=True)
        assert state.is_completed()
        return state.state_details.task_run_id

    task_run_id = asyncio.run(retrying())
    assert len(tries) == 4
    with get_client(sync_client=True) as client:
        run = client.read_task_run(task_run_id)
        history = client.read_task_run_states(run.id)
    policy = run.empirical_policy
    assert (policy.retries, policy.retry_delay, policy.retry_jitter_factor) == (3, 0.2, 0.5)
    assert run.run_count == 4
    scheduled = [s for s in history if s.name == "AwaitingRetry"]
    delays = [(s.state_details.scheduled_time - s.timestamp).total_seconds() for s in scheduled]
    assert len(delays) == 3, [s.name for s in history]
    # Prefect's jitter (factor 0.5) keeps each within [0.63, 1.5] of its delay: a constant
    # 0.2 s would never reach the third's 0.5 s, nor a list ever be shown as a number
    for wait, delay in zip(delays, [0.2, 0.4, 0.8], strict=True):
        assert 0.62 * delay <= wait <= 1.5 * delay + 0.01, delays
