"""An interrupted night, without Prefect: jobs in flight are let go, nothing is submitted or
cancelled, nothing final is written; a rerun re-attaches."""

from __future__ import annotations

import threading
from pathlib import Path

from nightshift.backends.base import ExternalState
from nightshift.backoff import Backoff
from nightshift.config.loader import parse_catalogue
from nightshift.engine.admission import Admission
from nightshift.engine.night import NightId, NightParts, finish_night, open_night
from nightshift.engine.outcomes import Outcome
from nightshift.engine.plan import plan_night
from nightshift.engine.stopping import NightStop
from nightshift.engine.watcher import Watcher, WatchRequest
from nightshift.loop import NightLoop
from nightshift.states import LIVE as LIVE_STATES
from nightshift.store.ledger import Ledger
from tests.night_kit import run_jobs, run_night
from tests.support import ScriptedBackend, new_ledger_url, wait_until

R = ExternalState.RUNNING
NIGHT = "2030-01-02"
CATALOGUE = """\
name: stop
defaults: {poll: {initial: 0.05s, max: 0.1s}, stagger: 0s, deadline: 1h}
limits: {command: 2}
jobs:
  - {label: a, backend: command, argv: [x]}
  - {label: b, backend: command, argv: [x]}
  - {label: c, backend: command, argv: [x]}
  - {label: d, backend: command, argv: [x], depends_on: [a]}
"""


def _night(tmp_path: Path, backend: ScriptedBackend, stop: NightStop) -> tuple[object, Ledger]:
    catalogue = parse_catalogue(CATALOGUE, tmp_path / "n.yaml")
    ledger = Ledger(new_ledger_url(tmp_path / "ledger.db"), catalogue.key)
    loop = NightLoop("test-night")
    parts = NightParts(
        backends={"command": backend},
        ledger=ledger,
        admission=Admission(0, catalogue.caps),
        budgets=None,
        poll_hints=None,
        loop=loop,
    )
    plan = plan_night(catalogue, None)
    box: dict[str, object] = {}

    def run() -> None:
        with open_night(catalogue, parts, plan, NightId(NIGHT, "r1", tmp_path), stop=stop) as ctx:
            run_jobs(ctx, plan)
        box["summary"] = finish_night(ctx, plan, "start")

    thread = threading.Thread(target=run)
    thread.start()
    wait_until(lambda: len(backend.submitted) == 2, 10, "two jobs submitted (the cap)")
    stop.request("interrupted", 130)
    thread.join(10)
    loop.close()
    assert not thread.is_alive(), "the night did not stop"
    return box["summary"], ledger


def test_an_interrupted_night_leaves_its_jobs_running_and_submits_nothing_more(
    tmp_path: Path,
) -> None:
    backend = ScriptedBackend(scripts={x: [R] for x in "abcd"})
    summary, ledger = _night(tmp_path, backend, NightStop())
    states = {job.label: job.state for job in summary.jobs}  # type: ignore[attr-defined]
    running = {x for x, s in states.items() if s is Outcome.LEFT_RUNNING}
    assert running == set(backend.submitted) and len(running) == 2
    # the third waited for the cap, the chain step for its dependency: neither was submitted
    assert {s for x, s in states.items() if x not in running} == {Outcome.SKIPPED}
    assert backend.cancelled == []
    try:
        for label in running:
            record = ledger.get_job(NIGHT, label)
            assert record is not None and record.state in LIVE_STATES and record.external_id
        for label in set(states) - running:
            assert ledger.get_job(NIGHT, label) is None  # nothing written: the rerun starts it
    finally:
        ledger.close()


def test_a_rerun_re_attaches_to_what_the_interrupted_night_left(
    tmp_path: Path, night_loop: NightLoop
) -> None:
    backend = ScriptedBackend(scripts={x: [R] for x in "abcd"})
    _, ledger = _night(tmp_path, backend, NightStop())
    ledger.close()
    first = list(backend.submitted)
    backend.scripts = {x: [ExternalState.SUCCEEDED] for x in "abcd"}
    catalogue = parse_catalogue(CATALOGUE, tmp_path / "n.yaml")
    ledger = Ledger(new_ledger_url(tmp_path / "ledger.db"), catalogue.key)
    try:
        parts = NightParts(
            backends={"command": backend},
            ledger=ledger,
            admission=Admission(0, catalogue.caps),
            budgets=None,
            poll_hints=None,
            loop=night_loop,
        )
        summary = run_night(
            catalogue, parts, plan_night(catalogue, None), night=NIGHT, run_dir=tmp_path
        )
    finally:
        ledger.close()
    assert {job.state for job in summary.jobs} == {Outcome.SUCCEEDED}
    assert sorted(backend.submitted) == sorted([*first, *(set("abcd") - set(first))])


def test_detach_hands_every_watched_job_a_detached_result_and_later_ones_too(
    night_loop: NightLoop,
) -> None:
    backend = ScriptedBackend(scripts={"x": [R], "y": [R]})
    watcher = Watcher(on_change=lambda *_: None, loop=night_loop)
    try:
        policy = Backoff(0.05, 2.0, 0.1)
        first = watcher.watch(WatchRequest("x", backend, "x", policy))
        watcher.detach()
        assert first.result(timeout=5).reason == "detached"
        later = watcher.watch(WatchRequest("y", backend, "y", policy))
        assert later.result(timeout=5).reason == "detached"
        assert backend.cancelled == []
    finally:
        watcher.stop()
