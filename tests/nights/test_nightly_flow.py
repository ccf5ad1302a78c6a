"""The nightly flow under a real Prefect server, with real subprocesses and the fake agy CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nightshift.config.settings import load_settings
from nightshift.flows.nightly import nightly
from nightshift.store.ledger import Ledger

pytestmark = pytest.mark.usefixtures("prefect_server")

PY = "python3"
HEADER = """\
defaults:
  poll: {initial: 0.2s, factor: 2, max: 1s}
  stagger: 0.05s
  retry_delay: 0.1s
  deadline: %(deadline)s
  queued_timeout: 3s
jobs:
"""


def ok_command(label: str, extra: str = "") -> str:
    return f"  - {{label: {label}, backend: command, argv: [{PY}, -c, 'print(1)']{extra}}}\n"


def cli(label: str, task: str, extra: str = "") -> str:
    return f"  - {{label: {label}, backend: cli, task: '{task}'{extra}}}\n"


def write(tmp: Path, body: str, deadline: str = "60s") -> Path:
    path = tmp / "nightshift.yaml"
    path.write_text(HEADER % {"deadline": deadline} + body)
    return path


def run(path: Path, tmp: Path, **params: Any) -> tuple[Any, dict[str, Any]]:
    run_dir = tmp / "run"
    state = nightly(catalog=str(path), run_dir=str(run_dir), return_state=True, **params)
    summary = json.loads((run_dir / "summary.json").read_text())
    return state, summary


def states(summary: dict[str, Any]) -> dict[str, str]:
    return {job["label"]: job["state"] for job in summary["jobs"]}


def test_a_mixed_night_of_twelve_jobs(sandbox: Path) -> None:
    body = (
        cli("gen:a", "article a [queue=0.2 run=3]")  # long enough to be seen running
        + cli("gen:b", "article b [queue=0.1 run=1]")
        + cli("gen:broken", "article c [run=0.3 exit=3]")
        + cli("gen:stuck", "article d [stuck]")
        + f"  - {{label: audit:slow, backend: command, argv: [{PY}, -c, "
        "'import time; print(\"auditing\", flush=True); time.sleep(120)']}\n"
        + ok_command("reindex")
        + ok_command("cost:rollup")
        + cli("chain:gen", "gen [run=0.3]")
        + ok_command("chain:link", ", depends_on: [chain:gen]")
        + ok_command("chain:publish", ", depends_on: [chain:link]")
        + f"  - {{label: fetch:feed, backend: command, argv: [{PY}, -c, "
        "'import sys; print(\"feed down\"); sys.exit(1)']}\n"
        + ok_command("summarize:feed", ", depends_on: [fetch:feed]")
    )
    # the deadline ends audit:slow; the chain (three subflow steps) needs time on a loaded machine
    state, summary = run(write(sandbox, body, deadline="30s"), sandbox)

    assert state.is_failed()
    assert summary["severity"] == "partial"
    assert summary["exit_code"] == 2
    assert states(summary) == {
        "gen:a": "succeeded",
        "gen:b": "succeeded",
        "gen:broken": "failed",
        "gen:stuck": "stuck_queued",
        "audit:slow": "timeout",
        "reindex": "succeeded",
        "cost:rollup": "succeeded",
        "chain:gen": "succeeded",
        "chain:link": "succeeded",
        "chain:publish": "succeeded",
        "fetch:feed": "failed",
        "summarize:feed": "skipped",
    }
    jobs = {job["label"]: job for job in summary["jobs"]}
    # on the night's timeline in the UI, a job that did not succeed is a failed task run
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    this_run = FlowRunFilter(id=FlowRunFilterId(any_=[state.state_details.flow_run_id]))
    with get_client(sync_client=True) as client:
        task_runs = {
            t.name: t.state.type.value for t in client.read_task_runs(flow_run_filter=this_run)
        }
    assert task_runs["gen:a"] == "COMPLETED"
    assert task_runs["gen:broken"] == "FAILED"
    assert task_runs["gen:stuck"] == "FAILED"

    # failed jobs keep a log tail next to the run
    tail = Path(jobs["fetch:feed"]["log_tail_path"]).read_text()
    assert "feed down" in tail
    assert "auditing" in Path(jobs["audit:slow"]["log_tail_path"]).read_text()
    assert jobs["gen:broken"]["detail"] == "exit code 3"
    assert jobs["summarize:feed"]["detail"] == "fetch:feed failed"
    assert jobs["gen:a"]["external_id"] and jobs["gen:a"]["attempts"] == 1
    assert jobs["audit:slow"]["duration_s"] >= 10  # ran until the deadline cancelled it

    # every transition went to the ledger, in order, with dwell times
    ledger = Ledger(load_settings().ledger_url(), str((sandbox / "nightshift.yaml").resolve()))
    night = ledger.dwells(summary["started_at"][:10], "gen:a")
    seen = [t.to_state for t in night]
    # the queue may be over before the first poll: "queued" is there at most once, in its place
    assert seen in (
        ["submitting", "submitted", "queued", "running", "succeeded"],
        ["submitting", "submitted", "running", "succeeded"],
    ), seen
    assert all(t.dwell_s is not None for t in night[1:])


def test_all_ok_is_completed_and_exit_0(sandbox: Path) -> None:
    body = ok_command("a") + cli("b", "b [run=0.2]") + ok_command("c", ", depends_on: [a]")
    state, summary = run(write(sandbox, body), sandbox)
    assert state.is_completed()
    assert (summary["severity"], summary["exit_code"]) == ("ok", 0)

    # the UI shows a summary table and the progress, which reached 100 %
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    only_this_run = ArtifactFilter(
        flow_run_id=ArtifactFilterFlowRunId(any_=[state.state_details.flow_run_id])
    )
    with get_client(sync_client=True) as client:
        artifacts = {a.type: a for a in client.read_artifacts(artifact_filter=only_this_run)}
    assert artifacts["progress"].data == 100.0
    # titled in the UI: a key and a description a person understands
    assert artifacts["progress"].key == "nightly-progress"
    assert artifacts["progress"].description == "Jobs of the night finished: 3 of 3"
    table = artifacts["table"].data
    rows = json.loads(table) if isinstance(table, str) else table
    assert sorted(row["job"] for row in rows) == ["a", "b", "c"]


def test_all_failed_is_exit_1(sandbox: Path) -> None:
    body = cli("a", "a [run=0.1 exit=2]") + (
        f"  - {{label: b, backend: command, argv: [{PY}, -c, 'raise SystemExit(5)']}}\n"
    )
    state, summary = run(write(sandbox, body), sandbox)
    assert state.is_failed()
    assert (summary["severity"], summary["exit_code"]) == ("failed", 1)


def test_a_rerun_redoes_only_failed_work(sandbox: Path) -> None:
    body = ok_command("good") + (
        f"  - {{label: flaky, backend: command, argv: [{PY}, -c, "
        "'import os,sys; sys.exit(0 if os.path.exists(\"fixed\") else 1)']}\n"
    )
    path = write(sandbox, body)
    _, first = run(path, sandbox, night="2026-11-28")
    assert states(first) == {"good": "succeeded", "flaky": "failed"}
    (sandbox / "fixed").touch()  # the job runs in the catalogue's folder
    state, second = run(path, sandbox, night="2026-11-28")
    assert state.is_completed()
    before = {j["label"]: j for j in first["jobs"]}
    after = {j["label"]: j for j in second["jobs"]}
    assert after["good"]["external_id"] == before["good"]["external_id"]  # not re-submitted
    assert after["good"]["detail"].startswith("kept: succeeded earlier tonight")
    assert after["flaky"]["external_id"] != before["flaky"]["external_id"]
    assert after["flaky"]["attempts"] == 2


def test_transient_cli_errors_are_retried(sandbox: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGY_FAIL_CALLS", "2")
    state, summary = run(write(sandbox, cli("a", "a [run=0.1]")), sandbox)
    assert state.is_completed(), summary
    # the fault was injected: the first two calls of the job CLI exited 75
    (counter,) = (sandbox / "agy").glob("*fail_calls.count")
    assert counter.read_text().strip() == "2"
    # and the retries made one job, not three
    assert len(list((sandbox / "agy" / "jobs").iterdir())) == 1
    (job,) = summary["jobs"]
    assert job["attempts"] == 1


def test_a_cap_bounds_jobs_in_flight_and_starts_the_longest_first(
    sandbox: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import UTC, datetime, timedelta

    from prefect.client.orchestration import get_client

    import nightshift.orchestration.night_run as night_run
    import nightshift.orchestration.prepared_night as prepared_night
    from nightshift.engine.admission import Admission

    granted: list[float] = []

    class RecordingAdmission(Admission):
        """Records each grant under the admission's lock: the true order, whatever the load."""

        def _take(self, backend: str, priority: float) -> Any:
            held = super()._take(backend, priority)
            granted.append(priority)
            return held

    plans: list[list[str]] = []
    real_plan_night = prepared_night.plan_night

    def plan_night(*args: Any, **kwargs: Any) -> Any:
        plan = real_plan_night(*args, **kwargs)
        plans.append(list(plan.labels))  # a job's priority is its place in this list
        return plan

    monkeypatch.setattr(night_run, "Admission", RecordingAdmission)
    monkeypatch.setattr(prepared_night, "plan_night", plan_night)

    ledger = Ledger(load_settings().ledger_url(), str((sandbox / "nightshift.yaml").resolve()))
    long_ago = datetime.now(UTC) - timedelta(days=2)
    for i, seconds in enumerate([10, 50, 30, 40, 20]):  # history: j1 is the longest
        ledger.record_submit("2026-11-01", f"j{i}", "command", f"old-{i}", 1, at=long_ago)
        done = long_ago + timedelta(seconds=seconds)
        ledger.record_state("2026-11-01", f"j{i}", "succeeded", finished_at=done)
    body = "".join(
        f"  - {{label: j{i}, backend: command, argv: [{PY}, -c, 'import time; time.sleep(0.5)']}}\n"
        for i in range(5)
    )
    path = write(sandbox, body)
    path.write_text(path.read_text().replace("jobs:\n", "limits: {command: 2}\njobs:\n"))
    state, _ = run(path, sandbox, night="2026-11-29")
    assert state.is_completed()

    # the order slots were granted in, not the ledger's timestamps: submissions 50 ms apart
    # can be written out of order on a loaded machine
    (labels,) = plans
    assert [labels[int(p)] for p in granted] == ["j1", "j3", "j2", "j4", "j0"]
    rows = ledger.dwells("2026-11-29")
    submitted = {t.label: t.at for t in rows if t.to_state == "submitting"}
    ended = {t.label: t.at for t in rows if t.to_state == "succeeded"}
    for label, start in submitted.items():
        overlapping = [o for o in submitted if submitted[o] <= start < ended[o]]
        assert len(overlapping) <= 2, (label, overlapping)
    with get_client(sync_client=True) as client:
        assert client.read_global_concurrency_limit_by_name("nightshift-command").limit == 2


def test_the_night_tells_a_live_sink_and_hands_its_chains_the_night_not_a_copy(
    sandbox: Path,
) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

    from nightshift.engine.events import JobFinished, NightFinished
    from nightshift.engine.stopping import NightStop

    seen: list[Any] = []
    stop = NightStop()
    body = ok_command("a") + ok_command("b", ", depends_on: [a]")
    state, summary = run(write(sandbox, body), sandbox, live=seen.append, stop=stop)

    assert state.is_completed(), summary
    # the sink handed in heard the night (the CLI's live table is one), no module global
    assert {e.outcome.label for e in seen if isinstance(e, JobFinished)} == {"a", "b"}
    assert any(isinstance(e, NightFinished) for e in seen)
    assert stop.over  # the stop handed in heard the night was over
    # the chain's subflow run was handed the running night: the API keeps a placeholder
    parent = FlowRunFilterParentFlowRunId(any_=[state.state_details.flow_run_id])
    with get_client(sync_client=True) as client:
        (chain_run,) = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(parent_flow_run_id=parent)
        )
        night_run = client.read_flow_run(state.state_details.flow_run_id)
    # named with its night (the night's run is `night <date>`) and its steps
    assert chain_run.name == f"{night_run.name}: a -> b" and chain_run.state is not None
    assert chain_run.state.is_completed()
    assert isinstance(chain_run.parameters["night"], str), chain_run.parameters
    assert chain_run.parameters["labels"] == ["a", "b"]
    # neither the sink nor the stop is a deployment's parameter worth keeping
    assert not isinstance(night_run.parameters.get("stop"), dict | list)


def test_a_prepared_night_is_run_as_it_was_prepared_not_read_again(sandbox: Path) -> None:
    from prefect.client.orchestration import get_client

    from nightshift.orchestration.prepared_night import prepare_night

    path = write(sandbox, ok_command("a") + ok_command("b", ", depends_on: [a]"))
    run_dir = sandbox / "run"
    prepared = prepare_night(path, night="2026-11-29", run_dir=str(run_dir))
    path.unlink()  # the flow must not read the catalogue again

    state = nightly(catalog=str(path), prepared=prepared, return_state=True)

    assert state.is_completed()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert states(summary) == {"a": "succeeded", "b": "succeeded"}
    # the prepared night's date and ledger: its rows were written there
    ledger = Ledger(load_settings().ledger_url(), prepared.catalogue.key)
    try:
        assert {r.label for r in ledger.jobs_of("2026-11-29")} == {"a", "b"}
    finally:
        ledger.close()
    with get_client(sync_client=True) as client:
        night_run = client.read_flow_run(state.state_details.flow_run_id)
    # kept out of the API: a placeholder, not the catalogue and ledger encoded
    assert isinstance(night_run.parameters["prepared"], str)
