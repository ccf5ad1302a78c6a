"""``nightshift watchdog``: new alerts one per line, then a headline; --json; its exit codes."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from nightshift.cli.main import EXIT_BAD_CATALOGUE, EXIT_NO_LEDGER, EXIT_USAGE, _parser, main
from nightshift.config.settings import load_settings
from nightshift.store.ledger import Ledger


def _failing_three_nights(sandbox: Path) -> Path:
    """Team-a's etl failed the last three nights; nobody holds a lease; nothing in flight."""
    now = datetime.now(UTC)
    ledger = Ledger(load_settings().ledger_url(), "team-a")
    for day in (3, 2, 1):
        at = now - timedelta(days=day)
        night = at.date().isoformat()
        ledger.record_submit(night, "etl", "command", f"x{day}", 1, at=at)
        ledger.record_state(night, "etl", "failed", finished_at=at + timedelta(seconds=5))
    ledger.close()
    catalogue = sandbox / "nightshift.yaml"
    catalogue.write_text("name: team-a\njobs:\n  - {label: etl, backend: command, argv: [x]}\n")
    return catalogue


def test_watchdog_prints_each_new_alert_once(
    sandbox: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    catalogue = _failing_three_nights(sandbox)
    assert main(["watchdog", "--catalogue", str(catalogue)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out[:2]] == ["alert streak", "alert stale"]
    assert out[2] == "watchdog: 0 jobs in flight, 2 findings, 2 new alerts"

    assert main(["watchdog", "--catalogue", str(catalogue), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["catalogue"], shown["found"], shown["raised"]) == ("team-a", 2, [])


def test_watchdog_without_a_catalogue_checks_streaks_not_staleness(
    sandbox: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _failing_three_nights(sandbox)
    assert main(["watchdog", "--streak", "4"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "watchdog: 0 jobs in flight, 0 findings, 0 new alerts",
        "stale labels not checked: give --catalogue to check its labels",
    ]


@pytest.mark.parametrize("flags", [["--stale-after", "a day"], ["--streak", "0"]])
def test_watchdog_refuses_bad_rules_in_one_line(
    sandbox: Path, capsys: pytest.CaptureFixture[str], flags: list[str]
) -> None:
    assert main(["watchdog", *flags]) == EXIT_USAGE
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("nightshift watchdog: --stale-after/--streak: ")


def test_watchdog_names_a_bad_catalogue_or_ledger(
    sandbox: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["watchdog", "--catalogue", str(sandbox / "missing.yaml")]) == EXIT_BAD_CATALOGUE
    assert "missing.yaml" in capsys.readouterr().err
    url = "postgresql+psycopg://nightshift:s3cret-pw@127.0.0.1:9/ledger"
    monkeypatch.setenv("NIGHTSHIFT_DATABASE_URL", url)
    assert main(["watchdog"]) == EXIT_NO_LEDGER
    err = capsys.readouterr().err
    assert err.startswith("cannot open the ledger database ") and "s3cret-pw" not in err


def test_watchdog_spells_it_catalogue_and_still_takes_catalog(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _parser().parse_args(["watchdog", "--catalog", "x.yaml"]).catalogue == "x.yaml"
    assert _parser().parse_args(["watchdog"]).catalogue is None
    with pytest.raises(SystemExit):
        _parser().parse_args(["watchdog", "--help"])
    out = capsys.readouterr().out
    assert out.count("--catalogue FILE") == 2 and "--catalog " not in out
