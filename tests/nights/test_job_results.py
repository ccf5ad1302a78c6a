"""A job task run's result is its job's outcome, a chain subflow run's its steps' outcomes:
the night gathers them from there, in memory (nothing is written to result storage)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prefect.settings import (
    PREFECT_LOCAL_STORAGE_PATH,
    PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW,
    PREFECT_RESULTS_PERSIST_BY_DEFAULT,
    temporary_settings,
)
from prefect.utilities.annotations import quote

from nightshift.backends.base import ExternalState
from nightshift.config.loader import parse_catalogue
from nightshift.engine.admission import Admission
from nightshift.engine.night import NightId, NightParts, open_night
from nightshift.engine.outcomes import JobOutcome, Outcome
from nightshift.engine.plan import plan_night
from nightshift.engine.steps import JobPools
from nightshift.flows.chain import chain
from nightshift.loop import NightLoop
from nightshift.orchestration.running_night import Night
from nightshift.store.ledger import Ledger
from nightshift.tasks.jobs import chain_outcomes, job_task, outcome_of, run_job, with_retries
from tests.support import ScriptedBackend, new_ledger_url

pytestmark = pytest.mark.usefixtures("prefect_server")

S, F = ExternalState.SUCCEEDED, ExternalState.FAILED
NIGHT = "2030-01-03"
CATALOGUE = """\
name: results
defaults: {poll: {initial: 0.05s, max: 0.1s}, stagger: 0s, deadline: 1h, retries: 0}
jobs:
  - {label: ok, backend: command, argv: [x]}
  - {label: bad, backend: command, argv: [x]}
  - {label: fetch, backend: command, argv: [x]}
  - {label: link, backend: command, argv: [x], depends_on: [fetch]}
"""


@pytest.fixture
def written() -> Iterator[Callable[[], list[Path]]]:
    """The files written to Prefect's local result storage since the test began, with results
    persisted by default: only a task or flow that says ``persist_result=False`` writes none
    (Prefect 3.9 writes a returned Failed state's data, and a flow's result)."""
    storage = Path(PREFECT_LOCAL_STORAGE_PATH.value()).expanduser()

    def files() -> set[Path]:
        return set(storage.rglob("*")) if storage.exists() else set()

    before = files()
    # the runs here are top-level (no flow run of the test's own to decide for them)
    quiet = {PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW: "ignore"}
    with temporary_settings({PREFECT_RESULTS_PERSIST_BY_DEFAULT: True, **quiet}):
        yield lambda: sorted(files() - before)


def _night_of(tmp_path: Path, backend: ScriptedBackend, work: Any, kept: set[str]) -> Any:
    """``work(night)`` on a night of CATALOGUE opened on ``backend``, on an event loop."""
    catalogue = parse_catalogue(CATALOGUE, tmp_path / "n.yaml")
    ledger = Ledger(new_ledger_url(tmp_path / "ledger.db"), catalogue.key)
    night_loop = NightLoop("test-night")  # each run of the night its own, as the flow's
    parts = NightParts(
        backends={"command": backend},  # type: ignore[dict-item]
        ledger=ledger,
        admission=Admission(0, catalogue.caps),
        budgets=None,
        poll_hints=None,
        cancel_poll_s=None,
        loop=night_loop,
    )
    plan = plan_night(catalogue)
    try:
        with open_night(catalogue, parts, plan, NightId(NIGHT, "r", tmp_path)) as ctx:
            pools = JobPools(ctx.loop)
            return ctx.loop.run(work(Night(ctx, pools, kept)))  # the night's loop, as the flow
    finally:
        night_loop.close()
        ledger.close()


def test_a_job_task_run_s_result_is_its_outcome_succeeded_failed_or_kept(
    tmp_path: Path, written: Callable[[], list[Path]]
) -> None:
    assert run_job.persist_result is False

    async def jobs(night: Night) -> dict[str, tuple[Any, Any, JobOutcome]]:
        runner, ran = with_retries(night.ctx), {}
        for label in ("ok", "bad"):
            state = await job_task(night, label, runner)
            value = await state.aresult(raise_on_failure=False)
            ran[label] = (state, value, await outcome_of(night.ctx, label, state))
        return ran

    backend = ScriptedBackend(scripts={"ok": [S], "bad": [F]})
    ran = _night_of(tmp_path, backend, jobs, kept=set())
    (ok, ok_value, ok_outcome), (bad, bad_value, bad_outcome) = ran["ok"], ran["bad"]
    assert ok.is_completed() and isinstance(ok_value, JobOutcome)
    assert (ok_value.label, ok_value.state, ok_value.kept) == ("ok", Outcome.SUCCEEDED, False)
    assert ok_outcome is ok_value  # the night takes the task's result as it is
    # a job that did not succeed: a Failed run, its outcome its data all the same
    assert bad.is_failed() and bad.name == "Failed" and isinstance(bad_value, JobOutcome)
    assert (bad_value.label, bad_value.state) == ("bad", Outcome.FAILED)
    assert bad_outcome is bad_value
    assert backend.submitted == ["ok", "bad"]

    # a rerun of the night: the job it did is kept, its task run's result says so
    again = _night_of(tmp_path, backend, jobs, kept={"ok"})
    kept, kept_value, _ = again["ok"]
    assert kept.is_completed() and kept.name == "Kept"
    assert isinstance(kept_value, JobOutcome) and kept_value.kept
    assert backend.submitted == ["ok", "bad", "bad"]  # the kept one was not submitted again
    assert written() == []  # nothing in result storage, though results persist by default


def test_a_chain_subflow_run_s_result_is_its_steps_outcomes(
    tmp_path: Path, written: Callable[[], list[Path]]
) -> None:
    async def run_chain(night: Night) -> tuple[Any, Any, list[JobOutcome]]:
        labels = ["fetch", "link"]
        state = await chain("fetch → link", labels, quote(night), return_state=True)
        value = await state.aresult(raise_on_failure=False)
        return state, value, await chain_outcomes(night.ctx, labels, state)

    backend = ScriptedBackend(scripts={"fetch": [F], "link": [S]})
    state, value, outcomes = _night_of(tmp_path, backend, run_chain, kept=set())
    assert state.is_failed()
    assert [(o.label, o.state) for o in value] == [
        ("fetch", Outcome.FAILED),
        ("link", Outcome.SKIPPED),  # its dependency failed
    ]
    assert outcomes == value
    assert written() == []
