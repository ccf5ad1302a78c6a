"""At-most-once ``agy run``: a lost answer or a crashed try is found in ``jobs list``, never run
again (the fake agy CLI as a real subprocess; its runs counted in its call log)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from nightshift.backends.base import JobSpec
from nightshift.backends.cli import CliBackend
from nightshift.backends.submission import resume_since
from nightshift.errors import PermanentBackendError, TransientBackendError

AGY = [sys.executable, "-m", "nightshift.sandbox.agy"]
TASK = "generate article: tides [queue=0 run=600]"
KEY_1 = "nightly/2026-11-29/article/1"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"AGY_STATE_DIR": str(tmp_path / "agy"), "AGY_CALL_LOG": str(tmp_path / "calls.jsonl")}


def spec(key: str = KEY_1, resume_since: datetime | None = None, **options: str) -> JobSpec:
    opts = {"task": TASK, "model": "gemini-test", "submission_key": key, **options}
    if resume_since is not None:
        opts["resume_since"] = resume_since.isoformat()
    return JobSpec(label="article", backend="cli", options=opts)


def runs(env: dict[str, str]) -> list[list[str]]:
    """Every ``agy run`` the fake was asked for, answered or not."""
    log = Path(env["AGY_CALL_LOG"])
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return [argv for argv in calls if argv[:1] == ["run"]]


def jobs(env: dict[str, str]) -> list[str]:
    return sorted(p.stem for p in (Path(env["AGY_STATE_DIR"]) / "jobs").glob("agy-*.json"))


def run_directly(env: dict[str, str], task: str = TASK, *extra: str) -> str:
    """What a try that crashed after ``agy run`` left behind: a job nobody recorded."""
    argv = [*AGY, "run", "--detach", "--json", "--task", task, "--model", "gemini-test", *extra]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
    return str(json.loads(out)["job_id"])


def now() -> datetime:
    return datetime.now(UTC)


def test_a_run_that_exits_75_after_creating_its_job_is_found_not_run_again(env) -> None:
    backend = CliBackend(AGY, env={**env, "AGY_LOSE_RUNS": "1"})
    job_id = backend.submit(spec())
    assert len(runs(env)) == 1
    assert jobs(env) == [job_id]


def test_a_run_that_hangs_after_creating_its_job_is_found_not_run_again(env) -> None:
    # the hung run is killed at the backend's timeout; its job was made before it hung
    lost = {**env, "AGY_LOSE_RUNS": "1", "AGY_LOSE_AS": "hang", "AGY_HANG_S": "60"}
    backend = CliBackend(AGY, timeout_s=4, env=lost)
    job_id = backend.submit(spec())
    assert len(runs(env)) == 1
    assert jobs(env) == [job_id]


def test_a_resumed_submit_finds_the_job_a_crashed_try_started(env) -> None:
    began = now()
    crashed = run_directly(env)
    backend = CliBackend(AGY, env=env)
    assert backend.submit(spec(resume_since=began)) == crashed
    assert len(runs(env)) == 1


def test_a_resumed_submit_with_nothing_to_find_runs_the_job(env) -> None:
    backend = CliBackend(AGY, env=env)
    job_id = backend.submit(spec(resume_since=now()))
    assert jobs(env) == [job_id] and len(runs(env)) == 1


def test_a_resumed_submit_ignores_jobs_from_before_it_began(env) -> None:
    earlier = run_directly(env)  # e.g. yesterday's run of the same task
    backend = CliBackend(AGY, env=env)
    job_id = backend.submit(spec(resume_since=now() + timedelta(hours=1)))
    assert job_id != earlier and len(runs(env)) == 2


def test_a_resumed_submit_ignores_other_tasks_and_models(env) -> None:
    began = now()
    run_directly(env, "another task")
    other_model = [*AGY, "run", "--detach", "--json", "--task", TASK, "--model", "other"]
    subprocess.run(other_model, env=env, capture_output=True, check=True)
    job_id = CliBackend(AGY, env=env).submit(spec(resume_since=began))
    assert len(runs(env)) == 3 and job_id in jobs(env)


def test_two_candidate_jobs_fail_the_job_saying_where_to_look(env) -> None:
    began = now()
    first, second = run_directly(env), run_directly(env)
    with pytest.raises(PermanentBackendError, match="duplicate") as info:
        CliBackend(AGY, env=env).submit(spec(resume_since=began))
    message = str(info.value)
    assert "agy jobs list" in message and first in message and second in message
    assert len(runs(env)) == 2


def test_a_lost_answer_with_no_job_to_find_is_transient(env, tmp_path) -> None:
    # an agy that fails before creating anything: the lookup finds nothing, the retry looks again
    backend = CliBackend(AGY, env={**env, "AGY_FAIL_CALLS": "1"})
    with pytest.raises(TransientBackendError, match="looks again"):
        backend.submit(spec())
    assert jobs(env) == []


def test_named_runs_are_found_by_name_among_jobs_of_the_same_task(env) -> None:
    began = now()
    run_directly(env)  # same task and model, someone else's
    crashed = run_directly(env, TASK, "--name", KEY_1)
    backend = CliBackend(AGY, env=env, names=True)
    assert backend.submit(spec(resume_since=began)) == crashed
    fresh = backend.submit(spec(key="nightly/2026-11-29/article/2"))
    assert runs(env)[-1][-2:] == ["--name", "nightly/2026-11-29/article/2"]
    assert backend.status(fresh).extra["name"] == "nightly/2026-11-29/article/2"


def test_an_unreadable_resume_since_is_permanent(env) -> None:
    bad = JobSpec("article", "cli", {"task": TASK, "resume_since": "last tuesday"})
    with pytest.raises(PermanentBackendError, match="resume_since"):
        CliBackend(AGY, env=env).submit(bad)
    assert runs(env) == []


def test_resume_since_is_read_as_utc() -> None:
    def read(value: str) -> datetime | None:
        return resume_since(JobSpec("x", "cli", {"resume_since": value}))

    assert read("2026-11-29T03:00:00") == datetime(2026, 11, 29, 3, tzinfo=UTC)
    assert read("2026-11-29T05:00:00+02:00") == datetime(2026, 11, 29, 3, tzinfo=UTC)
    assert str(read("2026-11-29T05:00:00+02:00")).endswith("+00:00")
    assert resume_since(JobSpec("x", "cli", {})) is None
