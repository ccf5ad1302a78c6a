"""Settling a cancelled Gemini batch: its polls follow the CancelWait's backoff, bounded by it."""

from __future__ import annotations

from types import SimpleNamespace

from nightshift.backends.gemini.wait import CancelWait, settle
from nightshift.backoff import Backoff
from tests.support import FakeClock


def batches(*states: str) -> list[SimpleNamespace]:
    return [SimpleNamespace(state=f"JOB_STATE_{s}") for s in states]


def run(wait: CancelWait, *states: str) -> tuple[str, str | None, list[float]]:
    clock, slept = FakeClock(), []
    first, *later = batches(*states)
    reads = iter(later)

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.advance(seconds)

    job, note = settle(lambda: next(reads), first, wait, sleep=sleep, clock=clock)
    return job.state, note, slept


def test_a_final_batch_is_not_polled() -> None:
    assert run(CancelWait(), "CANCELLED") == ("JOB_STATE_CANCELLED", None, [])


def test_polls_back_off_until_the_batch_is_final() -> None:
    state, note, slept = run(CancelWait(), "RUNNING", "RUNNING", "CANCELLING", "CANCELLED")
    assert (state, note, slept) == ("JOB_STATE_CANCELLED", None, [0.5, 1.0, 2.0])


def test_the_wait_runs_out_with_a_note_and_the_last_wait_cut_short() -> None:
    wait = CancelWait(timeout_s=10, backoff=Backoff(initial=1, factor=2, max=4))
    state, note, slept = run(wait, *["RUNNING"] * 10)
    assert slept == [1, 2, 4, 3]
    assert state == "JOB_STATE_RUNNING"
    assert note is not None and note.startswith(
        "batch still RUNNING 10.0s after the cancel (4 poll(s))"
    )
