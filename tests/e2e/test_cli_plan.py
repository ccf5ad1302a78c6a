"""``nightshift plan`` on a SQLite ledger seeded with past nights: table, --json, what-ifs."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from nightshift.cli.main import main
from nightshift.config.settings import load_settings
from nightshift.store.ledger import Ledger

CATALOGUE = """\
name: team-a
defaults: {deadline: 15m, stagger: 0s}
limits: {cli: 5}
jobs:
  - {label: a, backend: cli, task: a}
  - {label: b, backend: cli, task: b}
  - {label: c, backend: cli, task: c}
  - {label: d, backend: cli, task: d}
  - {label: fresh, backend: command, argv: [echo, hi]}
  - {label: after, backend: cli, task: after, depends_on: [fresh]}
"""

PREFECT_YAML = """\
deployments:
  - name: nightly-batch-daily
    entrypoint: flows/nightly.py:nightly
    parameters: {catalog: nightshift.yaml}
    schedules: [{cron: "0 2 * * *", timezone: "UTC"}]
"""


def _fill(label: str, nights: int, queued_s: float = 60.0, running_s: float = 540.0) -> None:
    """``nights`` past nights of ``label`` through the real Ledger: queued, running, succeeded."""
    ledger = Ledger(load_settings().ledger_url(), "team-a")
    for i in range(nights):
        start = datetime.now(UTC) - timedelta(days=i + 1)
        for state, offset in [
            ("submitted", 0.0),
            ("queued", 0.0),
            ("running", queued_s),
            ("succeeded", queued_s + running_s),
        ]:
            at = start + timedelta(seconds=offset)
            ledger.transition(f"n{i}", f"r{i}", label, "cli", "ext", state, at=at, attempt=1)
    ledger.close()


@pytest.fixture
def catalogue(sandbox: Path) -> Path:
    path = sandbox / "nightshift.yaml"
    path.write_text(CATALOGUE)
    (sandbox / "prefect.yaml").write_text(PREFECT_YAML)
    for label in "abcd":
        _fill(label, 8)  # a whole job of 600 s, learned
    _fill("after", 3)  # too few nights of its own: its states fall back on the backend's
    _fill("fresh", 8, 0.001, 0.001)  # a job of a moment
    return path


def _plan(catalogue: Path, capsys: Any, *extra: str) -> dict[str, Any]:
    argv = ["plan", "--catalogue", str(catalogue), "--night", "2026-03-01", "--json", *extra]
    assert main(argv) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def test_plan_json_forecasts_the_night_and_answers_what_if(catalogue: Path, capsys) -> None:
    base = _plan(catalogue, capsys)

    assert {"finish", "critical_path", "late", "jobs"} <= set(base)
    assert base["start"] == "2026-03-01T02:00:00+00:00"  # the schedule's fire that night
    # eight identical nights of 600 s: the p95 finish is the p50's, not just any value
    ten_past = "2026-03-01T02:10:00+00:00"
    assert base["finish"] == {"p50": ten_past, "p95": ten_past}
    jobs = {j["label"]: j for j in base["jobs"]}
    assert set(jobs["a"]) == {"label", "backend", "start_p50", "end_p50", "end_p95", "wait_s"} | {
        "basis"
    }
    assert [jobs[x]["basis"] for x in ("a", "fresh", "after")] == ["learned", "learned", "fallback"]
    assert base["unknown"] == []
    assert all(j["wait_s"] == 0 for j in base["jobs"])
    assert base["late"] == []

    capped = _plan(catalogue, capsys, "--limits", "cli=2")  # the chain step queues too
    assert {j["label"]: j["wait_s"] for j in capped["jobs"] if j["label"] != "fresh"} == {
        "a": 0,
        "b": 0,
        "c": 600,
        "d": 600,
        "after": 1200,
    }
    assert capped["finish"]["p50"] == "2026-03-01T02:30:00+00:00"
    assert capped["critical_path"] == ["a", "c", "after"]
    late = [(x["label"], x["seconds"]) for x in capped["late"]]
    assert late == [("after", 900), ("c", 300), ("d", 300)]

    without = _plan(catalogue, capsys, "--without", "fresh")
    assert [j["label"] for j in without["jobs"]] == ["a", "b", "c", "d"]
    assert (without["without"], without["removed_dependents"]) == (["fresh"], ["after"])


def test_plan_table_names_the_finish_the_path_and_the_basis(catalogue: Path, capsys) -> None:
    argv = ["plan", "--catalogue", str(catalogue), "--night", "2026-03-01", "--limits", "cli=1"]
    assert main(argv) == 0

    out = capsys.readouterr().out
    assert "night starts 2026-03-01T02:00:00+00:00 (the schedule of" in out
    assert "finish: p50 02:50:00" in out
    assert "critical path: a -> b -> c -> d -> after" in out
    assert "fallback" in out and "none: nothing learned" not in out
    assert "past the deadline: after not submitted: its turn comes after the deadline" in out


def test_a_job_with_nothing_learned_leaves_the_night_without_a_finish(
    catalogue: Path, capsys: Any
) -> None:
    catalogue.write_text(CATALOGUE + "  - {label: brand-new, backend: command, argv: [echo]}\n")
    shown = _plan(catalogue, capsys)
    assert shown["unknown"] == ["brand-new"]
    assert shown["finish"] is None and shown["critical_path"] == []  # nothing rests on 0 s
    argv = ["plan", "--catalogue", str(catalogue), "--night", "2026-03-01"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    said = "finish: not forecast: 1 of 7 jobs have nothing learned yet (brand-new): no finish time"
    assert said in out and "critical path" not in out and "finish: p50" not in out
    assert "none: nothing" in out and "02:10" not in out  # no end time in the table either
    assert "every job ends before the deadline" not in out  # nothing resting on 0 s guesses
    assert "the deadline: not known whether every job ends before it" in out


def test_plan_refuses_a_bad_limit_and_an_unknown_label(catalogue: Path, capsys) -> None:
    assert main(["plan", "--catalogue", str(catalogue), "--limits", "cli=two"]) == 64
    assert main(["plan", "--catalogue", str(catalogue), "--without", "nope"]) == 4
    assert "nope" in capsys.readouterr().err


MONEY = """\
name: team-a
defaults: {deadline: 3h, stagger: 0s, finish_by: "02:25", spend: {usd: 30}}
limits: {cli: 1}
jobs:
  - {label: a, backend: cli, task: a}
  - {label: b, backend: cli, task: b, cost: {usd: 12}}
  - {label: c, backend: cli, task: c, cost: 5}
  - {label: d, backend: cli, task: d}
"""


def _costs(label: str, usd: list[float]) -> None:
    """Past nights of ``label`` whose results said what it cost."""
    ledger = Ledger(load_settings().ledger_url(), "team-a")
    for i, cost in enumerate(usd):
        night, at = f"n{i}", datetime.now(UTC) - timedelta(days=i + 1)
        ledger.record_submit(night, label, "cli", "ext", 1, at=at)
        ledger.record_state(night, label, "succeeded", finished_at=at, data={"cost_usd": cost})
    ledger.close()


def test_plan_says_what_tonight_costs_who_passes_finish_by_and_the_cap(
    catalogue: Path, capsys
) -> None:
    catalogue.write_text(MONEY)
    _costs("a", [10.0, 12.0, 14.0])  # learned: p50 12, p95 13.8 (over its declared nothing)
    _costs("b", [2.0])  # learned beats declared
    # d: never said what it cost, declares nothing: free. c: declared 5, nothing learned

    out = _plan(catalogue, capsys)
    cost = out["cost"]
    assert {j["label"]: (j["usd"], j["basis"]) for j in cost["jobs"]} == {
        "a": (12.0, "learned"),
        "b": (2.0, "learned"),
        "c": (5.0, "declared"),
    }
    assert (cost["total_usd"], cost["cap_usd"], cost["over_cap"]) == (19.0, 30, False)
    assert out["finish_by"] == "2026-03-01T02:25:00+00:00"
    # four 10-minute jobs one at a time from 02:00: c and d end after 02:25
    past = [(x["label"], x["seconds"], x["past"]) for x in out["late"]]
    assert past == [("d", 900.0, "finish_by"), ("c", 300.0, "finish_by")]

    catalogue.write_text(MONEY.replace("usd: 30", "usd: 15"))
    over = _plan(catalogue, capsys)["cost"]
    assert over["over_cap"] and [x["label"] for x in over["refused"]] == ["c"]
    assert over["refused"][0]["why"] == ("spend cap: $14 spent or committed + $5 expected > $15")

    argv = ["plan", "--catalogue", str(catalogue), "--night", "2026-03-01"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "past finish by 02:25 UTC: d ends 15m late" in text
    assert "cost: $19 expected (p95 $20.80)" in text
    assert "tonight's forecast passes the spend cap: c would not be submitted" in text


def test_plan_says_a_paid_job_s_cost_is_unknown_never_guessed(catalogue: Path, capsys) -> None:
    text = MONEY + "  - {label: e, backend: http, submit: {url: 'http://x/j'}, id_path: id,\n"
    text += "     status_url: 'http://x/j/{id}', state_path: s, cost_path: usd,\n"
    text += "     states: {succeeded: [ok], failed: [bad]}}\n"
    catalogue.write_text(text)
    cost = _plan(catalogue, capsys)["cost"]
    assert (cost["total_usd"], cost["unknown"]) == (None, ["e"])


def _night_with_forecast(night: str, late_s: float, *, ended: bool = True) -> None:
    """A night whose run forecast a 1-hour night of ``a`` then ``b``, and ended ``late_s`` late."""
    from nightshift.store.forecasts import Forecasts, StoredForecast

    ledger = Ledger(load_settings().ledger_url(), "team-a")
    start = datetime.fromisoformat(f"{night}T02:00:00+00:00")
    hour = timedelta(hours=1)
    jobs = [
        {"label": "a", "start_p50": start.isoformat(), "end_p50": (start + hour / 2).isoformat()},
        {
            "label": "b",
            "start_p50": (start + hour / 2).isoformat(),
            "end_p50": (start + hour).isoformat(),
        },
    ]
    forecast = StoredForecast(
        night,
        f"run-{night}",
        start,
        start,
        start + hour,
        start + 2 * hour,
        ["a", "b"],
        {"jobs": jobs},
    )
    Forecasts(ledger.engine, "team-a").save(forecast)
    end = start + hour + timedelta(seconds=late_s)
    for label, began, at in [("a", start, start + hour / 2), ("b", start + hour / 2, end)]:
        ledger.transition(night, f"run-{night}", label, "cli", "x", "submitting", at=began)
        last = "succeeded" if ended or label == "a" else "running"
        ledger.transition(night, f"run-{night}", label, "cli", "x", last, at=at)
    ledger.close()


def test_plan_accuracy_measures_the_forecast_over_the_last_nights(catalogue: Path, capsys) -> None:
    argv = ["plan", "--catalogue", str(catalogue), "--accuracy"]
    assert main(argv) == 0
    assert capsys.readouterr().out == (
        "no night of team-a has a kept forecast and an actual finish yet\n"
    )
    _night_with_forecast("2026-02-25", 600)
    _night_with_forecast("2026-02-26", -120)
    _night_with_forecast("2026-02-27", 0, ended=False)  # interrupted: no finish, left out
    _night_with_forecast("2026-02-28", 60)

    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)

    assert [n["night"] for n in out["nights"]] == ["2026-02-28", "2026-02-26", "2026-02-25"]
    assert [n["error_s"] for n in out["nights"]] == [60, -120, 600]
    assert out["nights"][0]["finish_p50"] == "2026-02-28T03:00:00+00:00"
    assert out["nights"][0]["finished"] == "2026-02-28T03:01:00+00:00"
    assert out["nights"][2]["error_pct"] == pytest.approx(16.7)
    assert out["median_abs_error_s"] == 120 and out["worst"]["night"] == "2026-02-25"
    assert out["p90_abs_error_s"] == 600

    assert main([*argv, "--nights", "2"]) == 0
    table = capsys.readouterr().out
    assert "2026-02-28" in table and "2026-02-26" in table and "2026-02-25" not in table
    assert "+1m (+2 %)" in table and "-2m (-3 %)" in table
    assert "median absolute error 2m (2 % of the night), p90 2m; worst 2026-02-26: -2m (-3 %)" in (
        table
    )

    assert main([*argv, "--limits", "cli=2"]) == 64  # no what-ifs in a measure of the past
    assert main(["plan", "--catalogue", str(catalogue), "--nights", "3"]) == 64
