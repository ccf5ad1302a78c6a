"""``nightshift budgets`` on a ledger filled through the real Ledger: table, --json, filters."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from nightshift.cli import exits
from nightshift.cli.main import main
from nightshift.config.settings import load_settings
from nightshift.store.ledger import Ledger

QUEUED = [10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0]  # p50 45 s, p95 76.5 s


def _fill(key: str, label: str, queued: list[float], *, days_ago: int = 0) -> None:
    """One finished job a night through the real Ledger, the latest an hour ago."""
    ledger = Ledger(load_settings().ledger_url(), key)
    end = datetime.now(UTC) - timedelta(days=days_ago, hours=1)
    for i, dwell in enumerate(queued):
        start = end - timedelta(days=len(queued) - 1 - i, seconds=dwell + 1200)
        night = f"night-{days_ago}-{i}"
        for state, offset in [("queued", 0.0), ("running", dwell), ("succeeded", dwell + 1200)]:
            at = start + timedelta(seconds=offset)
            ledger.transition(night, "run", label, "cli", "ext", state, at=at, attempt=1)
    ledger.close()


@pytest.fixture
def catalogue(sandbox: Path) -> Path:
    path = sandbox / "nightshift.yaml"
    path.write_text("name: team-a\njobs:\n  - {label: etl, backend: cli, task: etl}\n")
    _fill("team-a", "etl", QUEUED)
    _fill("team-a", "report", [5.0, 6.0])
    _fill("team-a", "etl", [9999.0] * 3, days_ago=40)  # older than the window: never read
    _fill("team-b", "etl", [1.0] * 8)
    return path


def test_budgets_json_has_one_row_per_label_and_state(catalogue: Path, capsys) -> None:
    assert main(["budgets", "--catalogue", str(catalogue), "--json"]) == 0

    out = json.loads(capsys.readouterr().out)  # stdout is nothing but the object
    assert out["window_days"] == 30
    assert (out["snapshot"], out["built_now"], out["dwells"]) == (1, True, 2 * (8 + 2 + 8))
    rows = {(r["catalogue"], r["label"], r["state"]): r for r in out["rows"]}
    assert set(rows) == {
        ("team-a", "etl", "queued"),
        ("team-a", "etl", "running"),
        ("team-a", "etl", "(whole job)"),
        ("team-a", "report", "queued"),
        ("team-a", "report", "running"),
        ("team-a", "report", "(whole job)"),
    }
    queued = rows[("team-a", "etl", "queued")]
    assert (queued["n"], queued["p50"], queued["p95"]) == (8, 45.0, 76.5)
    assert (queued["watch_at"], queued["alert_at"], queued["source"]) == (76.5, 153.0, "job")
    report = rows[("team-a", "report", "(whole job)")]
    assert (report["n"], report["p50"], report["source"], report["basis"]) == (
        2,
        None,
        "learning",
        "learning (n=2)",
    )
    assert rows[("team-a", "report", "queued")]["basis"] == "backend (n=10)"


def test_budgets_table_names_each_catalogue_and_formats_durations(sandbox: Path, capsys) -> None:
    _fill("team-a", "etl", QUEUED)
    _fill("team-b", "load", [1.0] * 8)

    assert main(["budgets", "--label", "etl"]) == 0

    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("budgets snapshot 1, ")
    assert out.splitlines()[0].endswith("(built now), from 32 dwells")
    assert "budgets of team-a (last 30 days)" in out
    assert "team-b" not in out  # --label etl: team-b has no etl
    queued = next(line for line in out.splitlines() if "queued" in line)
    # 45 s, and p95 76.5 s / alert 153 s in format_duration's whole minutes
    cells = [cell.strip() for cell in queued.strip("│ ").split("│")]
    assert cells == ["etl", "queued", "8", "45s", "1m", "1m", "3m", "job (n=8)"]


def test_budgets_with_no_history_say_so(sandbox: Path, capsys) -> None:
    assert main(["budgets"]) == 0
    assert "no dwell history in the last 30 days" in capsys.readouterr().out


def test_budgets_refuse_a_bad_catalogue_and_an_unusable_ledger(
    sandbox: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    (sandbox / "bad.yaml").write_text("jobs: 3\n")
    assert main(["budgets", "--catalogue", str(sandbox / "bad.yaml")]) == exits.BAD_CATALOGUE

    monkeypatch.setenv("NIGHTSHIFT_DATABASE_URL", "nosuchdb://nowhere")
    assert main(["budgets"]) == exits.NO_LEDGER
    assert "cannot open the ledger database" in capsys.readouterr().err


def test_budgets_read_the_stored_snapshot_until_rebuilt(catalogue: Path, capsys) -> None:
    assert main(["budgets", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    _fill("team-a", "late", QUEUED)  # new history: not seen until a rebuild

    assert main(["budgets", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert (again["snapshot"], again["built_now"]) == (first["snapshot"], False)
    assert again["rows"] == first["rows"]
    assert main(["budgets"]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith(f"budgets snapshot {first['snapshot']}, ")
    assert line.endswith("ago), from 36 dwells; --rebuild learns them again")

    assert main(["budgets", "--rebuild", "--label", "late", "--json"]) == 0
    rebuilt = json.loads(capsys.readouterr().out)
    assert (rebuilt["built_now"], rebuilt["dwells"]) == (True, 36 + 16)
    assert rebuilt["snapshot"] > first["snapshot"]
    assert {r["state"] for r in rebuilt["rows"]} == {"queued", "running", "(whole job)"}


def test_a_dwell_whose_clocks_disagree_is_named_and_not_learned(catalogue: Path, capsys) -> None:
    # a job queued by one host, seen running by another whose clock is 5 minutes behind
    ledger = Ledger(load_settings().ledger_url(), "team-a")
    queued_at = datetime.now(UTC) - timedelta(hours=2)
    ledger.transition("skewed", "run", "etl", "cli", "ext", "queued", at=queued_at, attempt=1)
    behind = queued_at - timedelta(seconds=290)
    ledger.transition("skewed", "run", "etl", "cli", "ext", "running", at=behind, attempt=1)
    ledger.close()

    assert main(["budgets", "--catalogue", str(catalogue), "--json"]) == 0

    out = json.loads(capsys.readouterr().out)
    assert out["clocks_disagree"] == ["skewed team-a/etl queued (-290s)"]
    queued = next(r for r in out["rows"] if (r["label"], r["state"]) == ("etl", "queued"))
    assert queued["n"] == len(QUEUED)  # the negative dwell is not a sample

    assert main(["budgets", "--catalogue", str(catalogue), "--rebuild"]) == 0
    assert "their clocks disagree" in capsys.readouterr().out
