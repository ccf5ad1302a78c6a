"""CliBackend against the fake agy CLI run as a real subprocess (no mocks)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from nightshift.backends.base import Backend, ExternalState, JobSpec, JobStatus
from nightshift.backends.cli import CliBackend
from nightshift.errors import BackendError, PermanentBackendError, TransientBackendError
from nightshift.sandbox.agy import Plan, parse_plan
from tests.support import wait_final, wait_status

AGY = [sys.executable, "-m", "nightshift.sandbox.agy"]
AGY_SCRIPT = Path(__file__).resolve().parents[2] / "sandbox" / "bin" / "agy"


def spec(task: str, model: str = "gemini-test") -> JobSpec:
    return JobSpec(label="article", backend="cli", options={"task": task, "model": model})


@pytest.fixture
def agy_env(tmp_path: Path) -> dict[str, str]:
    return {"AGY_STATE_DIR": str(tmp_path / "agy"), "AGY_TIME_SCALE": "10"}


@pytest.fixture
def backend(agy_env: dict[str, str]) -> CliBackend:
    return CliBackend(AGY, timeout_s=20, env=agy_env)


def known(value: JobStatus | BackendError) -> JobStatus:
    """A status_many value that must be a JobStatus, not a per-id error."""
    assert isinstance(value, JobStatus), value
    return value


def fake_cli(tmp_path: Path, stdout: str) -> list[str]:
    """A stand-in CLI that prints ``stdout`` whatever it is asked."""
    script = tmp_path / "fake_cli.py"
    script.write_text(f"import sys\nsys.stdout.write({stdout!r})\n")
    return [sys.executable, str(script)]


def test_is_a_backend(backend: CliBackend) -> None:
    assert isinstance(backend, Backend)
    assert backend.name == "cli"


def test_submit_status_logs_through_the_json_contract(backend: CliBackend) -> None:
    job_id = backend.submit(spec("generate article: tides [queue=0.5 run=2 exit=0]"))
    assert job_id.startswith("agy-")
    first = backend.status(job_id)
    assert first.state in (ExternalState.QUEUED, ExternalState.RUNNING, ExternalState.SUCCEEDED)
    status = wait_final(backend, job_id)
    assert (status.state, status.exit_code) == (ExternalState.SUCCEEDED, 0)
    assert status.started_at is not None and status.finished_at is not None
    assert status.started_at.tzinfo is not None
    assert status.started_at < status.finished_at
    assert status.extra["model"] == "gemini-test"
    assert backend.logs(job_id, tail=3).splitlines() == [
        "step 1/2 working on 'generate article: tides'",
        "step 2/2 working on 'generate article: tides'",
        "[agy] done",
    ]


def test_executable_wrapper_script_speaks_the_same_contract(agy_env: dict[str, str]) -> None:
    backend = CliBackend(str(AGY_SCRIPT), env=agy_env)
    job_id = backend.submit(spec("quick [queue=0 run=0]"))
    assert wait_final(backend, job_id).state is ExternalState.SUCCEEDED


def test_cancel_running_job(backend: CliBackend) -> None:
    job_id = backend.submit(spec("long one [queue=0 run=600]"))
    wait_status(backend, job_id, lambda s: s.state is ExternalState.RUNNING)
    backend.cancel(job_id)
    status = backend.status(job_id)
    assert status.state is ExternalState.CANCELLED
    assert status.finished_at is not None
    assert backend.logs(job_id, tail=1) == "[agy] cancelled"
    backend.cancel(job_id)  # cancelling a final job is a no-op
    assert backend.status(job_id).state is ExternalState.CANCELLED


def test_stuck_job_stays_queued_until_cancelled(backend: CliBackend) -> None:
    job_id = backend.submit(spec("never picked up [stuck]"))
    deadline = time.monotonic() + 0.5  # 5 s of plan time at AGY_TIME_SCALE=10
    while time.monotonic() < deadline:
        status = backend.status(job_id)
        assert status.state is ExternalState.QUEUED
        assert status.started_at is None
    backend.cancel(job_id)
    assert backend.status(job_id).state is ExternalState.CANCELLED


def test_failing_job_reports_its_exit_code(backend: CliBackend) -> None:
    job_id = backend.submit(spec("broken [queue=0 run=1 exit=3]"))
    status = wait_final(backend, job_id)
    assert (status.state, status.exit_code) == (ExternalState.FAILED, 3)
    assert status.detail == "exit code 3"
    assert backend.logs(job_id, tail=1) == "error: task failed with exit code 3"


def test_status_many_uses_one_listing(agy_env: dict[str, str], tmp_path: Path) -> None:
    calls = tmp_path / "calls.jsonl"
    backend = CliBackend(AGY, env={**agy_env, "AGY_CALL_LOG": str(calls)})
    ok = backend.submit(spec("a [queue=0 run=0]"))
    bad = backend.submit(spec("b [queue=0 run=0 exit=2]"))
    stuck = backend.submit(spec("c [stuck]"))
    backend.submit(spec("not asked about [queue=0 run=0]"))
    wait_final(backend, ok)
    wait_final(backend, bad)
    calls.unlink()
    many = backend.status_many([stuck, ok, bad, ok])
    assert [json.loads(line) for line in calls.read_text().splitlines()] == [
        ["jobs", "list", "--json"]
    ]
    assert list(many) == [stuck, ok, bad]
    assert known(many[ok]).state is ExternalState.SUCCEEDED
    assert (known(many[bad]).state, known(many[bad]).exit_code) == (ExternalState.FAILED, 2)
    assert known(many[stuck]).state is ExternalState.QUEUED
    assert backend.status_many([]) == {}


def test_status_many_ignores_off_contract_jobs_it_was_not_asked_about(
    backend: CliBackend, agy_env: dict[str, str]
) -> None:
    ok = backend.submit(spec("ours [queue=0 run=0]"))
    running = backend.submit(spec("ours too [queue=0 run=600]"))
    wait_final(backend, ok)
    foreign = {  # another user's job, in the fake's file format, pinned to an unknown state
        "job_id": "agy-foreign00001",
        "task": "someone else's",
        "model": "other",
        "created_at": time.time(),
        "queue_s": 0.0,
        "run_s": 0.0,
        "steps": 1,
        "exit_code": 0,
        "stuck": False,
        "cancelled_at": None,
        "state": "exploded",
    }
    jobs_dir = Path(agy_env["AGY_STATE_DIR"]) / "jobs"
    (jobs_dir / "agy-foreign00001.json").write_text(json.dumps(foreign))
    many = backend.status_many([ok, running])
    assert known(many[ok]).state is ExternalState.SUCCEEDED
    assert known(many[running]).state is ExternalState.RUNNING
    # asked about directly, the off-contract entry is an error for that id alone
    mixed = backend.status_many([ok, "agy-foreign00001"])
    assert isinstance(mixed[ok], JobStatus)
    assert isinstance(mixed["agy-foreign00001"], PermanentBackendError)
    assert "'exploded' is not one of" in str(mixed["agy-foreign00001"])


def test_status_many_leaves_an_unlisted_id_to_a_call_of_its_own(
    agy_env: dict[str, str], tmp_path: Path
) -> None:
    calls = tmp_path / "calls.jsonl"
    backend = CliBackend(AGY, env={**agy_env, "AGY_CALL_LOG": str(calls)})
    ok = backend.submit(spec("a [queue=0 run=0]"))
    stuck = backend.submit(spec("b [stuck]"))
    wait_final(backend, ok)
    calls.unlink()
    many = backend.status_many([ok, "agy-doesnotexist", stuck])
    assert list(many) == [ok, stuck]  # the watcher asks the unknown one on its own
    assert known(many[ok]).state is ExternalState.SUCCEEDED
    assert known(many[stuck]).state is ExternalState.QUEUED
    assert [json.loads(line) for line in calls.read_text().splitlines()] == [
        ["jobs", "list", "--json"],
    ]
    with pytest.raises(PermanentBackendError, match="not found"):
        backend.status("agy-doesnotexist")


def test_status_many_raises_only_when_the_listing_fails(agy_env: dict[str, str]) -> None:
    backend = CliBackend(AGY, env=agy_env)
    ok = backend.submit(spec("a [queue=0 run=0]"))
    wait_final(backend, ok)
    flaky = CliBackend(AGY, env={**agy_env, "AGY_FAIL_CALLS": "1"})
    with pytest.raises(TransientBackendError, match="temporarily unavailable"):
        flaky.status_many([ok, "agy-gone"])
    assert isinstance(flaky.status_many([ok])[ok], JobStatus)


def test_exit_75_is_transient_and_a_retry_succeeds(agy_env: dict[str, str]) -> None:
    backend = CliBackend(AGY, env={**agy_env, "AGY_FAIL_CALLS": "1"})
    with pytest.raises(TransientBackendError, match="temporarily unavailable"):
        backend.submit(spec("flaky [queue=0 run=0]"))
    job_id = backend.submit(spec("flaky [queue=0 run=0]"))
    assert wait_final(backend, job_id).state is ExternalState.SUCCEEDED


def test_timeout_is_transient(tmp_path: Path) -> None:
    script = tmp_path / "slow.py"
    script.write_text("import time\ntime.sleep(10)\n")
    backend = CliBackend([sys.executable, str(script)], timeout_s=0.3)
    with pytest.raises(TransientBackendError, match="timed out") as info:
        backend.status("agy-1")
    assert str(script) not in str(info.value) and sys.executable not in str(info.value)


def test_missing_executable_is_permanent_and_says_how_to_fix() -> None:
    backend = CliBackend("/nonexistent/bin/agy")
    with pytest.raises(PermanentBackendError, match="NIGHTSHIFT_AGY") as info:
        backend.submit(spec("x"))
    # the job's detail reaches Slack: the executable by its name, never the local path
    assert "'agy' not found" in str(info.value) and "/nonexistent" not in str(info.value)


def test_unknown_job_is_permanent_with_stderr(backend: CliBackend) -> None:
    with pytest.raises(PermanentBackendError, match="job 'agy-nope' not found") as info:
        backend.status("agy-nope")
    # what was called is named without local paths (the detail reaches Slack)
    assert "/" not in str(info.value).split(" exited ")[0], str(info.value)


def test_decorated_output_is_never_parsed(agy_env: dict[str, str]) -> None:
    backend = CliBackend(AGY, env={**agy_env, "AGY_IGNORE_JSON": "1"})
    with pytest.raises(PermanentBackendError, match="non-JSON output"):
        backend.submit(spec("pretty [queue=0 run=0]"))


def test_state_outside_the_contract_is_permanent(tmp_path: Path) -> None:
    job = {"job_id": "agy-1", "state": "exploded", "exit_code": None}
    backend = CliBackend(fake_cli(tmp_path, json.dumps(job)))
    with pytest.raises(PermanentBackendError, match="'exploded' is not one of"):
        backend.status("agy-1")


def test_submit_without_job_id_is_permanent(tmp_path: Path) -> None:
    backend = CliBackend(fake_cli(tmp_path, json.dumps({"state": "queued"})))
    with pytest.raises(PermanentBackendError, match="no job_id"):
        backend.submit(spec("x"))


def test_plan_directives() -> None:
    assert parse_plan("plain task") == Plan()
    assert parse_plan("x [queue=0.5 run=2 exit=3]") == Plan(0.5, 2.0, 3)
    assert parse_plan("x [stuck] [exit=1]") == Plan(stuck=True, exit_code=1)
    assert parse_plan("x [draft, run=4]") == Plan(run_s=4.0)
