"""Learned auto-cancel: a job past its expected duration (whole-job p95) plus its margin is
cancelled and alerted, once its budget has ``min_samples`` nights; the fixed timeout and the
deadline stay the outer bound."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest

from nightshift.backends.base import ExternalState
from nightshift.budgets.current import current_budgets
from nightshift.budgets.lookup import Budget
from nightshift.config.loader import parse_catalogue
from nightshift.engine.admission import Admission
from nightshift.engine.events import JobChanged, JobFinished, NightEvent
from nightshift.engine.night import NightId, NightParts, open_night
from nightshift.engine.outcomes import Outcome
from nightshift.engine.plan import plan_night
from nightshift.engine.timers import job_timers, learned_limit
from nightshift.loop import NightLoop
from nightshift.notify.sinks import NoticeSink
from nightshift.sandbox.history import Habits, Usual, generate, write
from nightshift.store.ledger import Ledger
from tests.dwell_night import NIGHT, Recorder, dwell_of
from tests.night_kit import start_jobs
from tests.support import FakeClock, ScriptedBackend, new_ledger_url, wait_until

CATALOGUE = """\
name: test
defaults:
  poll: {initial: 5s, max: 5s}
  stagger: 0s
  retries: 0
  deadline: 24h
  learned_timeout: {floor: 10s, min_samples: 7}
jobs:
  - {label: slow, backend: command, argv: [x], timeout: learned, over_expected: 30s}
"""
TICK = 1.0  # seconds of the fake clock


def _job(text: str = CATALOGUE) -> Any:
    catalogue = parse_catalogue(text)
    return catalogue.job("slow"), catalogue.defaults


def test_the_limit_is_p95_plus_margin_only_with_enough_nights_and_never_below_the_floor() -> None:
    job, defaults = _job()
    assert learned_limit(job, defaults, Budget(60, 100, n=7)) == (100, 30)
    assert learned_limit(job, defaults, Budget(60, 100, n=6)) is None
    assert learned_limit(job, defaults, None) is None
    assert learned_limit(job, defaults, Budget(0, 0, n=9)) == (0, 30)
    tiny, _ = _job(CATALOGUE.replace("over_expected: 30s", "over_expected: 1s"))
    assert sum(learned_limit(tiny, defaults, Budget(1, 2, n=9)) or ()) == 10  # the floor
    fixed, _ = _job(CATALOGUE.replace("timeout: learned", "timeout: 1m"))
    assert learned_limit(fixed, defaults, Budget(60, 100, n=9)) == (100, 30)
    plain, _ = _job(CATALOGUE.replace("timeout: learned, over_expected: 30s", "timeout: 1m"))
    assert learned_limit(plain, defaults, Budget(60, 100, n=9)) is None


def test_the_limit_needs_defaults_min_samples_nights() -> None:
    three = CATALOGUE.replace("learned_timeout: {floor: 10s, min_samples: 7}", "min_samples: 3")
    job, defaults = _job(three)
    assert learned_limit(job, defaults, Budget(60, 100, n=3)) == (100, 500)  # up to the 10m floor
    assert learned_limit(job, defaults, Budget(60, 100, n=2)) is None


def test_the_fixed_timeout_stays_the_outer_bound_and_the_words_say_which_fired() -> None:
    wall = datetime(2030, 1, 1, tzinfo=UTC)
    job, defaults = _job(CATALOGUE.replace("timeout: learned", "timeout: 2m"))
    kw: dict[str, Any] = {"origin": 0.0, "deadline_at": 86400.0, "deadline_wall": wall}
    short = job_timers(job, defaults, expected=Budget(30, 60, n=7), **kw)
    assert (short.timeout_at, short.timeout_text(7810)) == (90, "ran 2h10m, expected 1m + 30s")
    long = job_timers(job, defaults, expected=Budget(300, 600, n=7), **kw)
    assert (long.timeout_at, long.timeout_text(120)) == (120, "job timeout 2m")
    learning = job_timers(job, defaults, expected=Budget(30, 60, n=6), **kw)
    assert learning.timeout_at == 120
    big, _ = _job()
    text = job_timers(big, defaults, expected=Budget(3000, 3900, n=7), **kw)
    assert text.timeout_text(7800) == "ran 2h10m, expected 1h05m + 30s"


@dataclass
class Notices:
    """The notifier as NoticeSink sees it: what went to the alert route."""

    sent: list[tuple[str, str, str]] = field(default_factory=list)

    def notice(self, night: str, label: str, line: str, **kw: Any) -> None:
        self.sent.append((label, kw.get("kind", ""), line))


@contextmanager
def night_with_history(
    tmp_path: Path, nights: int, text: str = CATALOGUE
) -> Iterator[tuple[Any, ...]]:
    """Job ``slow`` (running until cancelled) with ``nights`` nights of history in its ledger."""
    ledger = Ledger(new_ledger_url(tmp_path / "ledger.db"), "test")
    usual = [Usual("slow", "command", (("running", 100.0),))]
    habits = Habits(sigma=0.0, latency_sigma=0.0, failure_rate=0.0)
    write(ledger, generate(usual, date.fromisoformat(NIGHT), nights, habits))
    catalogue = parse_catalogue(text, tmp_path / "nightshift.yaml")
    clocks = FakeClock()
    backend = ScriptedBackend(name="command", scripts={"slow": [ExternalState.RUNNING]})
    events: list[NightEvent] = []
    notices = Notices()
    alerts = Recorder()
    night_loop = NightLoop("test-night")
    parts = NightParts(
        backends={"command": backend},  # type: ignore[dict-item]
        ledger=ledger,
        admission=Admission(0, clock=clocks),
        sinks=[events.append, NoticeSink(notices)],  # type: ignore[arg-type]
        clock=clocks,
        wall=clocks.wall,
        budgets=current_budgets,
        alerts=alerts,
        poll_hints=None,
        loop=night_loop,
    )
    plan = plan_night(catalogue)
    with night_loop, open_night(catalogue, parts, plan, NightId(NIGHT, "t", tmp_path)) as ctx:
        thread = start_jobs(ctx, plan)
        wait_until(lambda: backend.calls["slow"] >= 0 and "slow" in backend.submitted,
                   what="the job submitted")  # fmt: skip
        try:
            yield ctx, clocks, backend, events, notices, thread, alerts
        finally:
            ctx.watcher.stop()
            thread.join(timeout=10)
            ledger.close()


def _move(ctx: Any, clocks: FakeClock, seconds: float) -> None:
    clocks.advance(seconds)
    ctx.watcher.poke()
    if (dwell := dwell_of(ctx)) is not None:  # the dwell timer raises the levels due by now
        dwell.poke()
    ctx.watcher.wait_idle(timeout=10)


def _running(events: list[NightEvent]) -> bool:
    return any(isinstance(e, JobChanged) and e.state == "running" for e in list(events))


def _finished(events: list[NightEvent]) -> list[JobFinished]:
    return [e for e in list(events) if isinstance(e, JobFinished)]


def test_with_7_nights_a_job_at_expected_plus_margin_plus_a_tick_is_cancelled_and_alerted(
    tmp_path: Path,
) -> None:
    with night_with_history(tmp_path, 7) as (ctx, clocks, backend, events, notices, thread, _):
        budget = ctx.budgets.job("test", "slow")
        assert budget is not None and budget.n == 7
        limit = budget.p95 + 30
        wait_until(lambda: ctx.watcher.in_flight() == ["slow"], what="the job watched")
        _move(ctx, clocks, limit - TICK)
        assert backend.cancelled == [] and _finished(events) == []
        _move(ctx, clocks, 2 * TICK)
        wait_until(lambda: bool(_finished(events)), what="the job ended")
        (done,) = _finished(events)
        assert done.outcome.state is Outcome.TIMEOUT and backend.cancelled == ["slow"]
        ran = done.outcome.duration_s
        assert limit < ran <= limit + TICK
        from nightshift.config.durations import format_duration as fmt

        expected = (
            f"ran {fmt(ran)}, expected {fmt(budget.p95)} + 30s; cancel accepted by the service"
        )
        assert done.outcome.detail == expected
        # the alert route heard it at once (the night has not ended)
        assert notices.sent == [("slow", "timeout", f"timeout after {fmt(ran)}: {expected}")]
        thread.join(timeout=10)


def test_with_6_nights_it_is_not_cancelled(tmp_path: Path) -> None:
    with night_with_history(tmp_path, 6) as (ctx, clocks, backend, events, notices, _thread, _):
        assert ctx.budgets is not None and ctx.budgets.job("test", "slow") is None
        wait_until(lambda: ctx.watcher.in_flight() == ["slow"], what="the job watched")
        for _ in range(5):  # well past what 7 nights would have allowed (~130 s)
            _move(ctx, clocks, 100)
        assert backend.cancelled == [] and _finished(events) == [] and notices.sent == []
        assert ctx.watcher.in_flight() == ["slow"]


# one setting, `defaults.min_samples`, for the budgets, the watch and the learned timeout
# (its old spelling, `learned_timeout.min_samples`, is the same setting: accepted before, and
# then ignored by the budgets and the watch, which kept their own 7)
THREE = {
    "defaults.min_samples": CATALOGUE.replace(
        "learned_timeout: {floor: 10s, min_samples: 7}",
        "min_samples: 3\n  learned_timeout: {floor: 10s}",
    ),
    "learned_timeout.min_samples": CATALOGUE.replace("min_samples: 7", "min_samples: 3"),
}


@pytest.mark.parametrize("spelling", sorted(THREE))
def test_min_samples_3_with_3_nights_learns_the_watch_and_the_learned_timeout(
    tmp_path: Path, spelling: str
) -> None:
    with night_with_history(tmp_path, 3, THREE[spelling]) as night:
        ctx, clocks, backend, events, _notices, thread, alerts = night
        assert ctx.catalogue.defaults.min_samples == 3
        whole = ctx.budgets.job("test", "slow")
        running = ctx.budgets.budget("test", "slow", "running", "command")
        assert whole is not None and whole.n == 3 and whole.source == "job"
        assert running is not None and running.n == 3 and running.source == "job"
        wait_until(lambda: ctx.watcher.in_flight() == ["slow"], what="the job watched")
        _move(ctx, clocks, 5)  # the first poll: running
        wait_until(lambda: _running(events), what="the job running")
        _move(ctx, clocks, running.p95 + 2 * TICK)  # past its state's p95 (and the floor)
        wait_until(lambda: bool(alerts.sent), what="the watch")
        assert [(a.state, a.level) for a in alerts.sent] == [("running", "watch")]
        assert backend.cancelled == []
        _move(ctx, clocks, whole.p95 + 30 - running.p95 - 5)  # past p95 + the margin: cut
        wait_until(lambda: bool(_finished(events)), what="the job ended")
        (done,) = _finished(events)
        assert done.outcome.state is Outcome.TIMEOUT and backend.cancelled == ["slow"]
        thread.join(timeout=10)


def test_the_default_still_needs_7_nights(tmp_path: Path) -> None:
    text = CATALOGUE.replace(", min_samples: 7", "")
    with night_with_history(tmp_path, 6, text) as (ctx, clocks, backend, events, _n, _t, alerts):
        assert ctx.catalogue.defaults.min_samples == 7
        assert ctx.budgets is not None and ctx.budgets.job("test", "slow") is None
        assert ctx.budgets.budget("test", "slow", "running", "command") is None
        wait_until(lambda: ctx.watcher.in_flight() == ["slow"], what="the job watched")
        for _ in range(5):
            _move(ctx, clocks, 100)
        assert backend.cancelled == [] and _finished(events) == [] and alerts.sent == []
