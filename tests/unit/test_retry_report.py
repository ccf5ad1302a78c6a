"""A night run twice against one SQLite ledger (the async path, no Prefect): the report after
the second run tells both runs and keeps the first run's reason for the job fixed since."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from nightshift.backends.base import ExternalState, JobStatus
from nightshift.cli.report import run_report
from nightshift.config.loader import parse_catalogue
from nightshift.engine.admission import Admission
from nightshift.engine.night import NightParts
from nightshift.engine.outcomes import NightSummary
from nightshift.engine.plan import plan_night
from nightshift.loop import NightLoop
from nightshift.orchestration.night_report import render_report
from nightshift.orchestration.report import report
from nightshift.orchestration.report_inputs import gather_report
from nightshift.store.ledger import Ledger
from tests.night_kit import run_night
from tests.support import EPOCH, FakeClock, ScriptedBackend, new_ledger_url

NIGHT = "2030-01-01"
S, F = ExternalState.SUCCEEDED, ExternalState.FAILED
CATALOGUE = """\
name: morning
defaults: {poll: {initial: 1s, max: 2s}, stagger: 0s, retries: 0, deadline: 24h}
jobs:
  - {label: "audit:links", backend: command, argv: [x]}
  - {label: "gen:articles", backend: command, argv: [x]}
  - {label: "fetch:feeds", backend: command, argv: [x]}
  - {label: "publish:feeds", backend: command, argv: [x], depends_on: ["fetch:feeds"]}
"""


class Exits(ScriptedBackend):
    """A job that fails ends with exit code 3."""

    def status(self, external_id: str) -> JobStatus:
        seen = super().status(external_id)
        return JobStatus(state=seen.state, exit_code=3 if seen.state is F else 0)


def one_run(
    tmp_path: Path,
    ledger: Ledger,
    scripts: dict[str, list[ExternalState]],
    *,
    at: int,
    run: str,
) -> NightSummary:
    """One run of the night, ``at`` minutes after the first began; its summary.json written
    to a run folder of its own, as the night's end writes it first."""
    catalogue = parse_catalogue(CATALOGUE, tmp_path / "nightshift.yaml")
    clock = FakeClock(epoch=EPOCH + timedelta(minutes=at))
    backend = Exits(name="command", scripts=dict(scripts))  # type: ignore[arg-type]
    night_loop = NightLoop("test-night")  # each run of the night its own, as the flow's
    parts = NightParts(
        backends={"command": backend},  # type: ignore[dict-item]
        ledger=ledger,
        admission=Admission(0, clock=clock),
        clock=clock,
        wall=clock.wall,
        budgets=None,
        loop=night_loop,
    )
    folder = tmp_path / "state" / "runs" / NIGHT / f"{at:02d}0000-{run}"
    folder.mkdir(parents=True)
    try:
        summary = run_night(
            catalogue, parts, plan_night(catalogue), night=NIGHT, run_id=run, run_dir=folder,
            clock=clock,
        )  # fmt: skip
    finally:
        night_loop.close()
    report(folder, summary, publish=False)
    return summary


@pytest.mark.parametrize(
    "run_ids",
    [("flow-1", "flow-1"), ("flow-1", "flow-2")],
    ids=["the UI's Retry: one flow run", "nightshift run again: a new one"],
)
def test_the_report_after_a_retry_tells_both_runs_and_keeps_the_fixed_jobs_reason(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    run_ids: tuple[str, str],
) -> None:
    monkeypatch.setenv("NIGHTSHIFT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("NIGHTSHIFT_DATABASE_URL", raising=False)
    (tmp_path / "state").mkdir()
    ledger = Ledger(new_ledger_url(tmp_path / "state" / "ledger.sqlite3"), "morning")
    try:
        first = one_run(
            tmp_path,
            ledger,
            {"audit:links": [F], "gen:articles": [S], "fetch:feeds": [F]},
            at=0,
            run=run_ids[0],
        )
        # the audit fixed; the feed still down
        second = one_run(
            tmp_path, ledger, {"audit:links": [S], "fetch:feeds": [F]}, at=5, run=run_ids[1]
        )
        catalogue = parse_catalogue(CATALOGUE, tmp_path / "nightshift.yaml")
        # as the night's end gathers it: the runs folder from the settings
        page = gather_report(second, catalogue, ledger, NIGHT)
    finally:
        ledger.close()

    assert [(r["started_at"], r["finished_at"]) for r in page["runs"]] == [
        (first.started_at, first.finished_at),
        (second.started_at, second.finished_at),
    ]
    assert page["retry"] == "retry: 2 re-ran (1 now ok, 1 still failing), 1 still skipped, 1 kept"
    audit = next(j for j in page["jobs"] if j["label"] == "audit:links")
    assert (audit["state"], audit["attempts"]) == ("succeeded", 2)
    assert audit["last_failure"]["attempt"] == 1
    assert audit["last_failure"]["reason"] == "exit code 3"
    text = render_report(page)
    assert "\nRan 22:00:00-22:00:0" in text and "; retry 22:05:00-22:05:0" in text
    assert "**audit:links** (Completed): failed on attempt 1 at 22:00, ok on attempt 2\n" in text
    assert "- last failure (failed on attempt 1 at 22:00): exit code 3\n" in text

    # `nightshift report` for the night prints the retry's page: the same story
    newest = tmp_path / "state" / "runs" / NIGHT / f"050000-{run_ids[1]}"
    # its picture stands in (drawn by a second Python: the `picture` tests look at it)
    report(newest, second, page=page, publish=False, plot=False)
    (newest / "report.png").write_bytes(b"\x89PNG")
    (tmp_path / "nightshift.yaml").write_text(CATALOGUE)
    capsys.readouterr()
    assert run_report(str(tmp_path / "nightshift.yaml"), NIGHT) == 0
    assert capsys.readouterr().out == render_report(page, plot=str(newest / "report.png"))
    print(render_report(page))
