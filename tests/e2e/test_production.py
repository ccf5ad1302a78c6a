"""The path a team deploys, end to end on real parts: a Prefect server on PostgreSQL, a work
pool, a process worker, ``prefect deploy --all``, a failing night, a collision, a UI-style retry,
then the watchdog and budgets deployments. Everything it starts is stopped, whatever happens.

Needs the machine's PostgreSQL (NIGHTSHIFT_TEST_POSTGRES_URL); skipped without it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.support import wait_until

REPO = Path(__file__).resolve().parents[2]
SKIP = shutil.ignore_patterns(".venv", ".git", ".nightshift", "__pycache__", ".*_cache", ".tools")
PY = sys.executable

CATALOGUE = """\
name: e2e-production
defaults: {poll: {initial: 0.2s, factor: 2, max: 1s}, deadline: 120s}
jobs:
  - {label: slow-ok, backend: command, argv: [%(py)s, %(jobs)s/job.py, slow-ok, "15"]}
  - {label: flaky, backend: command, argv: [%(py)s, %(jobs)s/job.py, flaky, "0"]}
"""
# each run leaves a mark; `flaky` fails until the file `fixed` exists
JOB = """\
import pathlib, sys, time
marks = pathlib.Path(__file__).parent
with (marks / sys.argv[1]).open("a") as f:
    f.write("x")
time.sleep(float(sys.argv[2]))
sys.exit(0 if sys.argv[1] != "flaky" or (marks / "fixed").exists() else 3)
"""

pytestmark = pytest.mark.skipif(
    not os.environ.get("NIGHTSHIFT_TEST_POSTGRES_URL"),
    reason="NIGHTSHIFT_TEST_POSTGRES_URL is not set (the server runs on PostgreSQL)",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(process: subprocess.Popen[bytes]) -> None:
    """The process and everything it started (its own process group)."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(20)


@pytest.fixture
def database() -> Iterator[str]:
    """A database of its own on the machine's PostgreSQL, dropped afterwards."""
    import sqlalchemy as sa

    admin = sa.create_engine(
        os.environ["NIGHTSHIFT_TEST_POSTGRES_URL"], isolation_level="AUTOCOMMIT"
    )
    name = f"ns_e2e_{uuid.uuid4().hex[:10]}"
    with admin.connect() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {name}"))
    url = admin.url.set(database=name)
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(
                sa.text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :d"
                ),
                {"d": name},
            )
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name}"))
        admin.dispose()


class Site:
    """The deployed checkout, the server's URL and how to run the prefect CLI against it."""

    def __init__(self, root: Path, api: str, env: dict[str, str]) -> None:
        self.root, self.api, self.env = root, api, env
        self.marks = root / "marks"

    def prefect(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [PY, "-m", "prefect", "--no-prompt", *args],
            cwd=self.root / "checkout",
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    def log_tail(self, lines: int = 60) -> str:
        """The worker's last lines (the flow runs' logs), for a failure's message."""
        path = self.root / "worker.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def count(self, label: str) -> int:
        path = self.marks / label
        return len(path.read_text()) if path.exists() else 0


@pytest.fixture
def site(tmp_path: Path, database: str) -> Iterator[Site]:
    port = _free_port()
    api = f"http://127.0.0.1:{port}/api"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("NIGHTSHIFT_", "PREFECT_"))}
    env = base | {
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_API_URL": api,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_WORKER_QUERY_SECONDS": "1",
        "NIGHTSHIFT_STATE_DIR": str(tmp_path / "state"),
        "NIGHTSHIFT_DATABASE_URL": database.replace("postgresql://", "postgresql+psycopg://"),
        "PYTHONPATH": str(tmp_path / "checkout"),
    }
    server_env = env | {
        "PREFECT_API_DATABASE_CONNECTION_URL": database.replace(
            "postgresql+psycopg://", "postgresql+asyncpg://"
        ).replace("postgresql://", "postgresql+asyncpg://"),
        "PREFECT_UI_API_URL": api,
    }
    shutil.copytree(REPO, tmp_path / "checkout", ignore=SKIP)
    found = Site(tmp_path, api, env)
    found.marks.mkdir()
    (found.marks / "job.py").write_text(JOB)
    (tmp_path / "checkout" / "nightshift.yaml").write_text(
        CATALOGUE % {"py": PY, "jobs": found.marks}
    )
    with ExitStack() as stack:
        logs = stack.enter_context((tmp_path / "server.log").open("wb"))
        server = subprocess.Popen(
            [PY, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
            env=server_env,
            stdout=logs,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        stack.callback(_stop, server)
        wait_until(lambda: _healthy(api), 180, "the Prefect server to answer", interval=0.5)
        created = found.prefect("work-pool", "create", "nightshift", "--type", "process")
        assert created.returncode == 0, created.stdout + created.stderr
        deployed = found.prefect("deploy", "--all")
        assert deployed.returncode == 0, deployed.stdout + deployed.stderr
        worker_log = stack.enter_context((tmp_path / "worker.log").open("wb"))
        worker = subprocess.Popen(
            [PY, "-m", "prefect", "worker", "start", "--pool", "nightshift"],
            cwd=tmp_path / "checkout",
            env=env,
            stdout=worker_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        stack.callback(_stop, worker)
        stack.enter_context(_client_settings(api))
        yield found


def _healthy(api: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{api}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _client_settings(api: str) -> Any:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    return temporary_settings({PREFECT_API_URL: api})


def _run(name: str) -> Any:
    from prefect.deployments import run_deployment

    return run_deployment(name, timeout=0)


def _state(run_id: Any) -> Any:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return client.read_flow_run(run_id).state


def _until(run_id: Any, done: Callable[[Any], bool], what: str, timeout: float = 240) -> Any:
    wait_until(lambda: done(_state(run_id)), timeout, what, interval=0.5)
    return _state(run_id)


def _final(state: Any) -> bool:
    return state is not None and state.is_final()


def test_a_deployed_night_fails_honestly_collides_and_retries_only_what_failed(
    site: Site,
) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        FlowRunFilter,
        FlowRunFilterId,
    )
    from prefect.states import AwaitingRetry

    first = _run("nightly/nightly-batch-daily")
    _until(first.id, lambda s: s is not None and s.is_running(), "the first night to run")
    # a second night while the first runs: the deployment's limit cancels it (CANCEL_NEW)
    second = _run("nightly/nightly-batch-daily")
    assert _until(second.id, _final, "the second night to be refused").is_cancelled()

    state = _until(first.id, _final, "the first night to end")
    assert state.is_failed(), state
    with get_client(sync_client=True) as client:
        this_run = ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[first.id]))
        found = client.read_artifacts(artifact_filter=this_run)
        artifacts = {a.key for a in found}
        tasks = client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[first.id]))
        )
    assert "nightly-summary" in artifacts, ([(a.key, a.type) for a in found], site.log_tail())
    job_runs = [t for t in tasks if "slow-ok" in t.name or "flaky" in t.name]
    assert len(job_runs) == 2, [t.name for t in tasks]
    assert (site.count("slow-ok"), site.count("flaky")) == (1, 1)

    # the UI's Retry: the same flow run, scheduled again; only the failed job runs again
    (site.marks / "fixed").write_text("")
    with get_client(sync_client=True) as client:
        client.set_flow_run_state(first.id, AwaitingRetry(), force=True)
    state = _until(first.id, lambda s: _final(s) and s.name != "AwaitingRetry", "the retry")
    assert state.is_completed(), state
    assert (site.count("slow-ok"), site.count("flaky")) == (1, 2)

    # the watchdog and the budgets deployments run once
    for name in (
        "watchdog/watchdog",
        "budgets/budgets-weekly",
        "ledger-retention/ledger-retention-daily",
    ):
        run = _run(name)
        assert _until(run.id, _final, f"{name} to end").is_completed(), name
