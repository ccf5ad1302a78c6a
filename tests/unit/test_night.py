"""A whole night without Prefect or a subprocess: the scripted backend, fake clocks, the events."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from datetime import UTC, timedelta
from pathlib import Path
from types import TracebackType

import pytest

from nightshift.backends.base import ExternalState
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
from nightshift.engine.night import NightParts, finish_night, open_night, run_night_plain
from nightshift.engine.outcomes import NightSummary, Outcome, Severity
from nightshift.engine.plan import plan_night
from nightshift.engine.steps import run_jobs_plain
from nightshift.engine.watcher import Watcher
from nightshift.errors import TransientBackendError
from nightshift.store.ledger import Ledger
from tests.support import EPOCH, FakeClock, ScriptedBackend

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


class ClockDriver:
    """While the watcher has jobs in flight, move the clock a second at a time, then settle."""

    def __init__(self, clock: FakeClock, watcher: Watcher) -> None:
        self._clock, self._watcher = clock, watcher
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ClockDriver:
        self._thread.start()
        return self

    def __exit__(
        self, _t: type[BaseException] | None, _e: BaseException | None, _b: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self._watcher.in_flight():
                self._stop.wait(0.001)  # nothing to time: let the jobs' threads go on
                continue
            self._clock.advance(1.0)
            self._watcher.poke()
            self._watcher.wait_idle(timeout=10)


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}", "test")
    yield ledger
    ledger.close()


def _parts(ledger: Ledger, clock: FakeClock, sinks: list) -> tuple[NightParts, ScriptedBackend]:
    backend = ScriptedBackend(name="command", scripts=dict(SCRIPTS))  # type: ignore[arg-type]
    parts = NightParts(
        backends={"command": backend},
        ledger=ledger,
        admission=Admission(0, clock=clock),
        sinks=sinks,
        clock=clock,
        wall=clock.wall,
    )
    return parts, backend


def _run(tmp_path: Path, ledger: Ledger, sinks: list) -> tuple[NightSummary, ScriptedBackend]:
    """The whole night on the fake clock: the same pieces `run_night_plain` joins."""
    catalogue = parse_catalogue(CATALOGUE, tmp_path / "nightshift.yaml")
    clock = FakeClock(wall_start=EPOCH)
    parts, backend = _parts(ledger, clock, sinks)
    plan = plan_night(catalogue)
    started = clock.wall().isoformat(timespec="seconds")
    run_dir = tmp_path / "run"
    with (
        open_night(catalogue, parts, plan, night=NIGHT, run_id="t", run_dir=run_dir) as ctx,
        ClockDriver(clock, ctx.watcher),
    ):
        run_jobs_plain(ctx, plan, sleep=lambda _s: None)
    return finish_night(ctx, plan, started), backend


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


def test_the_plain_runner_runs_a_night_on_the_real_clock(tmp_path: Path, ledger: Ledger) -> None:
    catalogue = parse_catalogue(
        CATALOGUE.replace("initial: 1s, max: 2s", "initial: 0.01s, max: 0.02s"),
        tmp_path / "nightshift.yaml",
    )
    backend = ScriptedBackend(name="command", scripts=dict(SCRIPTS))  # type: ignore[arg-type]
    parts = NightParts(backends={"command": backend}, ledger=ledger, admission=Admission(0))
    summary = run_night_plain(
        catalogue, parts, plan_night(catalogue), night=NIGHT, run_dir=tmp_path / "run"
    )
    assert (summary.severity, summary.exit_code) == (Severity.PARTIAL, 2)
    assert [r.to_state for r in ledger.dwells(NIGHT, "d")] == EXPECTED_STATES["d"]


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
