"""Prefect states named for what happened, and the night's verdict as the run's name."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from nightshift.engine.outcomes import JobOutcome, Outcome, join
from nightshift.orchestration.states import job_state, night_result, quiet_job_finish


@pytest.mark.parametrize(
    ("state", "kept", "shown", "failed"),
    [
        (Outcome.SUCCEEDED, False, "Completed", False),
        (Outcome.SUCCEEDED, True, "Kept", False),
        (Outcome.PARTIAL, False, "Partial", True),
        (Outcome.STUCK_QUEUED, False, "Stuck", True),
        (Outcome.TIMEOUT, False, "TimedOut", True),
        (Outcome.CANCELLED, False, "Cancelled", True),
        (Outcome.FAILED, False, "Failed", True),
        (Outcome.SKIPPED, False, "Skipped", False),
    ],
)
def test_each_outcome_has_its_own_name(
    state: Outcome, kept: bool, shown: str, failed: bool
) -> None:
    named = job_state(JobOutcome("a", state, 1.0, 1, kept=kept))
    assert (named.name, named.is_failed()) == (shown, failed)


def test_a_job_that_did_not_succeed_says_why_in_one_line_as_its_states_message() -> None:
    audit = JobOutcome("audit:links", Outcome.FAILED, 8.0, 1, detail="exit code 3")
    tail = "checked 40 pages\n2 broken links found, failing the audit\n\n"
    named = job_state(audit, tail=tail)
    assert (named.name, named.message) == (
        "Failed",
        "exit code 3: 2 broken links found, failing the audit",
    )
    assert job_state(audit).message == "exit code 3"
    slow = JobOutcome("slow", Outcome.TIMEOUT, 2.0, 1, detail="job timeout 2s")
    assert (job_state(slow).name, job_state(slow).message) == ("TimedOut", "job timeout 2s")
    # a skipped step was not run: not green (Completed), not a failure of its own: Cancelled
    push = job_state(JobOutcome("push", Outcome.SKIPPED, detail="pull failed"))
    assert (push.name, push.message, push.is_cancelled()) == (
        "Skipped",
        "not run: pull failed",
        True,
    )
    # a job that succeeded, or was kept, says so as before
    ok = JobOutcome("hello", Outcome.SUCCEEDED, 1.0, 1)
    assert job_state(ok).message == "hello (1s, succeeded)"


def test_a_partial_night_returns_its_named_state_first() -> None:
    night = join([JobOutcome("a", Outcome.SUCCEEDED, 1.0, 1), JobOutcome("b", Outcome.TIMEOUT)])
    first, *jobs = night_result(night)  # type: ignore[misc]
    assert (first.name, first.message) == (
        "Partial",
        "partial: 1/2 succeeded (1 timeout); worst: b (not run, timeout)",
    )
    assert [j.name for j in jobs] == ["Completed", "TimedOut"]
    ok = night_result(join([JobOutcome("a", Outcome.SUCCEEDED, 1.0, 1)]))
    assert not isinstance(ok, list) and ok.is_completed()


def test_prefects_finished_line_of_a_failed_job_is_dropped_while_a_night_runs() -> None:
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    from prefect.settings import PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW, temporary_settings

    logger = logging.getLogger("prefect.task_runs")
    handler = Keep()
    logger.addHandler(handler)
    job = {"task_name": "run-job", "flow_name": "nightly"}

    # records outside a flow run: Prefect's API handler would warn it has no run to send them to
    def outside() -> Any:
        return temporary_settings({PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW: "ignore"})

    try:
        with outside(), quiet_job_finish():
            logger.error("Finished in state Failed('a')", extra=job)
            logger.error("the job's own record", extra=job)
            logger.error("Finished in state Failed('c')", extra={"task_name": "notify"})
        with outside():
            logger.error("Finished in state Failed('d')", extra=job)
    finally:
        logger.removeHandler(handler)
    assert seen == ["the job's own record", "Finished in state Failed('c')",
                    "Finished in state Failed('d')"]  # fmt: skip


def test_the_nights_last_line_is_rewritten_once_and_the_filters_after_it_still_see_it() -> None:
    from nightshift.orchestration.states import _FinishedAs

    logger = logging.getLogger("prefect.flow_runs")
    seen: list[str] = []

    class After(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            seen.append(record.getMessage())
            return True

    def line(text: str, run: str = "r1") -> logging.LogRecord:
        return logging.makeLogRecord({"msg": f"Finished in state {text}", "flow_run_id": run})

    _FinishedAs.install("r1", "Partial('2/4 ok')")
    after = After()
    logger.addFilter(after)
    try:
        for record in (line("Failed('x')", run="r0"), line("Failed('3/5')"), line("Failed('y')")):
            logger.filter(record)
        _FinishedAs.install("r2", "Failed('0/1 ok')")  # the next night's: the spent one goes
        mine = [f for f in logger.filters if isinstance(f, _FinishedAs)]
    finally:
        logger.removeFilter(after)
        for f in [f for f in logger.filters if isinstance(f, _FinishedAs)]:
            logger.removeFilter(f)
    assert seen == ["Finished in state Failed('x')", "Finished in state Partial('2/4 ok')",
                    "Finished in state Failed('y')"]  # fmt: skip
    assert [f.flow_run_id for f in mine] == ["r2"]
