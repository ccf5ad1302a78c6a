"""One vocabulary of job states (nightshift.states), "final" defined once; the external states
a backend reports use the same names."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from nightshift.backends.base import FINAL_STATES, ExternalState
from nightshift.backends.gemini.wait import BATCH_STATES, is_final_state
from nightshift.cli.live import LiveTable
from nightshift.engine.outcomes import outcome_from_external
from nightshift.states import FINAL, LIVE, PATH, JobState, Outcome, is_final

# every external state, classified by hand: a new one must be added here on purpose
EXTERNAL = {
    ExternalState.QUEUED: False,
    ExternalState.RUNNING: False,
    ExternalState.SUCCEEDED: True,
    ExternalState.FAILED: True,
    ExternalState.CANCELLED: True,
}
# the state names of a job on its way, as recorded in the ledger or shown in the live table
ON_THE_WAY = ["waiting", "submitting", "submitted", "queued", "running", "lost", "fallback"]
# what the ledger stores: these exact strings, never renamed (old rows must still read)
STORED = [*ON_THE_WAY[:7], "succeeded", "partial", "failed", "cancelled", "timeout", "stuck_queued",
          "skipped"]  # fmt: skip
ON_THE_WAY.append(Outcome.LEFT_RUNNING.value)  # an interrupted night's job, still out there
OUTCOMES = [o for o in Outcome if o is not Outcome.LEFT_RUNNING]


@pytest.mark.parametrize("state", list(ExternalState))
def test_every_external_state_is_classified_and_a_final_one_has_an_outcome(
    state: ExternalState,
) -> None:
    assert state.final is EXTERNAL[state]
    assert (state in FINAL_STATES) is state.final
    if state.final:
        assert outcome_from_external(state).value == state.value
    else:
        with pytest.raises(ValueError, match="not final"):
            outcome_from_external(state)


@pytest.mark.parametrize("outcome", OUTCOMES)
def test_every_outcome_is_final(outcome: Outcome) -> None:
    assert outcome.final and is_final(outcome.value) and outcome.value in FINAL


@pytest.mark.parametrize("state", ON_THE_WAY)
def test_a_job_on_its_way_is_not_final(state: str) -> None:
    assert not is_final(state)


def test_the_vocabularies_agree() -> None:
    assert set(EXTERNAL) == set(ExternalState)
    assert {s.value for s in FINAL_STATES} <= FINAL
    assert FINAL.isdisjoint(ON_THE_WAY)
    # the Gemini batch states take their finality from the external state they map to
    for raw, state in BATCH_STATES.items():
        assert is_final_state(raw) is state.final
    assert not is_final_state("SOMETHING_NEW")  # unknown: running, asked again


def test_the_live_table_counts_exactly_the_outcomes_as_finished() -> None:
    labels = [*ON_THE_WAY, *(f"done-{o.value}" for o in OUTCOMES)]
    table = LiveTable(labels, Console(file=io.StringIO()))
    for state in ON_THE_WAY:
        table.update(state, state)
    for outcome in OUTCOMES:
        table.update(f"done-{outcome.value}", outcome.value)
    assert table.render().title == f"nightshift: {len(OUTCOMES)}/{len(labels)} jobs finished"


def test_one_enum_names_every_state_the_ledger_stores() -> None:
    assert [s.value for s in JobState if s is not JobState.LEFT_RUNNING] == STORED
    assert {state.value for state in ExternalState} <= set(STORED)
    assert {outcome.value for outcome in OUTCOMES} == FINAL == {s for s in JobState if s.final}


def test_live_and_final_split_the_states_of_a_job_with_an_external_job() -> None:
    assert LIVE.isdisjoint(FINAL)
    assert {"submitted", "queued", "running", "lost", "fallback"} == LIVE
    assert {s.value for s in ExternalState if not s.final} <= LIVE
    assert PATH == ("submitting", "submitted", "queued", "running")
