"""One job from submit to outcome, without Prefect: reruns, lost jobs, a lost lease."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from nightshift.backends.base import ExternalState, JobSpec
from nightshift.engine.context import NightContext
from nightshift.engine.events import JobChanged
from nightshift.engine.outcomes import Outcome
from nightshift.engine.runner import LOST, end_job
from nightshift.engine.watcher import Watcher
from nightshift.errors import PermanentBackendError, TransientBackendError
from tests.night_kit import run_job
from tests.support import ScriptedBackend, night_context

R, S = ExternalState.RUNNING, ExternalState.SUCCEEDED
# a job's timeout far beyond what any test here waits: a loaded machine never trips it
CATALOGUE = """\
defaults: {poll: {initial: 0.01s, max: 0.02s}, stagger: 0s}
jobs:
  - {label: a, backend: command, argv: [x], timeout: 60s}
"""
# the one test that needs the timeout: it fires long before the script's last poll
TIMING_OUT = CATALOGUE.replace("timeout: 60s", "timeout: 0.1s")


@pytest.fixture
def night(tmp_path: Path) -> Iterator[tuple[NightContext, ScriptedBackend]]:
    backend = ScriptedBackend(name="command")
    with night_context(tmp_path, CATALOGUE, {"command": backend}) as ctx:
        yield ctx, backend


@pytest.fixture
def timing_out(tmp_path: Path) -> Iterator[tuple[NightContext, ScriptedBackend]]:
    backend = ScriptedBackend(name="command")
    with night_context(tmp_path, TIMING_OUT, {"command": backend}) as ctx:
        yield ctx, backend


def test_a_job_whose_cancel_failed_stays_live_and_a_rerun_reattaches(timing_out) -> None:
    ctx, backend = timing_out
    backend.scripts["a"] = [R] * 2000 + [S]  # at least 20 s of polls: the 0.1 s timeout wins
    backend.cancel_error = PermanentBackendError("agy: permission denied")
    first = run_job(ctx, "a")
    assert first.state is Outcome.TIMEOUT
    assert "cancel failed" in (first.detail or "")
    assert ctx.ledger.get_job("2026-11-29", "a").state == LOST
    assert Path(first.log_tail_path).read_text() == "log of a\n"

    backend.scripts["a"] = [S]  # meanwhile it finished out there
    second = run_job(ctx, "a")
    assert second.state is Outcome.SUCCEEDED
    assert backend.submitted == ["a"]  # re-attached, never submitted twice


def test_a_job_lost_to_errors_stays_live_for_the_rerun(night) -> None:
    ctx, backend = night
    ctx.ledger.record_submit("2026-11-29", "a", "command", "a", 1)
    ctx.job_run("a").external_id = "a"
    lost = ctx.loop.run(end_job(ctx, "a", Outcome.FAILED, "TransientBackendError: agy unreachable"))
    assert lost.state is Outcome.FAILED
    assert ctx.ledger.get_job("2026-11-29", "a").state == LOST
    backend.scripts["a"] = [S]
    assert run_job(ctx, "a").state is Outcome.SUCCEEDED
    assert backend.submitted == []


def test_nothing_is_submitted_once_the_lease_is_lost(night) -> None:
    ctx, backend = night
    ctx.rules = replace(
        ctx.rules, stop_reason=lambda: "not submitted: another night took the lease"
    )
    outcome = run_job(ctx, "a")
    assert outcome.state is Outcome.FAILED
    assert outcome.detail == "not submitted: another night took the lease"
    assert backend.submitted == []


def test_a_succeeded_job_is_not_run_again(night) -> None:
    ctx, backend = night
    backend.scripts["a"] = [S]
    assert run_job(ctx, "a").state is Outcome.SUCCEEDED
    again = run_job(ctx, "a")
    assert again.detail.startswith("kept: succeeded earlier tonight")
    assert backend.submitted == ["a"]


class Batchy(ScriptedBackend):
    """A backend with a fallback, like the Gemini one: answers the rows itself when asked."""

    def __init__(self) -> None:
        super().__init__(name="command", scripts={"a": [R]})
        self.fallbacks: list[str] = []

    def fallback(self, spec: object, external_id: str) -> dict[str, object]:
        self.fallbacks.append(external_id)
        return {"ok": True, "summary": "rows 3/3 ok, 3 via fallback"}


def test_a_night_that_died_during_the_fallback_is_finished_by_the_rerun(night) -> None:
    ctx, _ = night
    backend = Batchy()
    ctx.backends["command"] = backend
    ctx.ledger.record_submit("2026-11-29", "a", "command", "a", 1)
    ctx.ledger.record_state("2026-11-29", "a", "fallback")  # where the crashed night stopped
    outcome = run_job(ctx, "a")
    assert outcome.state is Outcome.SUCCEEDED
    assert outcome.detail == "rows 3/3 ok, 3 via fallback"
    assert backend.fallbacks == ["a"]
    assert backend.calls["a"] == 0  # the cancelled batch was not watched again
    assert backend.submitted == []


def test_a_night_that_lost_its_lease_leaves_the_ledger_to_the_new_holder(night) -> None:
    ctx, backend = night
    ctx.ledger.record_submit("2026-11-29", "a", "command", "a", 1)
    backend.scripts["a"] = [S]
    ctx.rules = replace(ctx.rules, owns_night=lambda: False)  # another night took over meanwhile
    assert run_job(ctx, "a").state is Outcome.SUCCEEDED  # it still reports what it saw
    assert ctx.ledger.get_job("2026-11-29", "a").state == "queued"  # but wrote nothing
    assert ctx.ledger.dwells("2026-11-29", "a") == []  # not even the final transition


class LostAnswer(ScriptedBackend):
    """Creates the job, then loses the answer once (a timeout after the create went through)."""

    def __init__(self) -> None:
        super().__init__(name="command", scripts={"a": [S]})
        self.specs: list[dict[str, object]] = []
        self.created: dict[str, str] = {}  # submission key -> id

    def submit(self, spec: JobSpec) -> str:
        self.specs.append(dict(spec.options))
        key = str(spec.options["submission_key"])
        if "resume_since" in spec.options and key in self.created:
            return self.created[key]  # found the job of this attempt: no second create
        self.created[key] = "a"
        self.submitted.append(spec.label)
        if len(self.submitted) == 1:
            raise TransientBackendError("timed out waiting for the answer")
        return "a"


def test_a_retried_submit_resumes_the_same_attempt_and_never_creates_twice(tmp_path) -> None:
    backend = LostAnswer()
    with night_context(tmp_path, CATALOGUE, {"command": backend}) as ctx:
        with pytest.raises(TransientBackendError):
            run_job(ctx, "a")  # the task fails; Prefect retries it
        record = ctx.ledger.get_job("2026-11-29", "a")
        assert (record.state, record.attempts, record.external_id) == ("submitting", 1, None)
        outcome = run_job(ctx, "a")  # the retry
    assert outcome.state is Outcome.SUCCEEDED
    assert (outcome.attempts, backend.submitted) == (1, ["a"])
    first, retry = backend.specs
    assert first["submission_key"] == retry["submission_key"]
    assert str(first["submission_key"]).endswith("/2026-11-29/a/1")
    assert "resume_since" not in first
    assert retry["resume_since"] == record.submitted_at.isoformat()


class Partial(ScriptedBackend):
    """A batch that says SUCCEEDED but came back with rows missing."""

    def collect(self, spec: JobSpec, external_id: str) -> dict[str, object]:
        return {"ok": False, "summary": "rows 3/6 ok, 3 missing"}


def test_a_batch_with_missing_rows_is_recorded_partial_never_succeeded(night) -> None:
    ctx, _ = night
    backend = Partial(name="command", scripts={"a": [R, S]})
    ctx.backends["command"] = backend
    seen: list[tuple[str, str]] = []
    ctx.events.add(lambda e: seen.append((e.label, e.state)) if isinstance(e, JobChanged) else None)
    ctx.watcher.stop()
    ctx.watcher = Watcher(on_change=ctx.seen, loop=ctx.watcher.loop)
    outcome = run_job(ctx, "a")
    assert outcome.state is Outcome.PARTIAL
    states = [t.to_state for t in ctx.ledger.dwells("2026-11-29", "a")]
    assert states == ["submitting", "submitted", "running", "partial"]
    assert [s for _, s in seen] == ["submitting", "submitted", "running", "partial"]
