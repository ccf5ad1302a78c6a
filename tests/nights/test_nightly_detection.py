"""Dwell detection in the Prefect flow: a learned queue budget, a job that overstays it."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from nightshift.budgets.lookup import FLOOR_S
from nightshift.config.settings import load_settings
from nightshift.flows.nightly import nightly
from nightshift.store.alert_log import AlertLog
from nightshift.store.ledger import Ledger

pytestmark = pytest.mark.usefixtures("prefect_server")

CATALOGUE = """\
name: flowtrial
defaults: {poll: {initial: 0.2s, factor: 2, max: 0.5s}, deadline: 60s}
jobs:
  - {label: etl, backend: cli, task: "etl [queue=12 run=0.3]"}
"""


def seed(url: str, nights: int = 10) -> None:
    """Past nights of etl: queued 1.5-2.4 s; the other states long enough never to alert."""
    ledger = Ledger(url, "flowtrial")
    now = datetime.now(UTC)
    try:
        for day in range(1, nights + 1):
            t = now - timedelta(days=day, hours=2)
            night = t.date().isoformat()
            slow = 5.0 + day  # seconds in each state around the queue
            steps = [("submitting", 0), ("submitted", slow), ("queued", slow)]
            steps += [("running", 1.5 + 0.1 * day), ("succeeded", slow)]
            for state, after in steps:
                t += timedelta(seconds=after)
                ledger.transition(night, f"seed-{day}", "etl", "cli", f"e{day}", state, at=t)
    finally:
        ledger.close()


def test_an_overstaying_queue_is_watched_then_alerted_once(sandbox: Path) -> None:
    url = load_settings().ledger_url()
    seed(url)
    path = sandbox / "nightshift.yaml"
    path.write_text(CATALOGUE)
    run_dir = sandbox / "run"
    state = nightly(catalog=str(path), run_dir=str(run_dir), return_state=True)
    assert state.is_completed()
    assert json.loads((run_dir / "summary.json").read_text())["exit_code"] == 0

    ledger = Ledger(url, "flowtrial")
    try:
        night = ledger.dwells(datetime.now(UTC).date().isoformat(), "etl")[0].night
        records = AlertLog(ledger.engine).alerts(catalogue="flowtrial", night=night)
    finally:
        ledger.close()
    raised = [(r.label, r.state, r.level) for r in records]
    assert raised == [("etl", "queued", "watch"), ("etl", "queued", "alert")]
    watch, alert = records
    assert {r.raised_by for r in records} == {"night"}
    # on time: just past the floor under its p95 (2.4 s: the floor, 5 s) and twice it (the
    # timer, not a poll up to 0.5 s later), within 0.3 s
    assert watch.p95_s is not None and watch.dwell_s is not None and alert.dwell_s is not None
    assert watch.p95_s < FLOOR_S < watch.dwell_s < FLOOR_S + 0.3
    assert 2 * FLOOR_S < alert.dwell_s < 2 * FLOOR_S + 0.3


def test_the_progress_artifact_says_when_the_night_should_be_done() -> None:
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from nightshift.loop import NightLoop
    from nightshift.orchestration.progress import ProgressSink
    from tests.unit.test_live import _expected_night

    events = _expected_night()
    now = events[0].at + timedelta(seconds=20)

    @flow
    def progress() -> None:
        loop = NightLoop()
        sink = ProgressSink(
            ["a", "b", "c"], loop, key="test-progress-expected",
            wall=lambda: now,
        )  # fmt: skip
        for event in events:
            sink(event)
        assert sink.flush(timeout=60)  # as the night's end does: the latest text is posted
        loop.close()

    progress()
    only = ArtifactFilter(key=ArtifactFilterKey(any_=["test-progress-expected"]))
    with get_client(sync_client=True) as client:
        (artifact,) = client.read_latest_artifacts(artifact_filter=only)
    assert artifact.description == "Jobs of the night finished: 0 of 3, expected done ~22:11 UTC"


def test_the_progress_artifact_is_worked_out_once_per_job_end_not_per_state_change() -> None:
    """Each text is a pass over every job: per state change that was quadratic at 5,000 jobs."""
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from nightshift.engine.events import JobChanged, JobFinished
    from nightshift.engine.outcomes import JobOutcome, Outcome
    from nightshift.loop import NightLoop
    from nightshift.orchestration.progress import ProgressSink

    labels = [f"job-{i}" for i in range(50)]
    t = datetime(2030, 1, 1, 22, 0, tzinfo=UTC)
    passes: list[int] = []

    @flow
    def progress() -> None:
        loop = NightLoop()
        sink = ProgressSink(labels, loop, key="test-progress-passes", wall=lambda: t)
        worked_out = sink._progress.expected_done

        def counted(now: datetime) -> datetime | None:
            passes.append(1)
            return worked_out(now)

        sink._progress.expected_done = counted  # type: ignore[method-assign]
        for label in labels:
            for state in ("submitting", "submitted", "queued", "running"):
                sink(JobChanged("n", "c", label, "cli", 1, label, state, t, None))
            sink(JobFinished("n", "c", JobOutcome(label, Outcome.SUCCEEDED), t))
        assert sink.flush(timeout=60)
        loop.close()

    progress()
    assert len(passes) <= len(labels) + 1  # one per end, and the flush's
    only = ArtifactFilter(key=ArtifactFilterKey(any_=["test-progress-passes"]))
    with get_client(sync_client=True) as client:
        (artifact,) = client.read_latest_artifacts(artifact_filter=only)
    assert artifact.description == "Jobs of the night finished: 50 of 50"


def test_a_progress_post_dropped_unrun_does_not_stop_the_next_ones() -> None:
    """A post cancelled before it ran (as a closing loop cancels its tasks) held the poster's
    place: every later text was skipped, and the last flush waited out its timeout."""
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from nightshift.engine.events import JobFinished
    from nightshift.engine.outcomes import JobOutcome, Outcome
    from nightshift.loop import NightLoop
    from nightshift.orchestration.progress import ProgressSink

    t = datetime(2030, 1, 1, 22, 0, tzinfo=UTC)

    @flow
    def progress() -> None:
        with NightLoop() as loop:
            sink = ProgressSink(["a", "b"], loop, key="test-progress-drop")

            async def a_ends_its_post_dropped_unrun_b_ends() -> bool:
                # in one step of the loop: a's end starts a poster, which is cancelled before
                # it ran (as a closing loop cancels its tasks), then b's end comes
                sink(JobFinished("n", "c", JobOutcome("a", Outcome.SUCCEEDED), t))
                posting = sink._posting
                dropped = posting is not None and posting.cancel()
                sink(JobFinished("n", "c", JobOutcome("b", Outcome.SUCCEEDED), t))
                return dropped

            assert loop.run(a_ends_its_post_dropped_unrun_b_ends(), timeout=10)
            assert sink.flush(timeout=20)

    progress()
    only = ArtifactFilter(key=ArtifactFilterKey(any_=["test-progress-drop"]))
    with get_client(sync_client=True) as client:
        (artifact,) = client.read_latest_artifacts(artifact_filter=only)
    assert artifact.description == "Jobs of the night finished: 2 of 2"
