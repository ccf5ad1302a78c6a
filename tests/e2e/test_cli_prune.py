"""``nightshift prune``: one line per kind removed, --dry-run, the catalogue's manifests, --keep."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

from nightshift.backends.gemini.results import manifest_path
from nightshift.cli import exits
from nightshift.cli.main import main
from nightshift.config.settings import load_settings
from nightshift.store.forecasts import Forecasts, StoredForecast
from nightshift.store.ledger import Ledger
from nightshift.store.missed_nights import MissedNights


def _old_history(sandbox: Path) -> Path:
    """Team-a: one job 100 days ago, one an hour ago; an old command-job folder; a manifest."""
    now = datetime.now(UTC)
    ledger = Ledger(load_settings().ledger_url(), "team-a")
    for night, at in (("old", now - timedelta(days=100)), ("new", now - timedelta(hours=1))):
        ledger.transition(night, "r", "etl", "cli", "x", "queued", at=at - timedelta(seconds=5))
        ledger.transition(night, "r", "etl", "cli", "x", "succeeded", at=at)
        ledger.record_submit(night, "etl", "cli", "x", 1, at=at - timedelta(seconds=5))
        ledger.record_state(night, "etl", "succeeded", finished_at=at)
        made = at - timedelta(seconds=5)
        forecast = StoredForecast(night, "r", made, made, at, at, ["etl"], {"jobs": []})
        Forecasts(ledger.engine, "team-a").save(forecast)  # each night's, made at its start
        # the night before each was missed, and named so that night
        MissedNights(ledger.engine, "team-a").name(
            [(f"{night}-1", None)], by="t", reason="r", at=at
        )
    ledger.close()
    old = (now - timedelta(days=100)).timestamp()
    jobdir = sandbox / "state" / "jobs" / "etl-1"
    jobdir.mkdir(parents=True)
    (jobdir / "exit_code").write_text("0")
    for path in (jobdir / "exit_code", jobdir):
        os.utime(path, (old, old))
    manifest = manifest_path(sandbox / "out.jsonl", "batches/b1")
    manifest.write_text("{}\n")
    os.utime(manifest, (old, old))
    catalogue = sandbox / "nightshift.yaml"
    catalogue.write_text(
        "name: team-a\njobs:\n  - {label: gen, backend: gemini_batch, model: m,"
        " input: in.jsonl, output: out.jsonl}\n"
    )
    return catalogue


def test_prune_dry_run_then_prune_say_what_goes(sandbox: Path, capsys) -> None:
    catalogue = _old_history(sandbox)
    assert main(["prune", "--catalogue", str(catalogue), "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("would remove 2 ledger transitions before ")
    assert out[1:] == [
        "would remove 1 ledger job rows",
        "would remove 1 forecasts of nights",
        "would remove 1 nights named missed",
        "would remove 1 Gemini submit manifests (3 bytes)",
        "would remove 1 command-job folders (1 bytes)",
    ]
    assert (sandbox / "state" / "jobs" / "etl-1").exists()

    assert main(["prune", "--catalogue", str(catalogue)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("removed 2 ledger transitions before ")
    assert out[1:] == [
        "removed 1 ledger job rows",
        "removed 1 forecasts of nights",
        "removed 1 nights named missed",
        "removed 1 Gemini submit manifests (3 bytes)",
        "removed 1 command-job folders (1 bytes)",
    ]
    assert not (sandbox / "state" / "jobs" / "etl-1").exists()
    ledger = Ledger(load_settings().ledger_url(), "team-a")
    assert ledger.get_job("old", "etl") is None and ledger.get_job("new", "etl") is not None
    kept = Forecasts(ledger.engine, "team-a")
    assert (kept.of_night("old"), len(kept.of_night("new"))) == ([], 1)
    assert [m.night for m in MissedNights(ledger.engine, "team-a").all()] == ["new-1"]
    ledger.close()


def test_prune_without_a_catalogue_skips_manifests(sandbox: Path, capsys) -> None:
    _old_history(sandbox)
    assert main(["prune", "--keep", "200d"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1:] == [
        "removed 0 ledger job rows",
        "removed 0 forecasts of nights",
        "removed 0 nights named missed",
        "skipped Gemini submit manifests (give --catalogue to prune them)",
        "removed 0 command-job folders (0 bytes)",
    ]


def test_prune_refuses_a_bad_keep_in_one_line(sandbox: Path, capsys) -> None:
    assert main(["prune", "--keep", "ninety days"]) == exits.USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--keep" in err and "not a duration" in err
