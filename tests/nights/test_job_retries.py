"""The job task's retry delays: the Backoff gives what Prefect's exponential_backoff gave."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from prefect.tasks import exponential_backoff

from nightshift.config.catalogue import Defaults
from nightshift.tasks.jobs import run_job, with_retries
from tests.night_kit import retry_delays


def test_the_job_task_retries_twice_after_2_and_4_seconds_with_prefects_jitter() -> None:
    assert run_job.retry_delay_seconds == exponential_backoff(backoff_factor=2)(2) == [2, 4]
    assert run_job.retry_jitter_factor == 0.5


@pytest.mark.parametrize(("retries", "delay"), [(0, 2.0), (1, 0.1), (3, 0.1), (10, 30.0), (2, 0)])
def test_the_catalogue_retry_delay_doubles_per_retry_without_a_cap(
    retries: int, delay: float
) -> None:
    ctx = SimpleNamespace(
        catalogue=SimpleNamespace(defaults=Defaults(retries=retries, retry_delay=delay))
    )
    task = with_retries(ctx)  # type: ignore[arg-type]
    expected = exponential_backoff(backoff_factor=delay)(max(retries, 1))
    assert task.retries == max(retries, 1)
    assert task.retry_delay_seconds == expected
    assert task.retry_jitter_factor == 0.5


@pytest.mark.parametrize(("retries", "delay"), [(1, 0.1), (3, 2.0), (10, 30.0), (2, 0)])
def test_the_tests_night_kit_waits_what_the_job_task_waits(retries: int, delay: float) -> None:
    defaults = Defaults(retries=retries, retry_delay=delay)
    ctx = SimpleNamespace(catalogue=SimpleNamespace(defaults=defaults))
    assert retry_delays(defaults) == with_retries(ctx).retry_delay_seconds  # type: ignore[arg-type]
