"""``nightshift validate --json`` and ``--show``: the jobs as they finally are, and where each
field of one came from (its line, the ``apis:`` declaration or anchor it was merged from)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from nightshift.cli.main import main

# two job APIs, each the settings every one of its jobs would otherwise repeat
REPORTS = """\
    backend: http
    base_url: {base_url}
    auth: {{env: REPORTS_TOKEN}}
    submit: {{url: /v1/jobs, headers: {{X-Team: batch}}}}
    id_path: data.id
    status_url: "/v1/jobs/{{id}}"
    state_path: data.state
    states:
      queued: [pending]
      running: [running]
      succeeded: [done]
      failed: [error]
    cancel: {{url: "/v1/jobs/{{id}}/cancel"}}
    request_timeout: 10s
"""
EXPORTS = """\
    backend: http
    base_url: http://127.0.0.1:8766
    submit: {{url: /jobs, body: {{queue: nightly}}}}
    id_path: job_id
    status_url: "/jobs/{{id}}"
    state_path: status
    states: {{queued: [queued], running: [started], succeeded: [finished], failed: [failed]}}
    logs_url: "/jobs/{{id}}/logs"
"""
REPORTS_URL = "https://reports.internal:8443"
# one job of ten per API; {own} is what the job says itself
JOBS = [(f"reports:{n:02d}", "reports", f"task: report-{n}") for n in range(1, 11)] + [
    (f"exports:{n:02d}", "exports", f"seconds: {n}") for n in range(1, 11)
]


def declared() -> str:
    """The twenty jobs written with `apis:`: each job one line, its label, API and own body."""
    apis = "apis:\n  reports:\n" + REPORTS.format(base_url="${REPORTS_URL:-http://127.0.0.1:9}")
    apis += "  exports:\n" + EXPORTS.format()
    jobs = "".join(
        f"  - {{label: {label}, api: {api}, submit: {{body: {{{own}}}}}}}\n"
        for label, api, own in JOBS
    )
    return "name: twenty\ndefaults: {deadline: 2h}\n" + apis + "jobs:\n" + jobs


def written_out() -> str:
    """The same twenty jobs, each written in full (the environment's value written in)."""
    jobs = ""
    for label, api, own in JOBS:
        settings = (REPORTS if api == "reports" else EXPORTS).format(base_url=REPORTS_URL)
        if api == "reports":  # the job's body beside the declaration's url and headers
            settings = settings.replace("headers:", f"body: {{{own}}}, headers:")
        else:
            settings = settings.replace("{queue: nightly}", f"{{queue: nightly, {own}}}")
        jobs += f"  - label: {label}\n" + settings
    return "name: twenty\ndefaults: {deadline: 2h}\njobs:\n" + jobs


def validate_json(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> dict:
    assert main(["validate", "--catalogue", str(path), "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def twenty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("REPORTS_URL", REPORTS_URL)
    path = tmp_path / "declared.yaml"
    path.write_text(declared())
    return path


def line_of(path: Path, text: str, after: int = 0) -> int:
    """The number of the first line at or after ``after`` that holds ``text``."""
    lines = path.read_text().splitlines()
    return next(n for n, line in enumerate(lines, 1) if n >= after and text in line)


def test_apis_write_twenty_jobs_in_a_third_of_the_lines_and_mean_the_same_jobs(
    twenty: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    full = tmp_path / "full.yaml"
    full.write_text(written_out())
    short_lines, full_lines = len(declared().splitlines()), len(written_out().splitlines())
    assert short_lines * 3 <= full_lines, (short_lines, full_lines)

    declared_out, full_out = validate_json(twenty, capsys), validate_json(full, capsys)
    assert declared_out["ok"] is full_out["ok"] is True
    assert declared_out["catalogue"] == str(twenty)
    assert len(declared_out["jobs"]) == 20
    assert declared_out["jobs"] == full_out["jobs"]
    first = declared_out["jobs"][0]  # as the job finally is: merged, declared, from the env
    assert first["base_url"] == REPORTS_URL and first["request_timeout"] == 10.0
    assert first["submit"] == {
        "method": "POST",
        "url": "/v1/jobs",
        "body": {"task": "report-1"},
        "headers": {"X-Team": "batch"},
    }
    assert first["auth"]["env"] == "REPORTS_TOKEN"


def test_show_names_the_jobs_line_and_the_declarations_line(
    twenty: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", "--catalogue", str(twenty), "--show", "reports:02"]) == 0
    out = capsys.readouterr().out.splitlines()
    job_line = line_of(twenty, "label: reports:02")
    declared_at = line_of(twenty, "base_url:")
    (base_url,) = [line for line in out if line.startswith("base_url:")]
    assert base_url.startswith(f"base_url: {REPORTS_URL} ")
    assert base_url.endswith(f"# line {job_line}, from apis.reports, line {declared_at}")
    assert out[0].startswith("label: reports:02 ") and out[0].endswith(f"# line {job_line}")
    # a nested mapping key by key: the job's own body, the declaration's url
    submit = out.index(next(line for line in out if line.startswith("submit:")))
    assert out[submit].endswith(f"# line {job_line}")
    nested = out[submit + 1 :]
    url_at = line_of(twenty, "submit: {url: /v1/jobs")
    assert f"from apis.reports, line {url_at}" in next(x for x in nested if x.startswith("  url:"))
    assert any(line.startswith("    task: report-2 ") for line in nested)
    assert "request_timeout: 10s " in "\n".join(out)  # seconds as the catalogue writes them

    assert main(["validate", "--catalogue", str(twenty), "--show", "reports:02", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["label"] == "reports:02"
    assert shown["fields"]["base_url"] == {
        "value": REPORTS_URL,
        "line": job_line,
        "source": f"from apis.reports, line {declared_at}",
    }
    assert shown["fields"]["label"] == {"value": "reports:02", "line": job_line, "source": None}


def test_show_of_an_unknown_label_is_one_line_naming_the_close_ones_first(
    twenty: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", "--catalogue", str(twenty), "--show", "exprots:07"]) == 4
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert "no job 'exprots:07'" in line and str(twenty) in line
    assert line.split("known: ")[1].startswith("exports:07, ")
    assert "reports:01" in line  # every known label, the far ones last

    assert main(["validate", "--catalogue", str(twenty), "--show", "nope", "--json"]) == 4
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {"ok": False, "problems": captured.err.splitlines()}


def test_merge_keys_show_where_the_anchor_has_the_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "n.yaml"
    path.write_text(
        "x-nightly: &nightly {timeout: 30m, queued_timeout: 90s}\n"
        "jobs:\n"
        "  - label: a\n"
        "    backend: command\n"
        "    argv: [echo, a]\n"
        "    <<: *nightly\n"
        "    queued_timeout: 10m\n"
    )
    assert main(["validate", "--catalogue", str(path), "--show", "a"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out] == [
        "label",
        "backend",
        "argv",
        "timeout",
        "queued_timeout",
        "visible_within",  # what it takes from the night, after what it says
        "retries",
        "retry_delay",
    ]
    assert out[3].startswith("timeout: 30m ") and out[3].endswith("# line 6, merged from line 1")
    assert out[4].startswith("queued_timeout: 10m ") and out[4].endswith("# line 7")


def test_values_under_secret_like_keys_are_masked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "n.yaml"
    path.write_text(
        "jobs:\n"
        "  - label: a\n"
        "    backend: command\n"
        "    argv: [load, 'postgresql://night:hunter2@db/ledger']\n"
        "    env: {UPLOAD_TOKEN: hunter2, REGION: eu}\n"
        "    pass_env: [GITHUB_TOKEN]\n"
    )
    jobs = validate_json(path, capsys)["jobs"]
    assert jobs[0]["env"] == {"UPLOAD_TOKEN": "***", "REGION": "eu"}
    assert jobs[0]["argv"] == ["load", "***"]
    assert jobs[0]["pass_env"] == ["GITHUB_TOKEN"]  # a variable's name, not a secret
    assert main(["validate", "--catalogue", str(path), "--show", "a"]) == 0
    out = capsys.readouterr().out
    assert "hunter2" not in out and 'UPLOAD_TOKEN: "***"' in out and "REGION: eu" in out


def test_json_of_an_invalid_catalogue_lists_its_problems_and_exits_4(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("jobs:\n  - {label: a, api: nowhere}\n")
    assert main(["validate", "--catalogue", str(path), "--json"]) == 4
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert out["ok"] is False and len(out["problems"]) == 1
    assert out["problems"][0].startswith(f"{path}:2: job 'a': field 'api': no api 'nowhere'")
    assert out["problems"][0] in captured.err  # stderr as without --json


CASES = {
    "typo": (
        "  - {label: b, backend: command, argv: [echo], depend_on: [a]}\n",
        "job 'b': field 'depend_on': unknown key; did you mean depends_on?",
    ),
    "a job's retries": (
        "  - {label: b, backend: command, argv: [echo], retries: 3}\n",
        "job 'b': field 'retries': unknown key here: retries is set for the whole night, "
        "under defaults: (defaults.retries)",
    ),
    "a job's schedule": (
        "  - {label: b, backend: cli, task: x, schedule: '0 2 * * *'}\n",
        "job 'b': field 'schedule': unknown key: one schedule starts the whole night: set it on "
        "the nightly deployment in prefect.yaml",
    ),
    "argv as a string": (
        "  - {label: b, backend: command, argv: 'cat a | wc -l'}\n",
        "job 'b': field 'argv': argv is a list, one item per argument: argv: [sh, -c, \"a | b\"]",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_mistake_that_would_fail_at_2am_is_one_line_naming_the_fix(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body, said = CASES[case]
    path = tmp_path / "nightshift.yaml"
    path.write_text("name: t\njobs:\n  - {label: a, backend: command, argv: [echo]}\n" + body)
    assert main(["validate", "--catalogue", str(path)]) == 4
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if said in line]
    assert len(lines) == 1 and lines[0].startswith(f"  {path}:4: "), err


def test_a_missing_program_or_script_is_a_warning_and_an_error_with_strict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "nightshift.yaml"
    path.write_text(
        "name: t\njobs:\n"
        "  - {label: a, backend: command, argv: [no-such-program-here, x]}\n"
        "  - {label: b, backend: command, argv: [python3, scripts/audit.py]}\n"
        "  - {label: c, backend: command, argv: [python3, out/made.py], depends_on: [b]}\n"
        "  - {label: d, backend: command, argv: [sh, -c, 'echo | wc -l']}\n"
    )
    assert main(["validate", "--catalogue", str(path)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"warning: {path}:3: job 'a': field 'argv': no-such-program-here is not a program on "
        "PATH here (the worker's PATH may differ)",
        f"warning: {path}:4: job 'b': field 'argv': script scripts/audit.py does not exist "
        f"(from {tmp_path})",
        f"warning: {path}:5: job 'c': field 'argv': script out/made.py does not exist "
        f"(from {tmp_path}); an earlier step may write it",
    ]
    assert main(["validate", "--catalogue", str(path), "--strict"]) == 4
    assert "invalid catalogue (--strict):" in capsys.readouterr().err
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "audit.py").write_text("print(1)\n")
    assert main(["validate", "--catalogue", str(path)]) == 0
    assert "scripts/audit.py" not in capsys.readouterr().err


def test_show_says_what_a_job_inherits_from_the_night(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "nightshift.yaml"
    path.write_text(
        "name: t\ndefaults: {queued_timeout: 5m}\njobs:\n"
        "  - {label: a, backend: cli, task: 'summarize {key} now'}\n"
    )
    assert main(["validate", "--catalogue", str(path), "--show", "a"]) == 0
    out = capsys.readouterr().out
    assert "task: summarize {key} now" in out  # a placeholder is not a secret
    assert re.search(r"queued_timeout: 5m +# line 2, from defaults", out), out
    assert re.search(r"retries: 2 +# the default", out), out
    assert "# none: the night's deadline (1h00m) bounds it" in out


def test_show_masks_secrets_but_not_the_nights_own_placeholders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "nightshift.yaml"
    path.write_text(
        "name: t\njobs:\n  - label: a\n    backend: http\n    base_url: http://127.0.0.1:8766\n"
        '    submit: {url: /jobs, body: {key: "{key}", api_key: "s3cr3t"}}\n'
        "    id_path: job_id\n    status_url: /jobs/{id}\n    state_path: status\n"
        "    states: {queued: [q], running: [r], succeeded: [s], failed: [f]}\n"
    )
    assert main(["validate", "--catalogue", str(path), "--show", "a"]) == 0
    out = capsys.readouterr().out
    assert 'key: "{key}"' in out and 'api_key: "***"' in out and "s3cr3t" not in out
