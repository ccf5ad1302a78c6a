"""A whole night without Prefect or a subprocess: the async path, the scripted backend, one fake
clock, the events."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, timedelta
from pathlib import Path

import pytest

from nightshift.backends.base import ExternalState, JobSpec
from nightshift.config.loader import parse_catalogue
from nightshift.engine.admission import Admission
from nightshift.engine.events import (
    JobChanged,
    JobFinished,
    NightEvent,
    NightFinished,
    PollFailed,
    Publisher,
)
from nightshift.engine.night import NightParts
from nightshift.engine.outcomes import NightSummary, Outcome, Severity
from nightshift.engine.plan import plan_night
from nightshift.errors import TransientBackendError
from nightshift.loop import NightLoop
from nightshift.store.ledger import Ledger
from tests.night_kit import run_night
from tests.support import EPOCH, FakeClock, ScriptedBackend, new_ledger_url

Q, R = ExternalState.QUEUED, ExternalState.RUNNING
S, F = ExternalState.SUCCEEDED, ExternalState.FAILED
NIGHT = "2030-01-01"
CATALOGUE = """\
name: test
defaults: {poll: {initial: 1s, max: 2s}, stagger: 0s, retries: 1, deadline: 24h}
jobs:
  - {label: a, backend: command, argv: [x], timeout: 1h}
  - {label: b, backend: command, argv: [x], timeout: 1h}
  - {label: c, backend: command, argv: [x]}
  - {label: d, backend: command, argv: [x], depends_on: [c]}
  - {label: e, backend: command, argv: [x]}
  - {label: f, backend: command, argv: [x], depends_on: [e]}
"""
SCRIPTS: dict[str, list[ExternalState | Exception]] = {
    "a": [Q, TransientBackendError("agy: connection reset"), R, S],
    "b": [R, F],
    "c": [S],
    "d": [R, S],
    "e": [F],
}


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    ledger = Ledger(new_ledger_url(tmp_path / "ledger.db"), "test")
    yield ledger
    ledger.close()


def _parts(
    ledger: Ledger, clock: FakeClock, sinks: list, night_loop: NightLoop
) -> tuple[NightParts, ScriptedBackend]:
    backend = ScriptedBackend(name="command", scripts=dict(SCRIPTS))  # type: ignore[arg-type]
    parts = NightParts(
        backends={"command": backend},
        ledger=ledger,
        admission=Admission(0, clock=clock),
        sinks=sinks,
        clock=clock,
        wall=clock.wall,
        loop=night_loop,
    )
    return parts, backend


def _run(tmp_path: Path, ledger: Ledger, sinks: list) -> tuple[NightSummary, ScriptedBackend]:
    """The whole night on the fake clock, through the async path the flow's tasks run."""
    catalogue = parse_catalogue(CATALOGUE, tmp_path / "nightshift.yaml")
    clock = FakeClock(epoch=EPOCH)
    plan = plan_night(catalogue)
    with NightLoop("test-night") as night_loop:
        parts, backend = _parts(ledger, clock, sinks, night_loop)
        summary = run_night(
            catalogue, parts, plan, night=NIGHT, run_id="t", run_dir=tmp_path / "run", clock=clock
        )
    return summary, backend


EXPECTED_STATES = {
    "a": ["submitting", "submitted", "queued", "running", "succeeded"],
    "b": ["submitting", "submitted", "running", "failed"],
    "c": ["submitting", "submitted", "succeeded"],
    "d": ["submitting", "submitted", "running", "succeeded"],
    "e": ["submitting", "submitted", "failed"],
    "f": ["skipped"],  # its dependency failed: never submitted
}


def test_a_whole_night_on_the_scripted_backend_and_a_fake_clock(tmp_path, ledger) -> None:
    events: list[NightEvent] = []
    summary, backend = _run(tmp_path, ledger, [events.append])

    states = {job.label: job.state for job in summary.jobs}
    assert states == {
        "a": Outcome.SUCCEEDED,
        "b": Outcome.FAILED,
        "c": Outcome.SUCCEEDED,
        "d": Outcome.SUCCEEDED,
        "e": Outcome.FAILED,
        "f": Outcome.SKIPPED,
    }
    assert (summary.severity, summary.exit_code) == (Severity.PARTIAL, 2)
    assert sorted(backend.submitted) == ["a", "b", "c", "d", "e"]
    assert next(j for j in summary.jobs if j.label == "f").detail == "e failed"
    # every transition went to the ledger, dated by the fake wall clock
    for label, expected in EXPECTED_STATES.items():
        rows = ledger.dwells(NIGHT, label)
        assert [row.to_state for row in rows] == expected, label
        assert all(EPOCH <= row.at < EPOCH + timedelta(hours=1) for row in rows), label
        assert [row.dwell_s is None for row in rows] == [True] + [False] * (len(rows) - 1)
    assert ledger.get_job(NIGHT, "b").state == "failed"

    # the sinks heard the same: each change with its attempt, each outcome, the verdict
    changed = [e for e in events if isinstance(e, JobChanged)]
    for label, expected in EXPECTED_STATES.items():
        mine = [e for e in changed if e.label == label]
        assert [e.state for e in mine] == expected, label
        assert {e.attempt for e in mine} == ({0} if label == "f" else {1})
        assert {(e.night, e.catalogue, e.backend) for e in mine} == {(NIGHT, "test", "command")}
        assert all(e.at.tzinfo is UTC and e.at >= EPOCH for e in mine)
        assert mine[0].dwell_s is None and all(e.dwell_s is not None for e in mine[1:])
    assert next(e for e in changed if e.label == "a" and e.state == "submitted").external_id == "a"
    finished = [e.outcome for e in events if isinstance(e, JobFinished)]
    assert sorted(o.label for o in finished) == ["a", "b", "c", "d", "e", "f"]
    (failed_poll,) = [e for e in events if isinstance(e, PollFailed)]
    assert (failed_poll.label, failed_poll.backend) == ("a", "command")
    assert failed_poll.error == "TransientBackendError: agy: connection reset"
    (end,) = [e for e in events if isinstance(e, NightFinished)]
    assert end.summary == summary and events[-1] is end


def test_a_sink_that_raises_leaves_the_verdict_unchanged_and_is_logged(
    tmp_path: Path, ledger: Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(_event: NightEvent) -> None:
        raise RuntimeError("slack is down")

    heard: list[NightEvent] = []
    with caplog.at_level(logging.ERROR, logger="nightshift.events"):
        summary, _ = _run(tmp_path, ledger, [broken, heard.append])
    assert (summary.severity, summary.exit_code) == (Severity.PARTIAL, 2)
    assert [j.state for j in summary.jobs] == [
        Outcome.SUCCEEDED,
        Outcome.FAILED,
        Outcome.SUCCEEDED,
        Outcome.SUCCEEDED,
        Outcome.FAILED,
        Outcome.SKIPPED,
    ]
    # the sinks after it still heard everything, the ledger (the first sink) too
    assert isinstance(heard[-1], NightFinished)
    assert sum(isinstance(e, JobFinished) for e in heard) == 6
    assert [r.to_state for r in ledger.dwells(NIGHT, "a")] == EXPECTED_STATES["a"]
    failures = [r for r in caplog.records if "night event sink" in r.getMessage()]
    assert len(failures) == len(heard)  # once per event, none lost
    assert "slack is down" in caplog.text and "broken" in failures[0].getMessage()


def test_the_async_path_runs_a_night_on_the_real_clock(
    tmp_path: Path, ledger: Ledger, night_loop: NightLoop
) -> None:
    catalogue = parse_catalogue(
        CATALOGUE.replace("initial: 1s, max: 2s", "initial: 0.01s, max: 0.02s"),
        tmp_path / "nightshift.yaml",
    )
    backend = ScriptedBackend(name="command", scripts=dict(SCRIPTS))  # type: ignore[arg-type]
    parts = NightParts(
        backends={"command": backend}, ledger=ledger, admission=Admission(0), loop=night_loop
    )
    summary = run_night(
        catalogue, parts, plan_night(catalogue), night=NIGHT, run_dir=tmp_path / "run"
    )
    assert (summary.severity, summary.exit_code) == (Severity.PARTIAL, 2)
    assert [r.to_state for r in ledger.dwells(NIGHT, "d")] == EXPECTED_STATES["d"]


RETRYING = """\
name: test
defaults: {poll: {initial: 1s, max: 2s}, stagger: 0s, retries: 2, retry_delay: 10s, deadline: 24h}
jobs:
  - {label: flaky, backend: command, argv: [x]}
  - {label: down, backend: command, argv: [x]}
  - {label: buggy, backend: command, argv: [x]}
"""


class Flaky(ScriptedBackend):
    """Each job's submit raises its scripted errors first, then goes through."""

    def __init__(self, errors: dict[str, list[Exception]]) -> None:
        super().__init__(name="command", scripts={"flaky": [S]})
        self.errors = errors
        self.tries: dict[str, int] = {}

    def submit(self, spec: JobSpec) -> str:
        self.tries[spec.label] = self.tries.get(spec.label, 0) + 1
        if self.errors.get(spec.label):
            raise self.errors[spec.label].pop(0)
        return super().submit(spec)


def test_a_job_is_retried_as_its_task_is_on_transient_errors_only(
    tmp_path, ledger, night_loop: NightLoop
) -> None:
    catalogue = parse_catalogue(RETRYING, tmp_path / "nightshift.yaml")
    clock = FakeClock(epoch=EPOCH)
    backend = Flaky(
        {
            "flaky": [TransientBackendError("agy: connection reset")] * 2,
            "down": [TransientBackendError("agy: unreachable")] * 5,
            "buggy": [RuntimeError("a bug"), RuntimeError("a bug")],
        }
    )
    parts = NightParts(
        backends={"command": backend},  # type: ignore[dict-item]
        ledger=ledger,
        admission=Admission(0, clock=clock),
        clock=clock,
        wall=clock.wall,
        budgets=None,
        loop=night_loop,
    )
    waits: list[float] = []
    summary = run_night(
        catalogue,
        parts,
        plan_night(catalogue),
        night=NIGHT,
        run_dir=tmp_path / "run",
        clock=clock,
        waits=waits,
    )
    jobs = {j.label: j for j in summary.jobs}
    assert jobs["flaky"].state is Outcome.SUCCEEDED
    # its retries resumed the attempt whose submit may have gone through: never a second one
    assert (jobs["flaky"].attempts, backend.submitted) == (1, ["flaky"])
    assert jobs["down"].state is Outcome.FAILED
    assert jobs["down"].detail == "TransientBackendError: agy: unreachable"
    assert jobs["buggy"].state is Outcome.FAILED  # a bug is not retried
    assert jobs["buggy"].detail == "RuntimeError: a bug"
    assert backend.tries == {"flaky": 3, "down": 3, "buggy": 1}
    # retry_delay, doubling, after each of the two retried jobs' first and second tries
    assert sorted(waits) == [10.0, 10.0, 20.0, 20.0]
    assert clock() >= 1000.0 + 30.0  # the waits passed on the fake clock, not the real one


def test_a_publisher_tells_every_sink_in_order_and_logs_to_the_logger_handed_in() -> None:
    logger = logging.getLogger("test.sinks")
    seen: list[str] = []

    def bad(_event: NightEvent) -> None:
        raise ValueError("nope")

    publisher = Publisher([lambda e: seen.append("first"), bad], logger=logger)
    publisher.add(lambda e: seen.append("last"))
    event = PollFailed(NIGHT, "test", "a", "command", "boom", EPOCH)
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger.addHandler(handler)
    try:
        publisher.publish(event)
    finally:
        logger.removeHandler(handler)
    assert seen == ["first", "last"]
    assert [r.levelno for r in records] == [logging.ERROR]
    assert records[0].exc_info is not None and "nope" in str(records[0].exc_info[1])
