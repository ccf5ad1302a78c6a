"""``nightshift init``: a starter catalogue that validates, never written over an existing one."""

from __future__ import annotations

from pathlib import Path

import pytest

from nightshift.cli.exits import BAD_CATALOGUE as EXIT_BAD_CATALOGUE
from nightshift.cli.main import main
from nightshift.config.loader import load_catalogue
from nightshift.loop import NightLoop


def test_init_writes_a_commented_starter_that_validates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("JOBS_API_URL", raising=False)
    folder = tmp_path / "Team Batch"
    folder.mkdir()
    path = folder / "nightshift.yaml"
    assert main(["init", "--catalogue", str(path)]) == 0
    text = path.read_text()
    assert text.startswith("# A starter catalogue") and "# notify:" in text
    catalogue = load_catalogue(path)
    labels = [j.label for j in catalogue.jobs]
    assert catalogue.name == "team-batch"
    assert labels == ["hello", "goodbye", "rollup:orders", "rollup:refunds"]
    assert main(["validate", "--catalogue", str(path)]) == 0
    assert "wrote" in capsys.readouterr().out
    # it shows what a catalogue can share: an anchor merged into the command jobs (a key written
    # in the job winning), an `apis:` declaration used by the http jobs, a ${NAME:-default}
    hello, goodbye, orders, refunds = catalogue.jobs
    assert (hello.timeout, hello.queued_timeout) == (1800.0, 600.0)
    assert (goodbye.timeout, goodbye.queued_timeout) == (1200.0, 600.0)
    assert "merged from line" in (catalogue.source("jobs", 0, "timeout") or "")
    assert orders.backend == refunds.backend == "http"
    assert orders.base_url == refunds.base_url == "http://127.0.0.1:8766"
    assert "from apis.jobs-api" in (catalogue.source("jobs", 3, "base_url") or "")
    assert orders.submit.body == {"task": "rollup-orders", "seconds": 2}
    assert refunds.submit.body == {"task": "{label}"} and refunds.timeout == 1200.0


def test_the_starters_job_api_comes_from_the_environment_when_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "nightshift.yaml"
    assert main(["init", "--catalogue", str(path)]) == 0
    monkeypatch.setenv("JOBS_API_URL", "https://jobs.internal")
    jobs = load_catalogue(path).jobs
    assert [j.base_url for j in jobs if j.backend == "http"] == ["https://jobs.internal"] * 2


def test_init_over_an_existing_file_is_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "nightshift.yaml"
    path.write_text("mine\n")
    assert main(["init", "--catalogue", str(path), "--name", "x"]) == EXIT_BAD_CATALOGUE
    captured = capsys.readouterr()
    assert path.read_text() == "mine\n"
    assert captured.err.splitlines() == [f"nightshift init: {path} exists; nothing written"]
    assert captured.out == ""


def test_the_rough_example_is_a_night_that_fails_as_a_bad_morning_does(
    tmp_path: Path, night_loop: NightLoop
) -> None:
    """`init --example rough`: a failing job whose why is its log's last line, a chain whose
    first step fails and whose second is skipped, and jobs that succeed: a Partial night."""
    from nightshift.backends.command.backend import CommandBackend
    from nightshift.config.loader import parse_catalogue
    from nightshift.engine.admission import Admission
    from nightshift.engine.night import NightParts
    from nightshift.engine.outcomes import Outcome, Severity
    from nightshift.engine.plan import plan_night
    from nightshift.store.ledger import Ledger
    from tests.night_kit import run_night

    path = tmp_path / "nightshift.yaml"
    assert main(["init", "--example", "rough", "--catalogue", str(path)]) == 0
    assert main(["validate", "--catalogue", str(path)]) == 0
    text = path.read_text().replace("sleep 20", "sleep 0")  # the slow job, not slow here
    catalogue = parse_catalogue(text, path, environ={})
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}", catalogue.key)
    parts = NightParts(
        backends={"command": CommandBackend(tmp_path / "jobs")},  # type: ignore[dict-item]
        ledger=ledger,
        admission=Admission(0),
        sinks=[],
        budgets=None,
        poll_hints=None,
        loop=night_loop,
    )
    try:
        plan = plan_night(catalogue)
        summary = run_night(catalogue, parts, plan, night="2030-01-01", run_dir=tmp_path)
    finally:
        ledger.close()
    states = {j.label: j.state for j in summary.jobs}
    assert states == {
        "audit:links": Outcome.FAILED,
        "fetch:feeds": Outcome.FAILED,
        "publish:feeds": Outcome.SKIPPED,
        "report:daily": Outcome.SUCCEEDED,
        "rollup:orders": Outcome.SUCCEEDED,
    }
    assert summary.severity is Severity.PARTIAL
    audit = next(j for j in summary.jobs if j.label == "audit:links")
    tail = Path(audit.log_tail_path or "").read_text().splitlines()
    assert tail[-1] == "2 broken links found, failing the audit"
