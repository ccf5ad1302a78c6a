"""CommandBackend against real detached processes (no mocks)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nightshift.backends.base import Backend, ExternalState, JobSpec
from nightshift.backends.command.backend import CommandBackend
from nightshift.errors import PermanentBackendError
from tests.support import eventually, wait_final, wait_status, wait_until

PY = sys.executable


def py(code: str) -> list[str]:
    return [PY, "-c", code]


def spec(argv: list[str], label: str = "job", **options: object) -> JobSpec:
    return JobSpec(label=label, backend="command", options={"argv": argv, **options})


def pgid_of(backend: CommandBackend, job_id: str) -> int:
    path = backend.jobs_dir / job_id / "child.pid"
    wait_until(path.exists, what=f"{path}")
    return int(json.loads(path.read_text())["pid"])


def group_exists(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def group_gone(pgid: int, timeout: float = 5.0) -> bool:
    """Whether the group vanishes within ``timeout`` (orphans are reaped by init, not by us)."""
    return eventually(lambda: not group_exists(pgid), timeout)


@pytest.fixture
def backend(tmp_path: Path) -> CommandBackend:
    return CommandBackend(tmp_path / "state", kill_grace_s=0.5)


def test_is_a_backend(backend: CommandBackend) -> None:
    assert isinstance(backend, Backend)
    assert backend.name == "command"


def test_success_records_exit_zero_times_and_output(backend: CommandBackend) -> None:
    job_id = backend.submit(spec(py("print('hello'); import sys; print('oops', file=sys.stderr)")))
    assert job_id.startswith("job-")
    status = wait_final(backend, job_id)
    assert status.state is ExternalState.SUCCEEDED
    assert status.exit_code == 0
    assert status.started_at is not None and status.finished_at is not None
    assert status.started_at <= status.finished_at
    assert set(backend.logs(job_id).splitlines()) == {"hello", "oops"}


def test_nonzero_exit_is_failed_with_code(backend: CommandBackend) -> None:
    job_id = backend.submit(spec(py("raise SystemExit(3)"), label="bad job/with spaces"))
    assert job_id.startswith("bad-job-with-spaces-")
    status = wait_final(backend, job_id)
    assert (status.state, status.exit_code) == (ExternalState.FAILED, 3)


def test_cwd_and_env_are_applied_and_argv_is_not_shell_parsed(
    backend: CommandBackend, tmp_path: Path
) -> None:
    code = "import os, sys; print(os.getcwd()); print(os.environ['GREETING']); print(sys.argv[1])"
    argv = [*py(code), "$HOME; echo pwned"]
    job_id = backend.submit(spec(argv, cwd=str(tmp_path), env={"GREETING": "hi there"}))
    assert wait_final(backend, job_id).state is ExternalState.SUCCEEDED
    assert backend.logs(job_id).splitlines() == [str(tmp_path), "hi there", "$HOME; echo pwned"]


def test_relative_state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    backend = CommandBackend(".nightshift")
    job_id = backend.submit(spec(py("print('relative ok')")))
    assert wait_final(backend, job_id).state is ExternalState.SUCCEEDED
    assert backend.logs(job_id) == "relative ok"


def test_new_instance_reattaches_by_id(backend: CommandBackend, tmp_path: Path) -> None:
    job_id = backend.submit(spec(py("import time; time.sleep(0.3); print('done')")))
    other = CommandBackend(tmp_path / "state")
    assert other.status(job_id).state in (ExternalState.QUEUED, ExternalState.RUNNING)
    status = wait_final(other, job_id)
    assert status.state is ExternalState.SUCCEEDED
    assert other.logs(job_id) == "done"


def test_job_survives_its_submitter(tmp_path: Path) -> None:
    state = tmp_path / "state"
    submitter = (
        "import sys\n"
        "from nightshift.backends.base import JobSpec\n"
        "from nightshift.backends.command.backend import CommandBackend\n"
        "argv = [sys.executable, '-c', 'import time; time.sleep(1.5); print(\"finished\")']\n"
        "spec = JobSpec('orphan', 'command', {'argv': argv})\n"
        f"print(CommandBackend({str(state)!r}).submit(spec))\n"
    )
    done = subprocess.run([PY, "-c", submitter], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    backend = CommandBackend(state)
    assert backend.status(job_id).state in (ExternalState.QUEUED, ExternalState.RUNNING)
    wait_status(backend, job_id, lambda s: s.state is ExternalState.RUNNING)
    status = wait_final(backend, job_id)
    assert status.state is ExternalState.SUCCEEDED
    assert backend.logs(job_id) == "finished"


def test_cancel_kills_the_whole_process_group(backend: CommandBackend) -> None:
    # a shell with a background grandchild: both must die
    job_id = backend.submit(spec(["sh", "-c", "sleep 60 & echo started; sleep 60; wait"]))
    pgid = pgid_of(backend, job_id)
    wait_until(lambda: backend.logs(job_id) == "started", 15, "the job's first line")
    backend.cancel(job_id)
    status = wait_final(backend, job_id)
    assert status.state is ExternalState.CANCELLED
    assert status.finished_at is not None
    assert group_gone(pgid)
    backend.cancel(job_id)  # a final job is left alone
    assert backend.status(job_id).state is ExternalState.CANCELLED


def test_cancel_escalates_to_sigkill_after_grace(backend: CommandBackend) -> None:
    code = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ignoring SIGTERM', flush=True)\n"
        "time.sleep(60)\n"
    )
    job_id = backend.submit(spec(py(code)))
    pgid = pgid_of(backend, job_id)
    wait_until(lambda: "ignoring" in backend.logs(job_id), 15, "the job to ignore SIGTERM")
    started = time.monotonic()
    backend.cancel(job_id)
    assert time.monotonic() - started < 2.0  # the caller does not sit out a long grace
    status = wait_final(backend, job_id)
    assert (status.state, status.exit_code) == (ExternalState.CANCELLED, -signal.SIGKILL)
    assert group_gone(pgid)


def test_missing_executable_fails_with_reason_in_logs(backend: CommandBackend) -> None:
    job_id = backend.submit(spec(["definitely-not-a-command-4242", "--flag"]))
    status = wait_final(backend, job_id)
    assert (status.state, status.exit_code) == (ExternalState.FAILED, 127)
    assert "cannot start 'definitely-not-a-command-4242'" in backend.logs(job_id)
    assert status.detail == "exit code 127: executable 'definitely-not-a-command-4242' not found"


def test_why_a_command_could_not_start_is_in_its_detail(
    backend: CommandBackend, tmp_path: Path
) -> None:
    script = tmp_path / "not-executable.sh"
    script.write_text("echo hi\n")
    job_id = backend.submit(spec([str(script)]))
    status = wait_final(backend, job_id)
    assert status.detail == f"exit code 126: cannot run {str(script)!r}: permission denied"
    job_id = backend.submit(spec(["true"], cwd=str(tmp_path / "nowhere")))
    status = wait_final(backend, job_id)
    assert (
        status.detail == f"exit code 127: working directory {str(tmp_path / 'nowhere')!r} not found"
    )


def test_supervisor_killed_without_exit_code_is_lost(backend: CommandBackend) -> None:
    job_id = backend.submit(spec(["sleep", "30"]))
    pgid = pgid_of(backend, job_id)
    runner = json.loads((backend.jobs_dir / job_id / "runner.pid").read_text())
    try:
        os.kill(runner["pid"], signal.SIGKILL)
        status = wait_final(backend, job_id)
        assert status.state is ExternalState.FAILED
        assert status.detail == "lost: supervisor gone without an exit code"
        backend.cancel(job_id)  # still stops the orphaned child
        assert group_gone(pgid)
    finally:
        if not group_gone(pgid, timeout=0):
            os.killpg(pgid, signal.SIGKILL)


def test_logs_tail_returns_exactly_the_last_lines(backend: CommandBackend) -> None:
    code = "for i in range(1, 5001): print(f'line {i} ' + 'x' * 40)"
    job_id = backend.submit(spec(py(code)))
    wait_final(backend, job_id)
    assert backend.logs(job_id, tail=3).splitlines() == [
        f"line {i} " + "x" * 40 for i in (4998, 4999, 5000)
    ]
    assert len(backend.logs(job_id).splitlines()) == 40
    assert backend.logs(job_id, tail=0) == ""
    assert len(backend.logs(job_id, tail=10_000).splitlines()) == 5000


def test_unknown_or_malformed_ids_are_permanent_errors(backend: CommandBackend) -> None:
    with pytest.raises(PermanentBackendError, match="unknown command job"):
        backend.status("nope-12345678")
    with pytest.raises(PermanentBackendError, match="not a command job id"):
        backend.status("../etc")


def test_bad_argv_is_rejected_before_starting(backend: CommandBackend) -> None:
    with pytest.raises(PermanentBackendError, match=r"options\.argv"):
        backend.submit(spec("echo hi"))  # type: ignore[arg-type]
    assert not backend.jobs_dir.exists() or not any(backend.jobs_dir.iterdir())


def test_a_submission_key_makes_submit_idempotent(backend: CommandBackend) -> None:
    counter = backend.jobs_dir.parent / "starts.txt"
    argv = py(f"open({str(counter)!r}, 'a').write('started\\n')")
    first = backend.submit(spec(argv, label="gen:a", submission_key="2026-11-29/gen:a/1"))
    # the night crashed before recording the id; the rerun submits the same attempt again
    again = backend.submit(spec(argv, label="gen:a", submission_key="2026-11-29/gen:a/1"))
    assert again == first
    assert wait_final(backend, first).state is ExternalState.SUCCEEDED
    assert counter.read_text() == "started\n"  # one process, not two
    second_attempt = backend.submit(spec(argv, label="gen:a", submission_key="2026-11-29/gen:a/2"))
    assert second_attempt != first


def test_a_labels_job_id_uses_the_one_label_to_filename_rule(backend: CommandBackend) -> None:
    colon = backend.submit(spec(py("print('colon')"), label="gen:a"))
    underscore = backend.submit(spec(py("print('underscore')"), label="gen_a"))
    assert colon.startswith("gen+a-") and underscore.startswith("gen_a-")
    assert wait_final(backend, colon).state is ExternalState.SUCCEEDED
    assert wait_final(backend, underscore).state is ExternalState.SUCCEEDED
    assert backend.logs(colon).strip() == "colon"
    assert backend.logs(underscore).strip() == "underscore"


def test_a_failed_job_says_its_first_line_of_stderr(backend: CommandBackend) -> None:
    code = (
        "import sys; print('progress 1'); print('', file=sys.stderr); "
        "print('broken link: /about -> 404', file=sys.stderr, flush=True); "
        "print('second problem', file=sys.stderr); raise SystemExit(1)"
    )
    job_id = backend.submit(spec(py(code)))
    status = wait_final(backend, job_id)
    assert status.state is ExternalState.FAILED
    assert status.detail == "exit code 1: broken link: /about -> 404"
    # the log still has everything, stdout and stderr
    assert set(backend.logs(job_id).splitlines()) >= {"progress 1", "broken link: /about -> 404"}


def test_the_supervisor_is_one_thread_while_its_job_runs(backend: CommandBackend) -> None:
    # its job's stderr, its exit and a cancel's deadline are waited for together, in one select
    job_id = backend.submit(spec(["sh", "-c", "echo started; sleep 60"]))
    pgid = pgid_of(backend, job_id)
    wait_until(lambda: backend.logs(job_id) == "started", 15, "the job's first line")
    runner = json.loads((backend.jobs_dir / job_id / "runner.pid").read_text())
    try:
        assert os.listdir(f"/proc/{runner['pid']}/task") == [str(runner["pid"])]
        backend.cancel(job_id)
        assert wait_final(backend, job_id).state is ExternalState.CANCELLED
        assert group_gone(pgid)
    finally:
        if not group_gone(pgid, timeout=0):
            os.killpg(pgid, signal.SIGKILL)


def test_a_grandchild_holding_stderr_does_not_keep_the_job_running(
    backend: CommandBackend,
) -> None:
    # the job exits; a background child it left keeps the stderr pipe open for a minute
    job_id = backend.submit(
        spec(["sh", "-c", "echo 'bad input: row 7' >&2; sleep 60 & exit 3"], label="left")
    )
    pgid = pgid_of(backend, job_id)
    try:
        status = wait_final(backend, job_id, timeout=10)
        assert (status.state, status.exit_code) == (ExternalState.FAILED, 3)
        assert status.detail == "exit code 3: bad input: row 7"
    finally:
        if not group_gone(pgid, timeout=0):
            os.killpg(pgid, signal.SIGKILL)
