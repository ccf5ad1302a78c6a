"""How a night ends when something around its jobs breaks: a backend, the lease, Prefect."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import nightshift.engine.steps as steps_module
import nightshift.orchestration.night_run as night_run
from nightshift.config.settings import load_settings
from nightshift.errors import LockHeldError
from nightshift.flows.nightly import nightly
from nightshift.loop import NightLoop
from nightshift.orchestration.night_setup import stop_reason
from nightshift.store.lease import Lease
from nightshift.store.ledger import Ledger
from tests.support import FakeClock

pytestmark = pytest.mark.usefixtures("prefect_server")

PY = json.dumps(sys.executable)
HEADER = """\
name: edges
defaults: {poll: {initial: 0.2s, max: 0.5s}, stagger: 0s, deadline: %(deadline)s}
jobs:
"""


def command(label: str, extra: str = "") -> str:
    return f"  - {{label: '{label}', backend: command, argv: [{PY}, -c, 'print(1)']{extra}}}\n"


def write(sandbox: Path, body: str, deadline: str = "60s", head: str = "") -> Path:
    path = sandbox / "nightshift.yaml"
    path.write_text(head + HEADER % {"deadline": deadline} + body)
    return path


def summary_of(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "summary.json").read_text())


def jobs_of(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {job["label"]: job for job in summary["jobs"]}


def artifacts_of(state: Any) -> dict[str, Any]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    only_this_run = ArtifactFilter(
        flow_run_id=ArtifactFilterFlowRunId(any_=[state.state_details.flow_run_id])
    )
    with get_client(sync_client=True) as client:
        return {a.type: a for a in client.read_artifacts(artifact_filter=only_this_run)}


def night_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("nightshift-")]


def test_a_backend_that_cannot_be_built_fails_only_its_own_jobs(
    sandbox: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("GEMINI_API_KEY", "NIGHTSHIFT_GEMINI_API_KEY", "NIGHTSHIFT_GEMINI_API_KEY_BLOCK"):
        monkeypatch.delenv(name, raising=False)
    (sandbox / "rows.jsonl").write_text(
        '{"key": "a", "request": {"contents": [{"parts": [{"text": "hi"}]}]}}\n'
    )
    gemini = (
        "  - {label: 'report:a', backend: gemini_batch, model: gemini-2.5-flash, "
        "input: rows.jsonl, output: out/a.jsonl}\n"
    )
    body = (
        command("hello")
        + "  - {label: 'gen:a', backend: cli, task: 'a [run=0.1]'}\n"
        + gemini
        + command("publish", ", depends_on: ['report:a']")
    )
    run_dir = sandbox / "run"
    state = nightly(catalog=str(write(sandbox, body)), run_dir=str(run_dir), return_state=True)

    assert state.is_failed()
    jobs = jobs_of(summary_of(run_dir))
    assert {label: job["state"] for label, job in jobs.items()} == {
        "hello": "succeeded",
        "gen:a": "succeeded",
        "report:a": "failed",
        "publish": "skipped",
    }
    assert "gemini_batch backend could not be built" in jobs["report:a"]["detail"]
    assert "no Gemini API key" in jobs["report:a"]["detail"]
    assert summary_of(run_dir)["exit_code"] == 2


def test_a_refused_night_leaves_a_summary_saying_why(sandbox: Path, night_loop: NightLoop) -> None:
    path = write(sandbox, command("hello"))
    ledger = Ledger(load_settings().ledger_url())
    run_dir = sandbox / "run"
    with Lease(ledger.engine, "edges", owner="other-host:1:abcd", loop=night_loop):
        state = nightly(catalog=str(path), run_dir=str(run_dir), return_state=True)

    assert isinstance(state.result(raise_on_failure=False), LockHeldError)  # the CLI's exit 3
    summary = summary_of(run_dir)
    assert summary["exit_code"] == 3
    holder = "is running (host other-host, pid 1)"  # the owner as people read it
    assert holder in summary["reason"]
    (hello,) = summary["jobs"]
    assert hello["state"] == "failed" and holder in hello["detail"]
    assert ledger.get_job(summary["started_at"][:10], "hello") is None  # not the refused night's
    table = artifacts_of(state)["table"]
    assert holder in (table.description or "")


def test_a_failed_prefect_limit_call_leaves_a_summary_and_no_threads(
    sandbox: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unreachable(limits: dict[str, int], *_: Any, **__: Any) -> Any:
        raise ConnectionError("Prefect API unreachable (injected)")

    monkeypatch.setattr(night_run, "night_slots", unreachable)
    path = write(sandbox, command("hello"), head="limits: {command: 1}\n")
    before = night_threads()
    run_dir = sandbox / "run"
    state = nightly(catalog=str(path), run_dir=str(run_dir), return_state=True)

    assert state.is_failed()
    summary = summary_of(run_dir)
    assert "Prefect concurrency limit" in summary["reason"]
    assert "Prefect API unreachable (injected)" in summary["reason"]
    assert summary["exit_code"] == 1
    assert jobs_of(summary)["hello"]["state"] == "failed"
    assert night_threads() == before  # no watcher, no status pool left behind


def test_a_job_task_that_fails_before_the_runner_does_not_hold_back_its_backend(
    sandbox: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = steps_module.begin_job  # the runner's first step, as the job task runs it
    broke: list[str] = []

    async def breaks_first(ctx: Any, label: str, pool: Any, attempt: int = 1) -> Any:
        if label == "first":
            broke.append(label)
            raise RuntimeError("the task broke before the runner (injected)")
        return await real(ctx, label, pool, attempt)

    monkeypatch.setattr(steps_module, "begin_job", breaks_first)
    body = command("first") + command("second") + command("third")
    path = write(sandbox, body, deadline="20s", head="limits: {command: 1}\n")
    run_dir = sandbox / "run"
    nightly(catalog=str(path), run_dir=str(run_dir), return_state=True)

    assert broke == ["first"]  # the fault was injected
    jobs = jobs_of(summary_of(run_dir))
    assert jobs["first"]["state"] == "failed"
    assert "the task broke before the runner" in jobs["first"]["detail"]
    # before the fix both waited for 'first' to ask for its slot until the deadline
    assert (jobs["second"]["state"], jobs["third"]["state"]) == ("succeeded", "succeeded")


def test_a_night_that_ends_failed_does_not_raise_in_the_engine(sandbox: Path) -> None:
    """A worker runs flows with return_type="result": a raise there logs a traceback."""
    from prefect.flow_engine import run_flow

    body = command("good") + f"  - {{label: bad, backend: command, argv: [{PY}, -c, 'exit(3)']}}\n"
    path = write(sandbox, body)
    run_dir = sandbox / "run"
    parameters = {"catalog": str(path), "run_dir": str(run_dir)}
    result = run_flow(nightly, parameters=parameters, return_type="result")  # must not raise
    assert summary_of(run_dir)["exit_code"] == 2
    # the flow run is Failed: the night's own state (named by its verdict) and the jobs'
    assert [(s.type.value, s.name) for s in result] == [
        ("FAILED", "Partial"),
        ("COMPLETED", "Completed"),
        ("FAILED", "Failed"),
    ]


def test_a_chain_is_one_subflow_run_named_by_its_night_and_steps_with_the_run_tags(
    sandbox: Path,
) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from prefect.flow_engine import run_flow

    body = (
        command("solo")
        + command("fetch")
        + command("link", ", depends_on: [fetch]")
        + command("publish", ", depends_on: [link]")
    )
    path = write(sandbox, body)
    parameters = {"catalog": str(path), "run_dir": str(sandbox / "run")}
    with get_client(sync_client=True) as client:
        # as a deployment's run is made: the deployment's tags on the flow run only
        flow_run = client.create_flow_run(nightly, parameters=parameters, tags=["nightshift"])
    state = run_flow(nightly, flow_run=flow_run, parameters=parameters, return_type="state")
    assert state.is_completed()

    this_run = FlowRunFilter(id=FlowRunFilterId(any_=[flow_run.id]))
    with get_client(sync_client=True) as client:
        task_runs = client.read_task_runs(flow_run_filter=this_run)
        (chain,) = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(parent_flow_run_id={"any_": [flow_run.id]})
        )
        steps = client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[chain.id]))
        )
        night_run = client.read_flow_run(flow_run.id)
    # the night holds the solo job and the chain's subflow (Prefect's task run that links it),
    # named with its night (``night <date>``, as the night's run is) and its steps
    assert night_run.name.startswith("night ")
    assert chain.name == f"{night_run.name}: fetch -> link -> publish"
    assert chain.state.is_completed()
    assert sorted(t.name for t in task_runs if t.id != chain.parent_task_run_id) == ["solo"]
    assert sorted(t.name for t in steps) == ["fetch", "link", "publish"]
    assert "nightshift" in chain.tags
    assert all("nightshift" in t.tags for t in [*task_runs, *steps]), {
        t.name: t.tags for t in [*task_runs, *steps]
    }


def test_a_night_whose_lease_was_not_renewed_in_time_submits_nothing_more(
    tmp_path: Path, night_loop: NightLoop
) -> None:
    from datetime import UTC, datetime

    from sqlalchemy import create_engine, text

    from nightshift.engine.watcher import Watcher

    clock = FakeClock(datetime(2026, 11, 29, 2, 0, tzinfo=UTC))
    url = f"sqlite:///{tmp_path / 'ledger.sqlite3'}"
    watcher = Watcher(lambda *_: None, loop=night_loop)
    try:
        with Lease(url, "edges", "me", ttl_s=0.3, clock=clock, loop=night_loop) as lease:
            assert stop_reason(lease, watcher) is None
            engine = create_engine(url)
            with engine.begin() as conn:  # the database goes away under the night
                conn.execute(text("DROP TABLE leases"))
            engine.dispose()
            clock.advance(0.31)
            reason = stop_reason(lease, watcher)
    finally:
        watcher.stop()
    assert reason is not None and reason.startswith("not submitted: the lease on 'edges'")


def test_a_failed_job_logs_no_empty_traceback_even_without_retries(
    sandbox: Path, caplog: pytest.LogCaptureFixture
) -> None:
    body = f"  - {{label: bad, backend: command, argv: [{PY}, -c, 'exit(3)']}}\n"
    path = write(sandbox, body)
    path.write_text(path.read_text().replace("stagger: 0s", "stagger: 0s, retries: 0"))
    run_dir = sandbox / "run"
    state = nightly(catalog=str(path), run_dir=str(run_dir), return_state=True)
    assert jobs_of(summary_of(run_dir))["bad"]["state"] == "failed"
    assert "Task run failed with state" not in caplog.text  # Prefect's, with "NoneType: None"
    # and its task run's page says no retry: Retries 0
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    async def policies() -> list[int | None]:
        only = FlowRunFilter(id=FlowRunFilterId(any_=[state.state_details.flow_run_id]))
        async with get_client() as client:
            runs = await client.read_task_runs(flow_run_filter=only)
        return [r.empirical_policy.retries for r in runs if r.name == "bad"]

    assert asyncio.run(policies()) == [0]


def test_a_job_has_one_duration_on_its_first_run_and_when_a_rerun_keeps_it(
    sandbox: Path,
) -> None:
    # a command of a moment (it may end before its submit returns) and one that fails
    body = command("quick") + f"  - {{label: bad, backend: command, argv: [{PY}, -c, 'exit(3)']}}\n"
    path = write(sandbox, body)
    path.write_text(path.read_text().replace("stagger: 0s", "stagger: 0s, retries: 0"))
    first_dir, again_dir = sandbox / "run1", sandbox / "run2"
    nightly(catalog=str(path), night="2026-12-05", run_dir=str(first_dir), return_state=True)
    nightly(catalog=str(path), night="2026-12-05", run_dir=str(again_dir), return_state=True)
    first = jobs_of(summary_of(first_dir))["quick"]
    again = jobs_of(summary_of(again_dir))["quick"]
    assert again["kept"] and not first["kept"]
    # the same figure, from the same clock: the rerun reads it back from the ledger
    assert again["duration_s"] == first["duration_s"] >= 0
    assert first["took"] != "0ms" and again["took"] == f"{first['took']} earlier"
    ledger = Ledger(load_settings().ledger_url(), "edges")
    try:
        (row,) = [r for r in ledger.jobs_of("2026-12-05") if r.label == "quick"]
        final = [d for d in ledger.dwells("2026-12-05", "quick") if d.to_state == "succeeded"]
    finally:
        ledger.close()
    assert row.finished_at == final[-1].at  # its jobs row and its final transition agree
