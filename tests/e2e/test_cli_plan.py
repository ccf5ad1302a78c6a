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
    assert base["finish"] == {"p50": "2026-03-01T02:10:00+00:00", "p95": base["finish"]["p95"]}
    jobs = {j["label"]: j for j in base["jobs"]}
    assert set(jobs["a"]) == {"label", "backend", "start_p50", "end_p50", "end_p95", "wait_s"} | {
        "basis"
    }
    assert [jobs[x]["basis"] for x in ("a", "fresh", "after")] == ["learned", "none", "fallback"]
    assert all(j["wait_s"] == 0 for j in base["jobs"])
    assert base["late"] == []

    capped = _plan(catalogue, capsys, "--limits", "cli=2")  # the chain step queues too
    assert {j["label"]: j["wait_s"] for j in capped["jobs"] if j["basis"] != "none"} == {
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
    assert "fallback" in out and "none (0 s)" in out
    assert "past the deadline: after not submitted: its turn comes after the deadline" in out


def test_plan_refuses_a_bad_limit_and_an_unknown_label(catalogue: Path, capsys) -> None:
    assert main(["plan", "--catalogue", str(catalogue), "--limits", "cli=two"]) == 64
    assert main(["plan", "--catalogue", str(catalogue), "--without", "nope"]) == 4
    assert "nope" in capsys.readouterr().err
