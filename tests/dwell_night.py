"""A night with dwell detection on a fake clock: a scripted backend, budgets given as literals.

The night's jobs run on their event loop (``tests/night_kit.py``), on a thread of its own; the
test moves the one fake clock and pokes the watcher and the dwell timer, then waits for what
should follow (never a fixed sleep).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nightshift.backends.base import ExternalState
from nightshift.budgets.lookup import Budget, Budgets
from nightshift.config.loader import parse_catalogue
from nightshift.engine.admission import Admission
from nightshift.engine.alerts import Alert
from nightshift.engine.context import NightContext
from nightshift.engine.dwell_watch import BudgetLoader, DwellWatch
from nightshift.engine.events import JobChanged, LevelChanged, NightEvent
from nightshift.engine.night import NightId, NightParts, open_night
from nightshift.engine.plan import plan_night
from nightshift.loop import NightLoop
from nightshift.store.alert_log import AlertLog
from nightshift.store.ledger import Ledger
from tests.night_kit import start_jobs
from tests.support import EPOCH, FakeClock, ScriptedBackend, wait_until

Q, R, S = ExternalState.QUEUED, ExternalState.RUNNING, ExternalState.SUCCEEDED
NIGHT = "2030-01-01"
CATALOGUE = """\
name: test
defaults: {{poll: {{initial: {poll}, max: {poll}}}, stagger: 0s, retries: 0, deadline: 24h}}
jobs:
  - {{label: slow, backend: command, argv: [x]}}
"""
# watch past 10 s, alert past 20 s, in whichever state the test waits in
BUDGET = Budget(p50=4.0, p95=10.0, n=20)


def budgets(*states: str, job_p50: float | None = None) -> Budgets:
    """The budget above for job ``slow`` in each of ``states``; a whole-job p50 if given."""
    jobs = {("test", "slow"): Budget(job_p50, job_p50, 20)} if job_p50 is not None else {}
    return Budgets(states={("test", "slow", s): BUDGET for s in states}, jobs=jobs)


@dataclass
class Recorder:
    """An AlertSink that keeps what it was sent."""

    sent: list[Alert] = field(default_factory=list)

    def send(self, alert: Alert) -> None:
        self.sent.append(alert)


def dwell_of(ctx: NightContext) -> DwellWatch | None:
    """The night's dwell watch (the last of its sinks), None when it has no budgets."""
    return next((s for s in ctx.events.sinks if isinstance(s, DwellWatch)), None)


@dataclass
class Night:
    """A running night and what the test watches of it."""

    ctx: NightContext
    clock: FakeClock
    backend: ScriptedBackend
    events: list[NightEvent]
    alerts: Recorder
    thread: threading.Thread

    def levels(self) -> list[tuple[str, str, str]]:
        """(label, state, level) of each LevelChanged event, in order."""
        return [
            (e.alert.label, e.alert.state, e.alert.level)
            for e in list(self.events)
            if isinstance(e, LevelChanged)
        ]

    def state(self) -> str | None:
        """The job's latest state as the sinks heard it."""
        changed = [e.state for e in list(self.events) if isinstance(e, JobChanged)]
        return changed[-1] if changed else None

    def move(self, seconds: float) -> None:
        """Move the clock, wake the watcher and the dwell timer, wait for both to catch up."""
        self.clock.advance(seconds)
        self.ctx.watcher.poke()
        dwell = dwell_of(self.ctx)
        if dwell is not None:
            dwell.poke()
        self.ctx.watcher.wait_idle(timeout=10)
        if dwell is not None:

            def caught_up() -> bool:  # every level due by now has been raised
                wake = dwell.next_wake()
                return wake is None or wake > self.clock.wall()

            wait_until(caught_up, what="the dwell timer to raise the levels due by now")

    def run_out(self, step: float, limit: int = 1000) -> None:
        """Move the clock ``step`` at a time until the job's watch ends, then let the night end.

        Its last steps (recording the outcome, closing) need no clock: the night is joined,
        rather than given a fixed real-time wait after each move to see whether it ended.
        """
        for _ in range(limit):
            if not self.ctx.watcher.in_flight():
                break
            self.move(step)
        else:
            raise AssertionError(f"the job was still watched after {limit} moves")
        self.thread.join(timeout=10)
        assert not self.thread.is_alive(), "the night did not end after its job's watch"


def rows(ledger: Ledger) -> list[tuple[str, str, str]]:
    """(label, state, level) of the night's alert log rows, oldest first."""
    log = AlertLog(ledger.engine)
    return [(r.label, r.state, r.level) for r in log.alerts(catalogue="test", night=NIGHT)]


@contextmanager
def dwell_night(
    tmp_path: Path,
    ledger: Ledger,
    script: list[Any],
    load: BudgetLoader | None,
    *,
    poll: str = "100s",
    clock: FakeClock | None = None,
    real_clocks: bool = False,
    owns_night: Callable[[], bool] = lambda: True,
) -> Iterator[Night]:
    """Job ``slow`` on its script, the night running on a thread; joined on the way out.

    ``real_clocks``: the night runs on the real clocks (``Night.clock`` is then unused).
    """
    catalogue = parse_catalogue(CATALOGUE.format(poll=poll), tmp_path / "nightshift.yaml")
    clock = clock or FakeClock(epoch=EPOCH)
    timing: dict[str, Any] = {} if real_clocks else {"clock": clock, "wall": clock.wall}
    backend = ScriptedBackend(name="command", scripts={"slow": list(script)})
    events: list[NightEvent] = []
    alerts = Recorder()
    loop = NightLoop("test-night")
    parts = NightParts(
        backends={"command": backend},  # type: ignore[dict-item]
        ledger=ledger,
        admission=Admission(0) if real_clocks else Admission(0, clock=clock),
        sinks=[events.append],
        **timing,
        budgets=load,
        alerts=alerts,
        owns_night=owns_night,
        loop=loop,
    )
    plan = plan_night(catalogue)
    run_dir = tmp_path / "run"
    with loop, open_night(catalogue, parts, plan, NightId(NIGHT, "t", run_dir)) as ctx:
        thread = start_jobs(ctx, plan)  # the night's event loop, on a thread of its own
        night = Night(ctx, clock, backend, events, alerts, thread)

        # the job is submitted (or re-attached) and watched before the test moves any clock: a
        # move between its submit and its watch would put its first poll past the moved clock
        def in_flight() -> bool:
            watched = "slow" in ctx.watcher.in_flight()
            return watched and night.state() in ("submitted", "queued")

        wait_until(in_flight, what="the job in flight")
        try:
            yield night
        finally:
            if thread.is_alive():
                ctx.watcher.stop()
            thread.join(timeout=10)
