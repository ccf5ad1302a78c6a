"""``nightshift`` as an engineer uses it: exit codes, --json, refusals, deployments."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from nightshift.cli.main import main
from nightshift.config.loader import load_catalogue
from nightshift.config.settings import load_settings
from nightshift.loop import NightLoop
from nightshift.store.lease import Lease
from nightshift.store.ledger import Ledger

REPO = Path(__file__).resolve().parents[2]
CATALOGUE = """\
name: cli-test
defaults: {poll: {initial: 0.2s, max: 1s}, stagger: 0s}
jobs:
  - {label: "hello", backend: command, argv: [%(py)s, -c, "print('hello')"]}
  - {label: "gen:a", backend: cli, task: "a [run=0.2]"}
  - {label: "broken", backend: command, argv: [%(py)s, -c, "raise SystemExit(4)"]}
"""


@pytest.fixture
def catalogue(sandbox: Path) -> Path:
    path = sandbox / "nightshift.yaml"
    path.write_text(CATALOGUE % {"py": json.dumps(sys.executable)})
    return path


@pytest.mark.usefixtures("prefect_server")
def test_run_json_prints_one_summary_object(catalogue: Path, capsys) -> None:
    code = main(["run", "--catalog", str(catalogue), "--json"])
    out = capsys.readouterr().out
    summary = json.loads(out)  # stdout is nothing but the object
    assert code == 2 == summary["exit_code"]
    assert summary["severity"] == "partial"
    jobs = {job["label"]: job for job in summary["jobs"]}
    assert set(jobs) == {"hello", "gen:a", "broken"}
    keys = {"label", "state", "duration_s", "external_id", "attempts", "log_tail_path"}
    assert keys <= set(jobs["broken"])
    assert jobs["broken"]["state"] == "failed"
    assert Path(jobs["broken"]["log_tail_path"]).exists()
    assert jobs["hello"]["log_tail_path"] is None


@pytest.mark.usefixtures("prefect_server")
def test_only_runs_the_named_jobs(catalogue: Path, capsys) -> None:
    assert main(["run", "--catalog", str(catalogue), "--only", "hello", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert [job["label"] for job in summary["jobs"]] == ["hello"]


@pytest.mark.usefixtures("prefect_server")
def test_run_reads_and_plans_the_catalogue_once(
    catalogue: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    import nightshift.config.loader as loader
    import nightshift.orchestration.prepared_night as prepared_night

    parsed: list[object] = []
    planned: list[object] = []
    real_parse, real_plan = loader.parse_catalogue, prepared_night.plan_night

    def parse_catalogue(*args: object) -> object:
        parsed.append(args)
        return real_parse(*args)  # type: ignore[arg-type]

    def plan_night(*args: object) -> object:
        planned.append(args)
        return real_plan(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(loader, "parse_catalogue", parse_catalogue)
    monkeypatch.setattr(prepared_night, "plan_night", plan_night)
    assert main(["run", "--catalog", str(catalogue), "--only", "hello", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["exit_code"] == 0
    # the CLI's checks and the flow share one prepared night
    assert len(parsed) == 1 and len(planned) == 1


@pytest.mark.usefixtures("prefect_server")
def test_a_second_night_is_refused_while_the_first_holds_the_lease(
    catalogue: Path, capsys, night_loop: NightLoop
):
    ledger = Ledger(load_settings().ledger_url())
    with Lease(ledger.engine, "cli-test", owner="other-host:123:abcd", loop=night_loop):
        code = main(["run", "--catalog", str(catalogue)])
    assert code == 3
    err = capsys.readouterr().err
    assert "another night of 'cli-test' is running (host other-host, pid 123)" in err
    assert "Traceback" not in err
    assert not (Path(load_settings().state_dir) / "jobs").exists()  # nothing was submitted


def test_bad_catalogue_exits_4_naming_file_line_job_and_field(sandbox: Path, capsys) -> None:
    path = sandbox / "bad.yaml"
    path.write_text("jobs:\n  - label: gen:a\n    backend: cli\n    task: x\n    modle: y\n")
    assert main(["run", "--catalog", str(path)]) == 4
    err = capsys.readouterr().err
    assert f"{path}:5: job 'gen:a': field 'modle': unknown key" in err
    assert main(["validate", "--catalog", str(path)]) == 4


def test_unknown_only_label_exits_4(catalogue: Path, capsys) -> None:
    assert main(["run", "--catalog", str(catalogue), "--only", "nope"]) == 4
    assert "unknown job label(s): nope" in capsys.readouterr().err


def test_the_example_catalogue_is_valid() -> None:
    catalogue = load_catalogue(REPO / "nightshift.example.yaml")
    assert {j.backend for j in catalogue.jobs} == {"cli", "command", "gemini_batch"}


def test_night_must_be_a_date(catalogue: Path, capsys) -> None:
    assert main(["run", "--catalog", str(catalogue), "--night", "../elsewhere"]) == 4
    assert "--night must be a date like 2026-11-29" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [[], ["run", "--bogus"], ["validate", "extra"], ["frobnicate"]])
def test_usage_errors_have_their_own_exit_code_not_partial(argv: list[str], capsys) -> None:
    with pytest.raises(SystemExit) as info:
        code = main(argv)
        raise SystemExit(code)
    assert info.value.code == 64
    assert "usage: nightshift" in capsys.readouterr().err


def test_help_lists_every_exit_code(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for code in ("0 ", "1 ", "2 ", "3 ", "4 ", "5 ", "6 ", "64 "):
        assert f"\n  {code}" in out


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_binary_catalogue_is_one_line_and_exit_4(command: str, sandbox: Path, capsys) -> None:
    path = sandbox / "bin.yaml"
    path.write_bytes(b"jobs: []\n\x00\xff\xfe binary")
    assert main([command, "--catalog", str(path)]) == 4
    err = capsys.readouterr().err
    assert f"{path}:2: not UTF-8 text (a binary file?): invalid byte 0xff at column 2" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+psycopg://night:hunter2-pw@127.0.0.1:1/ledger",
        "not a url hunter2-pw",
        "sqlite:////proc/no-such-dir/hunter2-pw/x.db",
    ],
)
def test_a_ledger_that_cannot_be_opened_is_one_line_and_exit_6(
    url: str, catalogue: Path, monkeypatch, capsys
) -> None:
    monkeypatch.setenv("NIGHTSHIFT_DATABASE_URL", url)
    assert main(["run", "--catalog", str(catalogue)]) == 6
    err = capsys.readouterr().err
    (line,) = err.splitlines()
    assert line.startswith("cannot open the ledger database ")
    if "//night:" in url:
        assert "hunter2-pw" not in line and "night:***@127.0.0.1:1" in line


def test_validate_checks_the_batch_inputs_the_catalogue_names(sandbox: Path, capsys) -> None:
    good = json.dumps({"key": "a", "request": {"contents": [{"parts": [{"text": "hi"}]}]}})
    (sandbox / "in.jsonl").write_text(good + "\n" + '{"key": "b"}\n')
    path = sandbox / "n.yaml"
    batch = "  - {label: %s, backend: gemini_batch, model: m, input: %s, output: %s.jsonl%s}\n"
    path.write_text(
        "jobs:\n"
        + batch % ("r:a", "in.jsonl", "a", "")
        + "  - {label: make, backend: command, argv: [x]}\n"
        + batch % ("r:b", "later.jsonl", "b", ", depends_on: [make]")
    )
    assert main(["validate", "--catalog", str(path)]) == 4
    err = capsys.readouterr().err
    assert f"{sandbox / 'in.jsonl'}:2: job 'r:a': missing 'request' object" in err
    assert f"{sandbox / 'later.jsonl'}: job 'r:b': not there yet" in err
    (sandbox / "in.jsonl").write_text(good + "\n")
    assert main(["validate", "--catalog", str(path)]) == 0


def test_validate_warns_of_a_job_that_outlives_its_schedule_and_passes(
    sandbox: Path, capsys
) -> None:
    path = sandbox / "n.yaml"
    path.write_text(
        "defaults: {deadline: 25h}\njobs:\n  - {label: a, backend: command, argv: [x]}\n"
    )
    assert main(["validate", "--catalog", str(path)]) == 0
    captured = capsys.readouterr()
    assert f"{path}:3: job 'a': warning: can run for up to 25h00m" in captured.err
    assert "assumed daily" in captured.err
    assert captured.out == f"{path}: ok, 1 jobs\n"
