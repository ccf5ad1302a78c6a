"""The spend cap: the account's rule (pure), and whole nights on the scripted backend and a fake
clock: what is submitted, what is refused and said at once, and what a rerun of the night may."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nightshift.backends.base import ExternalState, JobSpec
from nightshift.config.loader import parse_catalogue
from nightshift.engine.admission import Admission
from nightshift.engine.events import JobFinished, NightEvent
from nightshift.engine.night import NightParts
from nightshift.engine.outcomes import NightSummary, Outcome
from nightshift.engine.plan import plan_night
from nightshift.engine.spend import (
    SPEND_REFUSED,
    JobCost,
    SpendCap,
    expected_costs,
    money,
)
from nightshift.errors import TransientBackendError
from nightshift.loop import NightLoop
from nightshift.store.ledger import Ledger
from tests.night_kit import run_night
from tests.support import EPOCH, FakeClock, ScriptedBackend, new_ledger_url

S, F = ExternalState.SUCCEEDED, ExternalState.FAILED
NIGHT = "2030-01-01"


def _catalogue(cap: float, extra: str = "") -> str:
    return f"""\
name: paid
defaults: {{poll: {{initial: 1s, max: 2s}}, stagger: 0s, retries: 0, deadline: 1h,
            spend: {{usd: {cap}, per: night}}}}
jobs:
  - {{label: report-a, backend: command, argv: [x], cost: {{usd: 20}}}}
  - {{label: report-b, backend: command, argv: [x], cost: {{usd: 20}}}}
  - {{label: report-c, backend: command, argv: [x], cost: {{usd: 20}}}}
  - {{label: free, backend: command, argv: [x]}}
{extra}"""


# -- the account, pure ---------------------------------------------------------------------------
def test_a_submit_that_would_pass_the_cap_is_refused_with_what_was_spent_and_expected() -> None:
    cap = SpendCap(50, {"a": JobCost(4, 4.1, "learned", 9), "b": JobCost(44, 48.2, "learned", 9)})
    assert cap.reserve("b") is None
    assert cap.reserve("a") == "spend cap: $48.20 spent or committed + $4.10 expected > $50"
    assert cap.settle("b", 30.0) == 30.0  # what it cost replaces what it was expected to
    assert cap.reserve("a") is None
    totals = cap.totals()
    assert (totals.spent_usd, totals.committed_usd, totals.refused) == (30.0, 4.1, ("a",))


def test_a_job_over_its_own_cap_and_an_unknown_cost_at_a_full_cap_are_refused() -> None:
    cap = SpendCap(10, {"big": JobCost(5, 6, "declared"), "new": None}, {"big": 5})
    assert cap.reserve("big") == "spend cap of the job: $6 expected > $5"
    assert cap.reserve("new") is None  # unknown: counted at nothing while the cap has room
    assert cap.totals().unknown == ("new",)
    cap.settle("new", 12.5)  # its results said what it cost: no longer unknown
    assert cap.totals().unknown == ()
    assert cap.reserve("new") == "spend cap: $12.50 spent or committed, cost unknown, >= $10"


def test_nothing_submitted_costs_nothing_and_a_cost_unsaid_counts_as_expected() -> None:
    cap = SpendCap(None, {"a": JobCost(3, 5, "declared")})
    cap.reserve("a")
    assert cap.settle("a", None, submitted=False) == 0.0
    cap.reserve("a")
    assert cap.settle("a", None) == 5.0
    assert cap.settle("a", 1.0) is None  # nothing committed: nothing to settle


def test_expected_costs_learned_first_then_declared_never_guessed(tmp_path: Path) -> None:
    text = _catalogue(50) + (
        "  - {label: batch, backend: gemini_batch, model: m, input: i.jsonl, output: o}\n"
    )
    catalogue = parse_catalogue(text, tmp_path / "n.yaml")
    costs = expected_costs(catalogue, {"report-a": [1.0, 2.0, 3.0], "free": [0.5]})
    assert costs["report-a"] == JobCost(2.0, pytest.approx(2.9), "learned", 3)  # type: ignore[arg-type]
    assert costs["report-b"] == JobCost(20, 20, "declared")
    assert costs["batch"] is None  # paid, nothing learned, nothing declared: unknown
    assert costs["free"] == JobCost(0.5, 0.5, "learned", 1)  # its results said it cost
    assert money(0.004) == "<$0.01" and money(50) == "$50" and money(4.1) == "$4.10"


# -- whole nights --------------------------------------------------------------------------------
@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    ledger = Ledger(new_ledger_url(tmp_path / "ledger.db"), "paid")
    yield ledger
    ledger.close()


@dataclass
class FlakySubmits(ScriptedBackend):
    """The first submit of a label starting with ``flaky`` fails for now, once (the job task
    retries it): ``failed`` names it."""

    flaky: str = ""
    tries: int = 0
    failed: str = ""

    def submit(self, spec: JobSpec) -> str:
        if self.flaky and spec.label.startswith(self.flaky) and self.tries == 0:
            self.tries, self.failed = 1, spec.label
            raise TransientBackendError("connection reset before the answer")
        return super().submit(spec)


def _night(
    tmp_path: Path,
    ledger: Ledger,
    text: str,
    scripts: dict,
    run_id: str,
    flaky: str = "",
) -> tuple[NightSummary, ScriptedBackend, list[NightEvent]]:
    catalogue = parse_catalogue(text, tmp_path / "nightshift.yaml")
    clock = FakeClock(epoch=EPOCH)
    backend = FlakySubmits(name="command", scripts=dict(scripts), flaky=flaky)  # type: ignore[arg-type]
    events: list[NightEvent] = []
    night_loop = NightLoop("test-night")
    parts = NightParts(
        backends={"command": backend},
        ledger=ledger,
        admission=Admission(0, clock=clock),
        sinks=[events.append],
        clock=clock,
        wall=clock.wall,
        budgets=None,
        poll_hints=None,
        cancel_poll_s=None,
        loop=night_loop,
    )
    with night_loop:
        summary = run_night(
            catalogue,
            parts,
            plan_night(catalogue),
            night=NIGHT,
            run_id=run_id,
            run_dir=tmp_path / run_id,
            clock=clock,
        )
    return summary, backend, events


ALL_OK = {x: [S] for x in ("report-a", "report-b", "report-c", "free")}


def _refused(events: list[NightEvent]) -> list[str]:
    return [
        e.outcome.label
        for e in events
        if isinstance(e, JobFinished) and e.outcome.data.get(SPEND_REFUSED)
    ]


def test_a_cap_below_three_reports_submits_two_and_skips_the_third(tmp_path, ledger) -> None:
    summary, backend, events = _night(tmp_path, ledger, _catalogue(50), ALL_OK, "first")

    paid = [x for x in backend.submitted if x.startswith("report")]
    assert len(paid) == 2 and "free" in backend.submitted  # a free job is never held back
    (skipped,) = [j for j in summary.jobs if j.state is Outcome.SKIPPED]
    assert skipped.label not in backend.submitted
    assert skipped.detail == "spend cap: $40 spent or committed + $20 expected > $50"
    assert _refused(events) == [skipped.label]  # said once, as it happened
    assert summary.spend is not None
    assert (summary.spend.cap_usd, summary.spend.spent_usd, summary.spend.committed_usd) == (
        50,
        40,
        0,
    )
    assert summary.spend.refused == (skipped.label,)
    record = ledger.get_job(NIGHT, paid[0])
    assert record is not None and (record.spent_usd, record.committed_usd) == (20, None)

    # a rerun of the same night counts what the first run spent: still no room
    again, backend2, _ = _night(tmp_path, ledger, _catalogue(50), ALL_OK, "rerun")
    assert backend2.submitted == []
    assert {j.label: j.state for j in again.jobs}[skipped.label] is Outcome.SKIPPED

    # the cap raised: the rerun submits the job the cap held back, only that one
    raised, backend3, _ = _night(tmp_path, ledger, _catalogue(60), ALL_OK, "raised")
    assert backend3.submitted == [skipped.label]
    assert raised.spend is not None and raised.spend.spent_usd == 60


def test_a_rerun_of_a_failed_paid_job_counts_its_first_try(tmp_path, ledger) -> None:
    text = _catalogue(30)
    scripts = {**ALL_OK, "report-a": [F]}
    _, backend, _ = _night(tmp_path, ledger, text, scripts, "first")
    submitted = [x for x in backend.submitted if x.startswith("report")]
    assert len(submitted) == 1  # $20 + $20 > $30
    # whatever ran, failed or not, cost its $20: a rerun may not submit another $20
    again, backend2, _ = _night(tmp_path, ledger, text, scripts, "rerun")
    assert [x for x in backend2.submitted if x.startswith("report")] == []
    assert again.spend is not None and again.spend.spent_usd == 20


def test_the_ledger_learns_a_label_cost_per_night_from_its_results(tmp_path, ledger) -> None:
    from datetime import timedelta

    for i, usd in enumerate([1.5, 2.5, None]):
        night = f"2030-01-0{i + 1}"
        at = EPOCH + timedelta(days=i)
        ledger.record_submit(night, "gen", "http", "x", 1, at=at)
        data = {"cost_usd": usd} if usd is not None else {"rows": 3}
        ledger.record_state(night, "gen", "succeeded", finished_at=at, data=data)
    assert ledger.job_costs(["gen", "other"], EPOCH - timedelta(days=1)) == {"gen": [1.5, 2.5]}
    assert ledger.job_costs(["gen"], EPOCH + timedelta(days=1)) == {"gen": [2.5]}


def test_a_retried_submit_commits_its_cost_once(tmp_path, ledger) -> None:
    # the cap has room for two reports; the first report submitted (whichever: the three start
    # together) fails for now and is retried
    text = _catalogue(40).replace("retries: 0", "retries: 2, retry_delay: 1s")
    summary, backend, _ = _night(tmp_path, ledger, text, ALL_OK, "first", flaky="report-")

    assert backend.tries == 1  # the transient error happened, and the job task retried it
    states = {j.label: j.state for j in summary.jobs}
    assert states[backend.failed] is Outcome.SUCCEEDED  # its retry kept its room, counted once
    others = {"report-a", "report-b", "report-c"} - {backend.failed}
    assert sorted(states[x] for x in others) == [
        Outcome.SKIPPED,
        Outcome.SUCCEEDED,
    ]
    assert summary.spend is not None and summary.spend.spent_usd == 40


def test_a_night_that_died_with_a_paid_job_out_there_still_counts_it(tmp_path, ledger) -> None:
    # the night was killed after report-a's submit: its row is live, its $20 committed
    ledger.record_submit(NIGHT, "report-a", "command", "report-a", 1, committed_usd=20.0)
    ledger.record_state(NIGHT, "report-a", "running")

    summary, backend, _ = _night(tmp_path, ledger, _catalogue(30), ALL_OK, "after-kill")

    assert "report-a" not in backend.submitted  # re-attached, never submitted twice
    states = {j.label: j.state for j in summary.jobs}
    assert states["report-a"] is Outcome.SUCCEEDED
    # $20 committed before the kill: neither other report fits under $30
    assert (states["report-b"], states["report-c"]) == (Outcome.SKIPPED, Outcome.SKIPPED)
    record = ledger.get_job(NIGHT, "report-a")
    assert record is not None and (record.spent_usd, record.committed_usd) == (20.0, None)
