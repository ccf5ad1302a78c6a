"""The ``deployment`` backend on real parts: ``prefect server start``, a process work pool, a
``prefect worker start`` running ``sandbox/deploy_flow.py``, one of each per module."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from nightshift.backends.base import ExternalState, JobSpec
from nightshift.backends.deployment import DeploymentBackend
from nightshift.errors import PermanentBackendError, TransientBackendError
from tests.prefect_processes import PrefectSite, migrated_home, prefect_site
from tests.support import read_until, wait_final

REPO = Path(__file__).resolve().parents[2]
POOL = "nightshift-e2e"
NIGHTSHIFT = [sys.executable, "-m", "nightshift.cli.main"]
SLOW = 240  # a flow run's process takes 10-30 s to start on a busy 2-core machine


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrefectSite]:
    """One server and worker for the module; this process's Prefect client pointed at it."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    root = tmp_path_factory.mktemp("prefect-site")
    with (
        prefect_site(root, pool=POOL, worker_cwd=REPO) as found,
        temporary_settings({PREFECT_API_URL: found.api}),
    ):
        from nightshift.sandbox.deploy_flow import deploy

        deploy(POOL, "ok")
        deploy(POOL, "lost")
        yield found


class Recording(httpx.HTTPTransport):
    """A real transport that counts requests by path and can lose answers to some of them:
    the request reaches the server and does its work, the answer never comes back."""

    def __init__(self, lose: str | None = None, times: int = 0) -> None:
        super().__init__()
        self.lose, self.times = lose, times
        self.paths: Counter[str] = Counter()
        self._lock = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        response.read()
        with self._lock:
            self.paths[f"{request.method} {request.url.path.split('/api', 1)[1]}"] += 1
            losing = self.lose is not None and request.url.path.endswith(self.lose)
            if losing and self.times > 0:
                self.times -= 1
                raise httpx.ReadTimeout("the answer was lost (injected)", request=request)
        return response


def spec(label: str, key: str | None = None, **options: Any) -> JobSpec:
    options.setdefault("deployment", "sandbox-job/ok")
    if key is not None:
        options["submission_key"] = key
    return JobSpec(label=label, backend="deployment", options=options)


def test_runs_that_succeed_and_fail_are_read_in_one_call_and_reattached(site: PrefectSite) -> None:
    transport = Recording()
    backend = DeploymentBackend(httpx_settings={"transport": transport})
    try:
        ok = backend.submit(spec("ok", "e2e/n1/ok/1", parameters={"lines": 2}))
        bad = backend.submit(spec("bad", "e2e/n1/bad/1", parameters={"fail": True}))
        done = read_until(
            lambda: backend.status_many([ok, bad]),
            lambda got: all(not isinstance(s, Exception) and s.state.final for s in got.values()),
            SLOW,
            f"both runs to end; worker: {site.log_tail()}",
            interval=0.5,
        )
        before = transport.paths["POST /flow_runs/filter"]
        backend.status_many([ok, bad])
        assert transport.paths["POST /flow_runs/filter"] == before + 1  # one call for both
    finally:
        backend.close()
    won, lost = done[ok], done[bad]
    assert not isinstance(won, Exception) and not isinstance(lost, Exception)
    assert won.state is ExternalState.SUCCEEDED, won
    assert won.created_at and won.started_at and won.finished_at
    assert won.created_at <= won.started_at <= won.finished_at <= datetime.now(UTC)
    assert won.since == won.finished_at
    assert won.extra["flow_run_name"] == "ok"  # the job's label, in the UI too
    assert lost.state is ExternalState.FAILED
    assert lost.detail is not None and "sandbox job failed as asked" in lost.detail, lost.detail

    # a rerun in a new process re-attaches by flow run id alone: a new client, same answers
    again = DeploymentBackend()
    try:
        assert again.status(ok).state is ExternalState.SUCCEEDED
        logs = read_until(lambda: again.logs(ok, tail=5), lambda t: "line 2 of 2" in t, 30)
        assert len(logs.splitlines()) <= 5 and " INFO " in logs
        failed_logs = read_until(lambda: again.logs(bad), lambda t: "ValueError" in t, 30)
        assert "sandbox job failed as asked" in failed_logs
    finally:
        again.close()


def test_a_lost_answer_to_create_never_makes_a_second_run(site: PrefectSite) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterName
    from prefect.settings import PREFECT_CLIENT_MAX_RETRIES, temporary_settings

    transport = Recording(lose="/create_flow_run", times=1)
    backend = DeploymentBackend(httpx_settings={"transport": transport})
    job = spec("lost", "e2e/n1/lost/1", deployment="sandbox-job/lost")
    try:
        # no retry inside Prefect's client: the lost answer reaches the backend as it is
        with (
            temporary_settings({PREFECT_CLIENT_MAX_RETRIES: 0}),
            pytest.raises(TransientBackendError, match="same idempotency key"),
        ):
            backend.submit(job)
        # the runner's retry of the same attempt (Prefect's client retries a busy server's 503)
        first = backend.submit(job)
        assert backend.submit(job) == first
    finally:
        backend.close()
    # three creates at least (a busy server's 503 is retried by Prefect's client), one run
    creates = f"POST /deployments/{_deployment_id('sandbox-job/lost')}/create_flow_run"
    assert transport.paths[creates] >= 3
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(
            deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=["lost"]))
        )
    assert [str(r.id) for r in runs] == [first]
    # another attempt is another run
    other = DeploymentBackend()
    try:
        second = other.submit(spec("lost", "e2e/n1/lost/2", deployment="sandbox-job/lost"))
    finally:
        other.close()
    assert second != first


def _deployment_id(name: str) -> str:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return str(client.read_deployment_by_name(name).id)


def test_an_unknown_deployment_is_a_permanent_error_naming_it(site: PrefectSite) -> None:
    backend = DeploymentBackend()
    try:
        with pytest.raises(PermanentBackendError, match=r"deployment 'sandbox-job/nope' not found"):
            backend.submit(spec("x", "e2e/n1/x/1", deployment="sandbox-job/nope"))
    finally:
        backend.close()


def test_a_deployment_deleted_mid_night_is_looked_up_again_then_named(site: PrefectSite) -> None:
    from prefect.client.orchestration import get_client

    from nightshift.sandbox.deploy_flow import deploy

    deployment_id = deploy(POOL, "gone")
    backend = DeploymentBackend()
    try:
        job = spec("gone", deployment="sandbox-job/gone", parameters={"lines": 0})
        first = backend.submit(job)
        with get_client(sync_client=True) as client:
            client.delete_flow_run(first)
            client.delete_deployment(deployment_id)
        with pytest.raises(TransientBackendError, match="looks the deployment up again"):
            backend.submit(job)
        with pytest.raises(PermanentBackendError, match="'sandbox-job/gone' not found"):
            backend.submit(job)
    finally:
        backend.close()


def test_a_run_still_going_at_the_nights_deadline_is_cancelled(
    site: PrefectSite, tmp_path: Path
) -> None:
    catalogue = tmp_path / "nightshift.yaml"
    catalogue.write_text(
        "name: e2e-deadline\n"
        "defaults: {deadline: 45s, retries: 0, poll: {initial: 0.5s, max: 2s}}\n"
        "jobs:\n"
        "  - label: sleepy\n"
        "    backend: deployment\n"
        "    deployment: sandbox-job/ok\n"
        "    parameters: {seconds: 600}\n"
    )
    env = site.env | {"NIGHTSHIFT_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(REPO)}
    night = subprocess.run(
        [*NIGHTSHIFT, "run", "--catalogue", str(catalogue), "--night", "2026-01-02", "--json"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert night.returncode == 1, night.stdout + night.stderr
    summary = json.loads(night.stdout.strip().splitlines()[-1])
    (job,) = summary["jobs"]
    assert job["state"] != "succeeded" and "deadline" in job["detail"], job

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterIdempotencyKey

    key = FlowRunFilterIdempotencyKey(any_=["e2e-deadline/2026-01-02/sleepy/1"])
    with get_client(sync_client=True) as client:
        (run,) = client.read_flow_runs(flow_run_filter=FlowRunFilter(idempotency_key=key))
    backend = DeploymentBackend()
    try:
        status = wait_final(backend, str(run.id), timeout=SLOW)
        # the worker stops the process and confirms: Cancelling becomes Cancelled
        read_until(
            lambda: backend.status(str(run.id)).extra["state_type"],
            lambda t: t == "CANCELLED",
            SLOW,
            f"the run to be Cancelled; worker: {site.log_tail()}",
            interval=0.5,
        )
    finally:
        backend.close()
    assert status.state is ExternalState.CANCELLED


def test_a_night_on_the_temporary_server_runs_jobs_on_another_servers_pool(
    site: PrefectSite, tmp_path: Path
) -> None:
    catalogue = tmp_path / "nightshift.yaml"
    catalogue.write_text(
        f"name: e2e-elsewhere\ndeployment: {{api_url: {site.api}}}\n"
        "defaults: {deadline: 4m, poll: {initial: 0.5s, max: 2s}}\n"
        "jobs:\n"
        "  - {label: remote, backend: deployment, deployment: sandbox-job/ok,"
        " parameters: {lines: 1}}\n"
    )
    env = {k: v for k, v in site.env.items() if k != "PREFECT_API_URL"} | {
        # the night's own temporary server
        "PREFECT_HOME": str(migrated_home(tmp_path / "night-prefect")),
        "NIGHTSHIFT_STATE_DIR": str(tmp_path / "state"),
        "PYTHONPATH": str(REPO),
    }
    night = subprocess.run(
        [*NIGHTSHIFT, "run", "--catalogue", str(catalogue), "--night", "2026-01-03", "--json"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert night.returncode == 0, night.stdout + night.stderr
    (job,) = json.loads(night.stdout.strip().splitlines()[-1])["jobs"]
    assert job["state"] == "succeeded", job

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterIdempotencyKey

    key = FlowRunFilterIdempotencyKey(any_=["e2e-elsewhere/2026-01-03/remote/1"])
    with get_client(sync_client=True) as client:  # the site's server, not the night's
        (run,) = client.read_flow_runs(flow_run_filter=FlowRunFilter(idempotency_key=key))
    assert (run.name, run.state_type.value) == ("remote", "COMPLETED")


def test_a_traced_try_hands_its_flow_run_the_nights_trace(site: PrefectSite) -> None:
    """Its run carries the try's traceparent where Prefect keeps it: with Prefect's telemetry
    on, the run's spans join the night's trace under the try."""
    import dataclasses
    import uuid

    carried = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    backend = DeploymentBackend()
    try:
        job = dataclasses.replace(spec("traced", "e2e/n1/traced/1"), trace=carried)
        run = backend.client.read_flow_run(uuid.UUID(backend.submit(job)))
        assert run.labels["__OTEL_TRACEPARENT"] == carried
    finally:
        backend.close()
