"""Job processes never inherit Nightshift's or Prefect's secrets; a job names what it needs.

What the variables and a catalogue say; real job processes: tests/backends/test_job_secrets.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nightshift.config.settings import (
    TEMPORARY_PREFECT_API,
    child_environment,
    is_secret_variable,
    temporary_prefect_api,
)

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


def test_a_job_never_inherits_the_nights_temporary_prefect_server() -> None:
    """It dies with the night; a job (one left running after Ctrl-C too) uses its own API."""
    url = "http://127.0.0.1:40001/api"
    parent = {"PATH": "/bin", "PREFECT_API_URL": url, TEMPORARY_PREFECT_API: url}
    assert child_environment(parent) == {"PATH": "/bin"}
    assert child_environment(parent, {"PREFECT_API_URL": "http://team:4200/api"}) == {
        "PATH": "/bin",
        "PREFECT_API_URL": "http://team:4200/api",  # what the job names wins
    }
    configured = {"PATH": "/bin", "PREFECT_API_URL": "http://team:4200/api"}
    assert child_environment(configured) == configured  # a team's server: passed on as before
    assert temporary_prefect_api(url, parent) and temporary_prefect_api(None, configured)
    assert not temporary_prefect_api("http://team:4200/api", configured)


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
