"""Job processes never inherit Nightshift's or Prefect's secrets; a job names what it needs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from nightshift.backends.base import JobSpec
from nightshift.backends.cli import CliBackend
from nightshift.backends.command.backend import CommandBackend
from nightshift.config.settings import child_environment, is_secret_variable
from tests.backends.test_backend_command import wait_final

REPO = Path(__file__).resolve().parents[2]
SECRETS = {
    "GEMINI_API_KEY": "sekrit-gemini-1111",
    "GOOGLE_API_KEY": "sekrit-google-2222",
    "NIGHTSHIFT_GEMINI_API_KEY": "sekrit-ns-gemini-3333",
    "NIGHTSHIFT_DATABASE_URL": "postgresql+psycopg://night:sekrit-pw-4444@db:5432/ledger",
    "PREFECT_API_KEY": "sekrit-prefect-5555",
    "PREFECT_API_AUTH_STRING": "admin:sekrit-auth-6666",
    "SLACK_BOT_TOKEN": "xoxb-sekrit-7777",
    "NIGHTSHIFT_SLACK_WEBHOOK": "https://hooks.slack.example/sekrit-8888",
    "MY_DB_PASSWORD": "sekrit-pw-9999",
    "REDIS_URL": "redis://user:sekrit-redis-0000@cache:6379/0",
    "AWS_SECRET_ACCESS_KEY": "sekrit-aws-1212",
    "AWS_ACCESS_KEY_ID": "sekrit-aws-id-1313",
    "SMTP_PASS": "sekrit-smtp-1414",
    "SENTRY_DSN": "https://sekrit-1515@sentry.example/1",
    "GITHUB_TOKEN": "ghp_sekrit1616",
    "PGPASSWORD": "sekrit-pg-1717",
    "OPENAI_API_KEY": "sekrit-openai-1818",
}
KEPT = {"PATH", "HOME", "LANG", "PYTHONPATH", "AGY_STATE_DIR", "PREFECT_API_URL", "TZ"}
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


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_secret_variables_are_recognised(name: str) -> None:
    assert is_secret_variable(name, SECRETS[name])


ORDINARY = {"LC_ALL", "SHELL", "AGY_TIME_SCALE", "USER", "SSH_AUTH_SOCK", "TOKENIZERS_PARALLELISM"}


@pytest.mark.parametrize("name", sorted(KEPT | ORDINARY))
def test_ordinary_variables_are_kept(name: str) -> None:
    assert not is_secret_variable(name, "/some/value")


def test_child_environment_drops_secrets_and_adds_what_the_job_names() -> None:
    parent = {**SECRETS, "PATH": "/bin", "HOME": "/root", "WANTED_TOKEN": "t0k"}
    env = child_environment(parent, {"EXTRA": "1", "GEMINI_API_KEY": "job-own"}, ["WANTED_TOKEN"])
    assert env == {
        "PATH": "/bin",
        "HOME": "/root",
        "WANTED_TOKEN": "t0k",
        "EXTRA": "1",
        "GEMINI_API_KEY": "job-own",
    }
    assert child_environment(parent, pass_env=["NOT_SET"]) == {"PATH": "/bin", "HOME": "/root"}


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


def test_the_catalogue_names_what_a_job_may_inherit(tmp_path: Path) -> None:
    from nightshift.config.loader import parse_catalogue
    from nightshift.engine.jobspec import job_spec
    from nightshift.errors import CatalogueError

    text = (
        "jobs:\n"
        "  - {label: c, backend: command, argv: [env], pass_env: [SLACK_BOT_TOKEN], env: {A: 1}}\n"
        "  - {label: g, backend: cli, task: t, pass_env: [GEMINI_API_KEY], env: {B: x}}\n"
    )
    catalogue = parse_catalogue(text, tmp_path / "n.yaml")
    assert job_spec(catalogue, "c").options["pass_env"] == ["SLACK_BOT_TOKEN"]
    assert job_spec(catalogue, "c").options["env"] == {"A": "1"}
    assert job_spec(catalogue, "g").options["pass_env"] == ["GEMINI_API_KEY"]
    assert job_spec(catalogue, "g").options["env"] == {"B": "x"}
    with pytest.raises(CatalogueError) as info:
        parse_catalogue("jobs:\n  - {label: c, backend: command, argv: [env], pass_env: [A=B]}\n")
    assert "field 'pass_env.0'" in str(info.value)
