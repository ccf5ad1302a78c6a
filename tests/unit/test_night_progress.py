"""How far the night is: the progress bar's percentage and its words come from one tally."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from nightshift.engine.events import JobChanged, JobFinished, NightEvent
from nightshift.engine.night_progress import NightProgress, Tally
from nightshift.engine.outcomes import JobOutcome, Outcome

T = datetime(2030, 1, 1, 22, 0, tzinfo=UTC)


def changed(label: str, state: str) -> JobChanged:
    return JobChanged("n", "c", label, "cli", 1, label, state, T, None)


def ended(label: str, outcome: Outcome) -> JobFinished:
    return JobFinished("n", "c", JobOutcome(label, outcome), T)


# a small night: a succeeds, b fails and is retried to success, c times out, d is skipped
NIGHT: list[NightEvent] = [
    changed("a", "submitting"),
    changed("a", "running"),
    changed("b", "submitting"),
    changed("a", "succeeded"),
    ended("a", Outcome.SUCCEEDED),
    changed("b", "failed"),
    ended("b", Outcome.FAILED),
    changed("c", "submitting"),
    changed("b", "submitting"),  # b's retry: in flight again, no longer finished nor not ok
    changed("c", "timeout"),
    ended("c", Outcome.TIMEOUT),
    ended("d", Outcome.SKIPPED),
    changed("b", "succeeded"),
    ended("b", Outcome.SUCCEEDED),
]


def test_the_percentage_counts_the_jobs_the_words_say_finished_at_every_point() -> None:
    progress = NightProgress(["a", "b", "c", "d"])
    seen: list[tuple[float, str]] = []
    for event in NIGHT:
        progress.on_event(event)
        tally = progress.tally()
        words = tally.words()
        done, total = (int(n) for n in re.match(r"(\d+) of (\d+)", words).groups())  # type: ignore[union-attr]
        assert (done, total) == progress.finished() == (tally.finished, tally.total)
        assert tally.percent == 100.0 * done / total  # the bar is what the words count
        assert sum(tally.not_ok.values()) <= done  # "not ok" is among the finished
        seen.append((tally.percent, words))

    assert seen[4] == (25.0, "1 of 4")
    assert seen[6] == (50.0, "2 of 4, 1 not ok (1 failed)")
    assert seen[8] == (25.0, "1 of 4")  # b retried: neither finished nor not ok any more
    assert seen[11] == (75.0, "3 of 4, 2 not ok (1 skipped, 1 timeout)")
    # the night's end: every job finished is a full bar, the ones not ok said beside it
    assert seen[-1] == (100.0, "4 of 4, 2 not ok (1 skipped, 1 timeout)")


def test_a_finished_night_with_jobs_not_ok_is_a_full_bar() -> None:
    """The issue's night: '6 of 6 finished, 3 not ok' beside 'Progress: 50%' (it counted ok)."""
    labels = [f"job-{i}" for i in range(6)]
    progress = NightProgress(labels)
    for i, label in enumerate(labels):
        progress.on_event(ended(label, Outcome.FAILED if i % 2 else Outcome.SUCCEEDED))
    tally = progress.tally()
    assert (tally.percent, tally.words()) == (100.0, "6 of 6, 3 not ok (3 failed)")


def test_a_tally_of_no_jobs_is_done() -> None:
    assert Tally(0, 0, {}).percent == 100.0
    assert Tally(0, 0, {}).words() == "0 of 0"
