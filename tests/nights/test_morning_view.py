"""The morning view through the Prefect API of a real server: states named for what happened,
the night's message, chains as subflows, one ERROR record per job that did not succeed."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from nightshift.flows.nightly import nightly
from tests.support import read_until

pytestmark = pytest.mark.usefixtures("prefect_server")

PY = json.dumps(sys.executable)
CATALOGUE = """\
defaults:
  poll: {initial: 0.2s, factor: 2, max: 0.5s}
  stagger: 0s
  retries: 0
  deadline: 60s
  queued_timeout: 3s
jobs:
"""


def command(label: str, code: str, extra: str = "") -> str:
    argv = f"[{PY}, -c, {json.dumps(code)}]"
    return f"  - {{label: '{label}', backend: command, argv: {argv}{extra}}}\n"


NIGHT = "2026-12-05"
PAGES = "'\\n'.join(f'fetched page {i:02d}' for i in range(30))"
GIVE_UP = "the feed answered 503 three times, giving up"
BODY = (
    command("hello", "print(1)")
    + command("broken", "import sys; print('disk full on /data', file=sys.stderr); sys.exit(3)")
    + command("slow", "import time; time.sleep(60)", ", timeout: 2s")
    + "  - {label: stuck, backend: cli, task: 'stuck [stuck]'}\n"
    + command("fetch", "print('fetched')")
    + command("link", "print('linked')", ", depends_on: [fetch]")
    + command("publish", "print('published')", ", depends_on: [link]")
    # a chain's step whose reason is its log's last line, after more than ten others
    + command("pull", f"print({PAGES}); print({GIVE_UP!r}); raise SystemExit(4)")
    + command("push", "print(1)", ", depends_on: [pull]")
)


def run_night(
    sandbox: Path, body: str = BODY, night: str | None = None, run_dir: bool = True
) -> Any:
    """The night's final state; its run folder is ``sandbox/run``, or with ``run_dir=False``
    the default one under the state folder (``runs/<night>/<stamp>``)."""
    path = sandbox / "nightshift.yaml"
    path.write_text(CATALOGUE + body, encoding="utf-8")
    params: dict[str, Any] = {"night": night} if night else {}
    if run_dir:
        params["run_dir"] = str(sandbox / "run")
    return nightly(catalog=str(path), return_state=True, **params)


def client() -> Any:
    from prefect.client.orchestration import get_client

    return get_client(sync_client=True)


def flow_run(run_id: UUID) -> Any:
    with client() as c:
        return c.read_flow_run(run_id)


def task_runs(run_ids: list[UUID]) -> dict[str, Any]:
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with client() as c:
        runs = c.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=run_ids)))
    return {t.name: t for t in runs}


def subflows(run_id: UUID) -> list[Any]:
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

    parent = FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[run_id]))
    with client() as c:
        return list(c.read_flow_runs(flow_run_filter=parent))


def summary_forecast_runs(sandbox: Path, night: str) -> list[str]:
    """The runs of ``night`` that kept a forecast in the ledger."""
    from nightshift.config.loader import load_catalogue
    from nightshift.config.settings import load_settings
    from nightshift.store.forecasts import Forecasts
    from nightshift.store.ledger import Ledger

    key = load_catalogue(sandbox / "nightshift.yaml").key
    ledger = Ledger(load_settings().ledger_url(), key)
    try:
        return [f.run_id for f in Forecasts(ledger.engine, key).of_night(night)]
    finally:
        ledger.close()


def logs(run_ids: list[UUID]) -> list[Any]:
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    with client() as c:
        return list(c.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=run_ids))))


def test_a_night_names_its_states_and_its_chains_and_says_each_failure_once(
    sandbox: Path,
) -> None:
    state = run_night(sandbox, night=NIGHT)
    run_id = state.state_details.flow_run_id

    # the run is named by the night's verdict, its message the headline and the worst jobs
    final = read_until(
        lambda: flow_run(run_id).state, lambda s: s.name == "Partial", 30, "the named night"
    )
    assert final.type.value == "FAILED"
    assert final.message.startswith("partial: 4/9 succeeded")
    # as the digest names them: how long each took, then how it ended
    worst = r"worst: broken \(\S+, failed\), pull \(\S+, failed\), slow \(\S+, timeout\)"
    assert re.search(worst, final.message), final.message
    assert "states failed" not in final.message

    # each chain is one subflow run named by its night and its steps (a week of nights lists
    # seven names apart); its steps are its task runs, a skipped step too
    chains = read_until(
        lambda: subflows(run_id), lambda runs: len(runs) == 2, 30, "the chains' subflow runs"
    )
    by_name = {c.name: c for c in chains}
    fetching, pulling = f"night {NIGHT}: fetch -> link -> publish", f"night {NIGHT}: pull -> push"
    assert set(by_name) == {fetching, pulling}
    assert by_name[fetching].state.is_completed()
    assert by_name[pulling].state.is_failed()
    steps = task_runs([by_name[fetching].id])
    assert {"fetch", "link", "publish"} <= set(steps)
    assert {"pull", "push"} <= set(task_runs([by_name[pulling].id]))

    # task runs are named apart from failed
    everything = [run_id, *(c.id for c in chains)]
    names = read_until(
        lambda: {n: t.state.name for n, t in task_runs(everything).items() if t.state},
        lambda seen: seen.get("stuck") == "Stuck" and seen.get("slow") == "TimedOut",
        30,
        "the jobs' final task run states",
    )
    assert names["hello"] == "Completed"
    assert names["broken"] == "Failed"
    assert names["stuck"] == "Stuck"
    assert names["slow"] == "TimedOut"
    assert names["push"] == "Skipped"  # a bar on the night's timeline, counted with the rest
    # each job that did not succeed says why in its state's message, in one line: its
    # detail, then its log's last line when that adds something
    runs = task_runs(everything)
    assert runs["pull"].state.message == f"exit code 4: {GIVE_UP}"
    assert runs["broken"].state.message == "exit code 3: disk full on /data"
    assert runs["push"].state.type.value == "CANCELLED"  # grey: not run, not a success
    assert runs["push"].state.message == "not run: pull failed"
    # a chain appears once: no task run wraps its steps under the night's own task runs
    assert not any("→" in n for n in task_runs([run_id]))

    # one ERROR record for the broken job: reason, external id, tail path and its first lines
    summary = json.loads((sandbox / "run" / "summary.json").read_text())
    broken = next(j for j in summary["jobs"] if j["label"] == "broken")

    def about_broken(records: list[Any]) -> list[Any]:
        return [r for r in records if "broken" in r.message or "exit code 3" in r.message]

    records = read_until(
        lambda: logs(everything),
        lambda rs: any(r.level >= 40 and "disk full" in r.message for r in rs),
        30,
        "the broken job's ERROR record",
    )
    (error,) = [r for r in about_broken(records) if r.level >= 30]
    assert error.level == 40
    assert "exit code 3" in error.message
    assert broken["external_id"] in error.message
    assert broken["log_tail_path"] in error.message
    assert "disk full on /data" in error.message
    assert not any(r.message.startswith("finished broken") for r in records)
    # the chain's failed step said why on its own task run, its skipped step in the subflow;
    # neither the job's task run nor the chain's subflow repeats it in a "Finished in state"
    records = read_until(
        lambda: logs(everything),
        lambda rs: any("push Skipped: pull failed" in r.message for r in rs),
        30,
        "the skipped step's record",
    )
    assert not [r.message for r in records if r.level >= 40 and "Finished in state" in r.message]
    (skipped,) = [r for r in records if r.message.startswith("push ")]
    assert skipped.task_run_id == runs["push"].id  # on its own task run
    # the failed step: once on its task run in the chain's subflow, once in the night's own
    # log (where the night's page shows it), each with its tail's last ten lines
    pulled = [r for r in records if r.level >= 40 and r.message.startswith("pull ")]
    assert sorted(r.flow_run_id == run_id for r in pulled) == [False, True], pulled
    for record in pulled:
        assert record.message.startswith("pull Failed after ")
        assert "    | fetched page 21\n" in record.message
        assert f"    | {GIVE_UP}\n" in record.message
        assert "fetched page 20" not in record.message
    (at_night,) = [r for r in pulled if r.flow_run_id == run_id]
    assert at_night.task_run_id is None
    assert "step of chain pull → push" in at_night.message
    # the night's last line names it as its state does, not Prefect's count of failed states
    # ("Finished in state Failed('7/10 states failed.')" under a run named Partial)
    finished = read_until(
        lambda: [
            r.message
            for r in logs([run_id])
            if r.task_run_id is None and r.message.startswith("Finished in state")
        ],
        bool,
        30,
        "the night's 'Finished in state' line",
    )
    assert finished == [f"Finished in state Partial({final.message!r}, type=FAILED)"], finished

    # the progress artifact: every job finished is a full bar, how many are not ok beside it
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    only = ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run_id]))
    with client() as c:
        artifacts = {a.key: a for a in c.read_artifacts(artifact_filter=only)}
    progress = artifacts["nightly-progress"]
    assert "finished: 9 of 9, 5 not ok" in progress.description
    assert progress.data == 100.0


@pytest.mark.picture
def test_the_night_report_is_an_artifact_the_cli_prints_and_summary_json_keeps(
    sandbox: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    from nightshift.cli.main import main

    body = command("hello", "print(1)") + command(
        "broken", "import sys; print('disk full on /data', file=sys.stderr); sys.exit(3)"
    )
    state = run_night(sandbox, body, night="2026-11-30", run_dir=False)
    (folder,) = (sandbox / "state" / "runs" / "2026-11-30").iterdir()
    run_id = state.state_details.flow_run_id
    only = ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run_id]))
    with client() as c:
        listed = list(c.read_artifacts(artifact_filter=only))
    artifacts = {a.key: a for a in listed}
    # listed by the night it ran, not a random name
    assert flow_run(run_id).name == "night 2026-11-30"
    # the run's first artifact: its forecast, made at its start
    first = min(listed, key=lambda a: a.created)
    assert first.key == "nightly-forecast", [a.key for a in listed]
    assert first.data.startswith("# Forecast · night 2026-11-30 · nightshift\n")
    page = artifacts["nightly-report"]
    assert page.type == "markdown"
    text = page.data
    assert text.startswith("# Night 2026-11-30 · nightshift\n")
    # its time as every page says it: 3s, 2m, or <1s (a broken job fails in no time)
    took = r"(\d+m?|<1)s"
    headline = rf"partial: 1/2 succeeded \(1 failed\); worst: broken \({took}, failed\)"
    assert re.fullmatch(headline, page.description or ""), page.description
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert rows[0].startswith("| `broken` | Failed | ") and rows[1].startswith("| `hello` |")
    assert "**broken** (Failed): exit code 3" in text
    assert "disk full on /data" in text  # the excerpt of its log
    assert "![durations against budgets](data:image/png;base64," in text
    # nothing learned yet: no finish was forecast, so none is held against what happened
    assert "## Forecast against actual" in text and ", finished " not in text
    assert "No forecast to hold the night against: 2 of 2 jobs have nothing learned yet" in text
    assert summary_forecast_runs(sandbox, "2026-11-30") == [str(run_id)]  # kept in the ledger

    summary = json.loads((folder / "summary.json").read_text())
    assert summary["report"]["headline"] == page.description
    assert [j["label"] for j in summary["report"]["jobs"]] == ["broken", "hello"]
    assert (folder / "report.png").read_bytes().startswith(b"\x89PNG")

    # the same page locally, its plot the run folder's file
    catalogue = str(sandbox / "nightshift.yaml")
    capsys.readouterr()
    assert main(["report", "--catalogue", catalogue, "--night", "2026-11-30"]) == 0
    printed = capsys.readouterr().out
    inline = text.split("](data:", 1)[1].split(")", 1)[0]
    assert printed == text.replace(f"data:{inline}", str(folder / "report.png"))

    # a night with no rows: one line, exit 4
    assert main(["report", "--catalogue", catalogue, "--night", "2020-01-01"]) == 4
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err == "no ledger rows for night 2020-01-01 of catalogue nightshift\n"


def test_a_retry_of_the_night_shows_what_it_kept_and_replies_in_the_first_digest_thread(
    sandbox: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The UI's Retry: the same flow run runs again (run_count 2), as a worker would run it."""
    from prefect.flow_engine import run_flow
    from prefect.states import AwaitingRetry

    from nightshift.sandbox.slack_emulator import SlackEmulator

    token = "xoxb-morning-7d1e"
    monkeypatch.setenv("SLACK_BOT_TOKEN", token)
    flaky = "import os,sys; sys.exit(0 if os.path.exists('fixed') else 1)"
    with SlackEmulator(token) as slack:
        head = (
            "notify:\n  env: test\n"
            f'  slack: {{base_url: "{slack.base_url}", timeout: 2}}\n'
            '  routes: {partial: {channel: "#digest"}, failed: {channel: "#failed"}}\n'
        )
        path = sandbox / "nightshift.yaml"
        path.write_text(
            head + CATALOGUE + command("good", "print(1)") + command("flaky", flaky),
            encoding="utf-8",
        )
        parameters = {"catalog": str(path), "run_dir": str(sandbox / "run")}
        with client() as c:
            run = c.create_flow_run(nightly, parameters=parameters)
        first = run_flow(nightly, flow_run=run, parameters=parameters, return_type="state")
        assert first.is_failed()
        (digest,) = slack.messages
        assert digest.channel == "#digest" and digest.thread_ts is None

        (sandbox / "fixed").touch()  # the job runs in the catalogue's folder
        with client() as c:
            c.set_flow_run_state(run.id, AwaitingRetry(), force=True)
            again = c.read_flow_run(run.id)
        second = run_flow(nightly, flow_run=again, parameters=parameters, return_type="state")
        assert second.is_completed()
        assert "retry: 1 re-ran (1 now ok, 0 still failing), 1 kept" in second.message

        # the retry's digest: a reply in the first digest's thread, saying it is a retry
        _, reply = slack.messages
        assert reply.channel == "#digest" and reply.thread_ts == digest.ts
        assert reply.text is not None
        assert reply.text.startswith("ok: 2/2 succeeded")
        assert "retry: 1 re-ran (1 now ok, 0 still failing), 1 kept" in reply.text

    # the kept job is visibly kept: named so, its state Kept
    runs = read_until(
        lambda: {n: t.state.name for n, t in task_runs([run.id]).items() if t.state},
        lambda seen: seen.get("good (kept)") == "Kept",
        30,
        "the kept job's task run",
    )
    assert runs["good"] == "Completed"  # the first run's
    assert runs["flaky"] in ("Failed", "Completed")  # the first run's and the retry's share it
    # the notify task: named, tagged, and it said what it sent
    with client() as c:
        notify_runs = [t for t in task_runs([run.id]).values() if t.name == "notify slack"]
        assert notify_runs and all("nightshift" in t.tags for t in notify_runs)
    said = read_until(
        lambda: [r.message for r in logs([run.id]) if r.message.startswith("slack: ")],
        lambda lines: len(lines) >= 2,
        30,
        "the notify task's lines",
    )
    assert any(line.startswith("slack: digest to #digest (top-level, accepted") for line in said)
    assert any(f"slack: digest to #digest (reply in {digest.ts}, accepted" in ln for ln in said)

    summary = json.loads((sandbox / "run" / "summary.json").read_text())
    report = summary["report"]
    assert report["retry"] == "retry: 1 re-ran (1 now ok, 0 still failing), 1 kept"
    kept = next(j for j in report["jobs"] if j["label"] == "good")
    assert kept["tonight"] == "kept" and kept["shown_as"] == "Kept"
    assert [s["thread"] for s in report["slack"]] == [None, digest.ts]
