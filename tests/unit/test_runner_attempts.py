"""Through the runner and the ledger sink: each transition carries its attempt."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from nightshift.backends.base import ExternalState
from nightshift.engine.context import NightContext
from nightshift.engine.outcomes import Outcome
from tests.night_kit import run_job
from tests.support import ScriptedBackend, night_context

R, S, F = ExternalState.RUNNING, ExternalState.SUCCEEDED, ExternalState.FAILED
CATALOGUE = """\
defaults: {poll: {initial: 0.01s, max: 0.02s}, stagger: 0s}
jobs:
  - {label: a, backend: command, argv: [x]}
"""


@pytest.fixture
def night(tmp_path: Path) -> Iterator[tuple[NightContext, ScriptedBackend]]:
    backend = ScriptedBackend(name="command")
    with night_context(tmp_path, CATALOGUE, {"command": backend}) as ctx:
        yield ctx, backend


def test_a_resubmission_starts_a_new_attempt_with_no_dwell_for_the_gap(night) -> None:
    ctx, backend = night
    backend.scripts["a"] = [R, F]
    assert run_job(ctx, "a").state is Outcome.FAILED
    backend.scripts["a"] = [R, S]

    assert run_job(ctx, "a").state is Outcome.SUCCEEDED

    rows = ctx.ledger.dwells(ctx.night, "a")
    attempts = [r.attempt for r in rows]
    assert set(attempts) == {1, 2} and attempts == sorted(attempts)
    first_of_2 = next(r for r in rows if r.attempt == 2)
    assert (first_of_2.from_state, first_of_2.to_state, first_of_2.dwell_s) == (
        "failed",
        "submitting",
        None,
    )
    # every other transition after the first is a measured dwell
    assert all(r.dwell_s is not None for r in rows[1:] if r is not first_of_2)
