"""Gemini batch jobs inside a night: reconciliation in the join, the SLA fallback on time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nightshift.errors import PermanentBackendError
from nightshift.flows.nightly import nightly
from nightshift.sandbox.gemini_emulator import BatchScript, GeminiEmulator
from tests.support import write_rows

pytestmark = pytest.mark.usefixtures("prefect_server")

CATALOGUE = """\
defaults: {poll: {initial: 0.2s, max: 0.5s}, stagger: 0s, deadline: 60s}
jobs:
  - label: report:dropped
    backend: gemini_batch
    model: gemini-2.5-flash
    input: rows.jsonl
    output: out/dropped.jsonl
    inline_threshold_rows: 0     # as an uploaded file: results come back keyed
  - label: report:stuck
    backend: gemini_batch
    model: gemini-2.5-flash
    input: rows.jsonl
    output: out/stuck.jsonl
    sla: 5s
"""


def test_dropped_rows_make_a_partial_job_and_a_stuck_batch_falls_back(
    sandbox: Path, emulator: GeminiEmulator
) -> None:
    write_rows(sandbox / "rows.jsonl", 6)
    (sandbox / "nightshift.yaml").write_text(CATALOGUE)
    emulator.script_batch("report:dropped", BatchScript(running_s=0.5, drop_rows=3))
    emulator.script_batch("report:stuck", BatchScript(final="stuck"))

    run_dir = sandbox / "run"
    state = nightly(
        catalog=str(sandbox / "nightshift.yaml"), run_dir=str(run_dir), return_state=True
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    jobs = {job["label"]: job for job in summary["jobs"]}

    assert state.is_failed()
    assert summary["exit_code"] == 2
    dropped = jobs["report:dropped"]
    assert dropped["state"] == "partial"
    assert dropped["data"]["reconciliation"]["missing"] == 3
    assert dropped["data"]["reconciliation"]["submitted"] == 6
    assert "3 missing" in dropped["detail"]
    retry = (sandbox / "out" / "dropped.retry.jsonl").read_text().splitlines()
    assert [json.loads(line)["key"] for line in retry] == ["r3", "r4", "r5"]

    # 80 % of a 5 s SLA: the batch is cancelled and every row answered on demand
    stuck = jobs["report:stuck"]
    assert stuck["state"] == "succeeded", stuck
    assert stuck["data"]["reconciliation"]["fallback"] == 6
    # fired at 80 % of the SLA (4 s): not before, and not at the night's 60 s deadline; how
    # punctually is for the watcher's fake-clock tests, not a wall-clock window on a busy machine
    assert 4 <= stuck["duration_s"] < 60
    answered = (sandbox / "out" / "stuck.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["key"] for line in answered) == [f"r{i}" for i in range(6)]
    assert emulator.count("models.generateContent") == 6


def test_the_key_can_come_from_a_prefect_secret_block_named_in_the_catalogue(
    sandbox: Path, emulator: GeminiEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefect.blocks.system import Secret

    from nightshift.backends import build_backends
    from nightshift.config.loader import parse_catalogue
    from nightshift.config.settings import load_settings

    Secret(value="test-key").save("nightshift-gemini-key", overwrite=True)
    monkeypatch.setenv("GEMINI_API_KEY", "a-stale-key-the-emulator-refuses")
    catalogue = parse_catalogue(
        CATALOGUE.replace("jobs:", "gemini: {api_key_block: nightshift-gemini-key}\njobs:"),
        sandbox / "nightshift.yaml",
    )
    backend = build_backends(catalogue, load_settings())["gemini_batch"]
    # authenticated: the batch is unknown (404), the key is not refused (401)
    with pytest.raises(PermanentBackendError, match="404"):
        backend.status("batches/none")
    assert [call for call in emulator.calls if call[2] == 401] == []
    assert "test-key" not in repr(backend)
    # the control: without the block, the stale ambient key is refused, and says so
    plain = parse_catalogue(CATALOGUE, sandbox / "nightshift.yaml")
    ambient = build_backends(plain, load_settings())["gemini_batch"]
    refused = ambient.status_many(["batches/none", "batches/other"])["batches/none"]
    assert isinstance(refused, PermanentBackendError) and "401" in str(refused), refused


def test_a_bad_input_file_fails_that_job_with_every_bad_line_and_submits_nothing(
    sandbox: Path, emulator: GeminiEmulator
) -> None:
    good = {"key": "a", "request": {"contents": [{"parts": [{"text": "hi"}]}]}}
    (sandbox / "rows.jsonl").write_text(
        json.dumps(good) + "\n\n" + json.dumps({"request": {"contents": []}}) + "\n"
    )
    (sandbox / "nightshift.yaml").write_text(CATALOGUE.split("  - label: report:stuck")[0])
    run_dir = sandbox / "run"
    nightly(catalog=str(sandbox / "nightshift.yaml"), run_dir=str(run_dir), return_state=True)
    (job,) = json.loads((run_dir / "summary.json").read_text())["jobs"]
    assert job["state"] == "failed"
    assert job["attempts"] == 1
    assert "rows.jsonl:2" in job["detail"] and "rows.jsonl:3" in job["detail"]
    assert emulator.count("batches.create") == 0


def test_the_nights_end_closes_the_gemini_client(
    sandbox: Path, emulator: GeminiEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nightshift.backends.gemini.batch import GeminiBatchBackend

    closed: list[GeminiBatchBackend] = []
    close = GeminiBatchBackend.close

    def spy(self: GeminiBatchBackend) -> None:  # the real close, noted
        closed.append(self)
        close(self)

    monkeypatch.setattr(GeminiBatchBackend, "close", spy)
    rows = [{"key": "r0", "request": {"contents": [{"parts": [{"text": "row 0"}]}]}}]
    (sandbox / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (sandbox / "nightshift.yaml").write_text(CATALOGUE.split("  - label: report:stuck")[0])
    emulator.script_batch("report:dropped", BatchScript(running_s=0.2))
    run_dir = sandbox / "run"
    state = nightly(
        catalog=str(sandbox / "nightshift.yaml"), run_dir=str(run_dir), return_state=True
    )
    (job,) = json.loads((run_dir / "summary.json").read_text())["jobs"]
    assert state.is_completed() and job["state"] == "succeeded"
    (backend,) = closed  # built once for the night, closed once at its end
    with pytest.raises(PermanentBackendError, match="the Gemini client is closed"):
        backend.status(job["external_id"])
