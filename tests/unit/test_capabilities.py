"""Optional backend abilities: looked up in one place, closed at a night's end, refused clearly."""

from __future__ import annotations

from pathlib import Path

import pytest

from nightshift.backends import capabilities, close_backends
from nightshift.backends.base import Backend, ExternalState, JobSpec
from nightshift.backends.cli import CliBackend
from nightshift.backends.command.backend import CommandBackend
from nightshift.engine.outcomes import Outcome
from nightshift.engine.runner import LOST
from tests.night_kit import run_job
from tests.support import BatchScriptedBackend, ScriptedBackend, night_context


class Closing(ScriptedBackend):
    """A backend that holds a client: records its close, or fails it."""

    def __init__(self, name: str, log: list[str], error: Exception | None = None) -> None:
        super().__init__(name=name)
        self.log = log
        self.error = error

    def close(self) -> None:
        self.log.append(self.name)
        if self.error is not None:
            raise self.error


class FallingBack(ScriptedBackend):
    def fallback(self, spec: JobSpec, external_id: str) -> dict[str, object]:
        return {"ok": True}

    def collect(self, spec: JobSpec, external_id: str) -> dict[str, object]:
        return {"ok": True}


def test_each_ability_is_found_by_its_method_and_typed_as_the_backend_itself() -> None:
    plain = capabilities(ScriptedBackend())
    assert (plain.lists_status, plain.collects, plain.falls_back, plain.closeable) == (None,) * 4
    lister = BatchScriptedBackend()
    assert capabilities(lister).lists_status is lister
    batchy = FallingBack()
    caps = capabilities(batchy)
    assert (caps.collects, caps.falls_back, caps.closeable) == (batchy, batchy, None)
    assert capabilities(Closing("x", [])).closeable is not None


def test_the_command_and_job_cli_backends_hold_nothing_to_close(tmp_path: Path) -> None:
    assert capabilities(CommandBackend(tmp_path)).closeable is None
    cli = capabilities(CliBackend(["agy"]))
    assert cli.closeable is None
    assert cli.lists_status is not None  # `agy jobs list --json`


def test_closing_a_nights_backends_closes_every_one_even_after_a_failure() -> None:
    log: list[str] = []
    backends: dict[str, Backend] = {
        "a": Closing("a", log, RuntimeError("socket already gone")),
        "plain": ScriptedBackend(name="plain"),  # not Closeable: left alone
        "b": Closing("b", log),
    }
    with pytest.raises(RuntimeError, match="socket already gone"):
        close_backends(backends)
    assert log == ["a", "b"]
    close_backends({})  # nothing to close is fine


CATALOGUE = """\
defaults: {poll: {initial: 0.01s, max: 0.02s}, stagger: 0s}
jobs:
  - {label: "gen:a", backend: gemini_batch, model: m, input: i.jsonl, output: o.jsonl, sla: 1h}
  - {label: "gen:b", backend: gemini_batch, model: m, input: i.jsonl, output: p.jsonl,
     fallback: none}
"""


@pytest.fixture
def night(tmp_path: Path):
    with night_context(tmp_path, CATALOGUE, {}) as ctx:
        yield ctx


def test_a_batch_whose_backend_cannot_fall_back_is_refused_before_submit(night) -> None:
    backend = ScriptedBackend(name="gemini_batch", scripts={"gen:a": [ExternalState.SUCCEEDED]})
    night.backends["gemini_batch"] = backend
    outcome = run_job(night, "gen:a")
    assert outcome.state is Outcome.FAILED
    assert outcome.detail == (
        "refused: its gemini_batch backend (ScriptedBackend) cannot fall back, "
        "which the job's SLA needs"
    )
    assert backend.submitted == []


def test_a_batch_that_never_falls_back_runs_on_a_backend_without_one(night) -> None:
    backend = ScriptedBackend(name="gemini_batch", scripts={"gen:b": [ExternalState.SUCCEEDED]})
    night.backends["gemini_batch"] = backend
    assert run_job(night, "gen:b").state is Outcome.SUCCEEDED
    assert backend.submitted == ["gen:b"]


def test_a_fallback_left_by_a_dead_night_is_refused_on_a_backend_without_one(night) -> None:
    backend = ScriptedBackend(name="gemini_batch", scripts={"gen:b": [ExternalState.RUNNING]})
    night.backends["gemini_batch"] = backend
    night.ledger.record_submit("2026-11-29", "gen:b", "gemini_batch", "gen:b", 1)
    night.ledger.record_state("2026-11-29", "gen:b", "fallback")
    outcome = run_job(night, "gen:b")
    assert outcome.state is Outcome.FAILED
    assert "cannot fall back" in (outcome.detail or "")
    assert night.ledger.get_job("2026-11-29", "gen:b").state == LOST  # a rerun may resume it
