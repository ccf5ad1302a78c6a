"""Job processes never inherit Nightshift's or Prefect's secrets: real command and CLI jobs.

Not in the unit layer (tests/unit/test_secrets.py): each test starts Python processes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from nightshift.backends.base import JobSpec
from nightshift.backends.cli import CliBackend
from nightshift.backends.command.backend import CommandBackend
from tests.backends.test_backend_command import wait_final
from tests.unit.test_secrets import KEPT, SECRETS

REPO = Path(__file__).resolve().parents[2]
DUMP_ENV = "import json, os; print(json.dumps(dict(os.environ)))"


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, str]:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    for name in KEPT:
        monkeypatch.setenv(name, {"PATH": "/usr/bin:/bin"}.get(name, f"keep-{name}"))
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:/usr/bin:/bin")
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.setenv("AGY_STATE_DIR", str(tmp_path / "agy"))
    return SECRETS


def test_a_command_job_sees_no_secret_but_what_it_names(
    secret_env: dict[str, str], tmp_path: Path
) -> None:
    backend = CommandBackend(tmp_path / "state")
    spec = JobSpec(
        "dump",
        "command",
        {"argv": [sys.executable, "-c", DUMP_ENV], "pass_env": ["SLACK_BOT_TOKEN"]},
    )
    job_id = backend.submit(spec)
    assert wait_final(backend, job_id).exit_code == 0
    log = (backend.jobs_dir / job_id / "output.log").read_text()
    seen = json.loads(log)
    assert seen["SLACK_BOT_TOKEN"] == SECRETS["SLACK_BOT_TOKEN"]  # named: it arrives
    for name, value in SECRETS.items():
        if name != "SLACK_BOT_TOKEN":
            assert value not in log, name
            assert value not in backend.logs(job_id), name
    assert set(seen) >= KEPT
    spec_file = (backend.jobs_dir / job_id / "spec.json").read_text()
    assert not any(value in spec_file for value in SECRETS.values())


def _env_dumping_agy(tmp_path: Path) -> tuple[Path, Path]:
    """The fake agy, writing the environment of each call as a JSON line first."""
    dumps = tmp_path / "cli-env.jsonl"
    wrapper = tmp_path / "agy-dump"
    wrapper.write_text(
        "import json, os, sys\n"
        f"with open({str(dumps)!r}, 'a') as f:\n"
        "    f.write(json.dumps(dict(os.environ)) + '\\n')\n"
        "from nightshift.sandbox.agy import main\n"
        "raise SystemExit(main())\n"
    )
    return dumps, wrapper


def test_the_job_cli_gets_what_the_catalogue_cli_section_names_on_every_call(
    secret_env: dict[str, str], tmp_path: Path
) -> None:
    from nightshift.backends import build_backends
    from nightshift.config.loader import parse_catalogue
    from nightshift.config.settings import load_settings
    from nightshift.engine.jobspec import job_spec

    dumps, wrapper = _env_dumping_agy(tmp_path)
    catalogue = parse_catalogue(
        f"cli: {{executable: {sys.executable} {wrapper}, pass_env: [GEMINI_API_KEY]}}\n"
        "jobs:\n  - {label: g, backend: cli, task: 't [run=0]'}\n",
        tmp_path / "n.yaml",
    )
    backend = build_backends(catalogue, load_settings())["cli"]
    backend.status(backend.submit(job_spec(catalogue, "g")))
    calls = [json.loads(line) for line in dumps.read_text().splitlines()]
    assert len(calls) == 2
    for seen in calls:
        assert seen["GEMINI_API_KEY"] == SECRETS["GEMINI_API_KEY"]
        assert "PREFECT_API_KEY" not in seen and "NIGHTSHIFT_DATABASE_URL" not in seen


def test_the_job_cli_sees_no_secret_but_what_the_job_names(
    secret_env: dict[str, str], tmp_path: Path
) -> None:
    dumps, wrapper = _env_dumping_agy(tmp_path)
    backend = CliBackend([sys.executable, str(wrapper)], timeout_s=20)
    options = {"task": "t [run=0]", "pass_env": ["GEMINI_API_KEY"], "env": {"JOB_VAR": "x"}}
    job_id = backend.submit(JobSpec("gen", "cli", options))
    backend.status(job_id)
    submit_env, status_env = (json.loads(line) for line in dumps.read_text().splitlines())
    assert submit_env["GEMINI_API_KEY"] == SECRETS["GEMINI_API_KEY"]
    assert submit_env["JOB_VAR"] == "x"
    assert submit_env["AGY_STATE_DIR"] == str(tmp_path / "agy")
    for name, value in SECRETS.items():
        assert value not in json.dumps(status_env), name
        if name != "GEMINI_API_KEY":
            assert value not in json.dumps(submit_env), name
