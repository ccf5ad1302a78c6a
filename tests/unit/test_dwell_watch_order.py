"""An incident's changes reach the night's sinks in the order the desk made them.

The dwell watch hands a level to the incident desk only once the alert log kept it (a database
write, off the loop), while the timer weighs the levels held for an incident on the loop. A
level still being kept when the timer opens the incident must not reach the sinks as ``Joined``
before the incident's ``Opened``: the Slack sink opens an incident on the first of its news it
hears, so the night's channel got the same incident's opening twice.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

from nightshift.budgets.lookup import Budget, Budgets
from nightshift.engine.alerts import Alert
from nightshift.engine.detection import Detector
from nightshift.engine.dwell_watch import CatalogueBudgets, DwellWatch, LevelOutlets
from nightshift.engine.events import IncidentChanged, JobChanged, NightEvent
from nightshift.engine.incidents import Action, IncidentDesk, IncidentRule, Joined
from nightshift.loop import NightLoop
from nightshift.store.alert_log import DWELL, AlertLog, AlertRecord
from nightshift.store.ledger import Ledger
from tests.support import FakeClock, wait_until

NIGHT, CATALOGUE = "2030-01-01", "test"
BUDGET = Budget(p50=4.0, p95=10.0, n=20)  # a watch past 10 s queued
WAIT_S = (
    30.0  # what a loaded 2-core machine may take to hand a change over (conditions, not sleeps)
)


class SlowToKeep(AlertLog):
    """The alert log, its write of one label's level held until the test lets it go."""

    def __init__(self, ledger: Ledger, label: str) -> None:
        super().__init__(ledger.engine)
        self.label = label
        self.writing = threading.Event()
        self.go = threading.Event()

    def record(self, record: AlertRecord) -> bool:
        if record.kind == DWELL and record.label == self.label:
            self.writing.set()
            assert self.go.wait(WAIT_S), "the test never let the write go"
        return super().record(record)


class Heard:
    """A night-event sink that keeps what it heard (on the chores thread: one at a time)."""

    def __init__(self) -> None:
        self.events: list[NightEvent] = []

    def __call__(self, event: NightEvent) -> None:
        self.events.append(event)

    def changes(self) -> list[tuple[str, str | None]]:
        out: list[tuple[str, str | None]] = []
        for event in list(self.events):
            if isinstance(event, IncidentChanged):
                change = event.change
                label = getattr(change, "label", None)
                if isinstance(change, Joined):
                    label = change.alert.label
                out.append((type(change).__name__, label))
        return out


def _changed(label: str, state: str, clock: FakeClock) -> JobChanged:
    return JobChanged(NIGHT, CATALOGUE, label, "cli", 1, f"x-{label}", state, clock.wall(), None)


class Sent:
    """The alert sink: what it was sent."""

    def __init__(self) -> None:
        self.alerts: list[Alert] = []

    def send(self, alert: Alert) -> None:
        self.alerts.append(alert)


def _watch(
    labels: tuple[str, ...], log: AlertLog, heard: Heard, desk: IncidentDesk, clock: FakeClock,
    loop: NightLoop,
) -> DwellWatch:  # fmt: skip
    """A dwell watch of ``labels`` (all on backend cli, a watch past 10 s queued), started."""
    budgets = Budgets(states={(CATALOGUE, label, "queued"): BUDGET for label in labels})
    detector = Detector(
        NIGHT, CATALOGUE, CatalogueBudgets(budgets, CATALOGUE, dict.fromkeys(labels, "cli")),
        floor_s=0.0,
    )  # fmt: skip
    outlets = LevelOutlets(log, heard, Sent(), desk)
    return DwellWatch(detector, outlets, wall=clock.wall, loop=loop).start()


def test_a_level_kept_while_the_timer_opens_its_incident_is_heard_after_the_opening(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}", CATALOGUE)
    log = SlowToKeep(ledger, "c")
    heard = Heard()
    labels = ("a", "b", "c")
    # two of three in flight stalled: an incident, once the first level's gathering is over
    desk = IncidentDesk(lambda _backend: IncidentRule(jobs=3, window_s=60.0), gather_s=5.0)
    gathered = clock.wall() + timedelta(seconds=10.5 + 5)
    with NightLoop("test-order") as loop:
        watch = _watch(labels, log, heard, desk, clock, loop)
        try:
            for label in ("a", "b"):
                watch(_changed(label, "queued", clock))
            clock.advance(3)
            watch(_changed("c", "queued", clock))
            clock.advance(7.5)  # a and b past their watch: held 5 s for others of theirs
            watch.poke()
            wait_until(lambda: len(heard.events) == 2, timeout=WAIT_S, what="a's and b's levels")
            # and the desk holding b's for others (its sinks hear a level before the desk does:
            # a clock moved before that made the gathering start 3 s late; CI, 1 run in 25)
            wait_until(
                lambda: loop.ask(desk.next_wake, timeout=WAIT_S) == gathered,
                timeout=WAIT_S,
                what="the desk holding b's level",
            )
            clock.advance(3)  # c past its watch: its level is being kept
            watch.poke()
            assert log.writing.wait(WAIT_S)
            clock.advance(2.5)  # the gathering is over: the incident of a and b is due
            watch.poke()
            wait_until(
                lambda: (watch.waiting_for or gathered) > gathered, timeout=WAIT_S, what="the tick"
            )
            log.go.set()
            wait_until(
                lambda: heard.changes()[:1] != [], timeout=WAIT_S, what="the incident's news"
            )
            for label in labels:
                watch(_changed(label, "succeeded", clock))
            wait_until(
                lambda: ("Closed", None) in heard.changes(),
                timeout=WAIT_S,
                what="the incident's end",
            )
        finally:
            log.go.set()
            watch.stop()
    changes = heard.changes()
    # its opening first (naming c, or c joining after it), never a join before it
    assert changes[0] == ("Opened", None), changes
    opening = next(e.change for e in heard.events if isinstance(e, IncidentChanged))
    named = set(opening.incident.labels) | {label for kind, label in changes if kind == "Joined"}
    assert named == set(labels), changes
    assert [c for c in changes if c[0] == "Left"] == [("Left", label) for label in labels]
    assert changes[-1] == ("Closed", None) and [c[0] for c in changes].count("Opened") == 1
    ledger.close()


def test_a_job_ending_after_the_watch_stopped_still_ends_its_incident(tmp_path: Path) -> None:
    """The night's verdict reads the desk once the watch stopped: a job that ends then (the
    verdict's own "no outcome recorded") still leaves the incident, though nothing is sent."""
    clock = FakeClock()
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}", CATALOGUE)
    heard = Heard()
    labels = ("a", "b")
    desk = IncidentDesk(lambda _backend: IncidentRule(jobs=2, window_s=60.0), gather_s=5.0)
    with NightLoop("test-order") as loop:
        watch = _watch(labels, AlertLog(ledger.engine), heard, desk, clock, loop)
        for label in labels:
            watch(_changed(label, "queued", clock))
        clock.advance(10.5)  # both past their watch: an incident, once the gathering is over
        watch.poke()
        wait_until(lambda: len(heard.events) == 2, timeout=WAIT_S, what="both levels")
        clock.advance(5.5)
        watch.poke()
        wait_until(
            lambda: heard.changes()[:1] == [("Opened", None)], timeout=WAIT_S, what="the incident"
        )
        watch.stop()
        for label in labels:
            watch(_changed(label, "failed", clock))
        wait_until(lambda: bool(desk.incidents) and desk.incidents[0].ended_at is not None,
                   timeout=WAIT_S, what="the incident over")  # fmt: skip
        assert len(heard.changes()) == 1  # nothing said once stopped
    ledger.close()


class Broken(IncidentDesk):
    """A desk whose weighing raises (a bug): counted."""

    ticks = 0  # counted on the instance

    def tick(self, now: datetime) -> list[Action]:
        self.ticks += 1
        raise RuntimeError("a bug in the desk")


def test_a_desk_that_raises_on_its_tick_is_not_asked_again_and_again(tmp_path: Path) -> None:
    clock = FakeClock()
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}", CATALOGUE)
    heard = Heard()
    desk = Broken(lambda _backend: IncidentRule(jobs=3, window_s=60.0), gather_s=5.0)
    with NightLoop("test-order") as loop:
        watch = _watch(("a", "b"), AlertLog(ledger.engine), heard, desk, clock, loop)
        try:
            watch(_changed("a", "queued", clock))
            watch(_changed("b", "queued", clock))
            clock.advance(10.5)  # a's level held for b's: weighed 5 s on, by a desk that raises
            watch.poke()
            wait_until(lambda: desk.ticks >= 1, timeout=WAIT_S, what="the first weighing")
            clock.advance(5.5)
            watch.poke()
            wait_until(lambda: desk.ticks >= 2, timeout=WAIT_S, what="the timer's weighing")
            seen = desk.ticks
            time.sleep(0.5)  # an upper bound only: a loaded machine asks fewer times, not more
            assert desk.ticks - seen <= 2, desk.ticks - seen  # was hundreds: a hot loop
        finally:
            watch.stop()
    ledger.close()
