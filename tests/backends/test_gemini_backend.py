"""GeminiBatchBackend end to end: the real google-genai client against the local emulator."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from pydantic import SecretStr

from nightshift.backends.base import Backend, Capabilities, ExternalState, JobSpec, capabilities
from nightshift.backends.gemini.batch import (
    GeminiBatchBackend,
    GeminiJobOptions,
    RetryPolicy,
    build_gemini_client,
)
from nightshift.backends.gemini.wait import CancelWait
from nightshift.backoff import Backoff
from nightshift.config.settings import Settings
from nightshift.errors import InputFileError, PermanentBackendError, TransientBackendError
from nightshift.sandbox.gemini_emulator import BatchScript, GeminiEmulator
from tests.conftest import GEMINI_KEY as KEY
from tests.support import wait_final, wait_status

FAST = RetryPolicy(attempts=4, backoff=Backoff(initial=0.01, factor=2, max=0.05, jitter=0.01))
MINUTES = 60.0
QUICK_CANCEL = CancelWait(timeout_s=2.0, backoff=Backoff(initial=0.01, factor=2, max=0.05))


def make_backend(emu: GeminiEmulator, key: str = KEY, **kwargs: object) -> GeminiBatchBackend:
    settings = Settings(gemini_base_url=emu.base_url, gemini_api_key=SecretStr(key))
    client = build_gemini_client(settings, retry=FAST, timeout_s=5)
    return GeminiBatchBackend(client, retry=FAST, **kwargs)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def shared_backend(shared_emu: GeminiEmulator) -> GeminiBatchBackend:
    return make_backend(shared_emu)


@pytest.fixture
def backend(emu: GeminiEmulator, shared_backend: GeminiBatchBackend) -> GeminiBatchBackend:
    return shared_backend


def write_input(path: Path, n: int) -> Path:
    lines = []
    for i in range(n):
        request = {
            "contents": [{"role": "user", "parts": [{"text": f"question number {i}"}]}],
            "generationConfig": {"temperature": 0.2},
            "systemInstruction": {"parts": [{"text": "be brief"}]},
        }
        lines.append(json.dumps({"key": f"row-{i}", "request": request}) + "\n")
    path.write_text("".join(lines))
    return path


def make_spec(tmp_path: Path, label: str, n: int, **options: object) -> JobSpec:
    opts = {
        "model": "gemini-2.5-flash",
        "input": str(write_input(tmp_path / f"{label}.in.jsonl", n)),
        "output": str(tmp_path / "out" / f"{label}.jsonl"),
        "sla": "30m",
        "fallback": "on_demand",
        **options,
    }
    return JobSpec(label=label, backend="gemini_batch", options=opts)


def read_jsonl(path: str | Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def test_backend_satisfies_protocol(backend: GeminiBatchBackend) -> None:
    assert isinstance(backend, Backend)
    assert backend.name == "gemini_batch"


def test_inline_batch_end_to_end(clocked_emu, tmp_path) -> None:
    emu, clock = clocked_emu  # states change only when the test moves the clock
    backend = make_backend(emu)
    emu.script_batch("inline-job", BatchScript(queued_s=5 * MINUTES, running_s=15 * MINUTES))
    spec = make_spec(tmp_path, "inline-job", 6)
    batch_id = backend.submit(spec)

    assert backend.status(batch_id).state == ExternalState.QUEUED
    clock.now += 5 * MINUTES / emu.time_scale
    assert backend.status(batch_id).state == ExternalState.RUNNING
    clock.now += 15 * MINUTES / emu.time_scale
    assert backend.status(batch_id).state == ExternalState.SUCCEEDED
    sent = emu.last_body["batches.create"]["batch"]
    assert sent["displayName"] == "inline-job"
    first = sent["inputConfig"]["requests"]["requests"][0]["request"]
    assert first["contents"][0]["parts"][0]["text"] == "question number 0"
    assert first["generationConfig"]["temperature"] == 0.2
    assert first["systemInstruction"]["parts"][0]["text"] == "be brief"

    outcome = backend.collect(spec, batch_id)
    assert outcome["ok"] is True
    assert outcome["reconciliation"] == {
        "submitted": 6, "succeeded": 6, "failed": 0, "missing": 0, "coverage": 1.0, "fallback": 0
    }  # fmt: skip
    assert outcome["retry_file"] is None
    assert outcome["tokens"]["total"] > 0 and outcome["cost_usd"] > 0
    assert outcome["summary"].startswith("rows 6/6 ok, 0 failed, 0 missing")
    rows = read_jsonl(outcome["output"])
    assert [r["key"] for r in rows] == [f"row-{i}" for i in range(6)]
    assert {r["source"] for r in rows} == {"batch"}
    text = rows[3]["response"]["candidates"][0]["content"]["parts"][0]["text"]
    assert text == "answer to: question number 3"
    assert emu.count("files.upload_start") == 0
    assert "SUCCEEDED" in backend.logs(batch_id)


def test_file_batch_end_to_end(emu, backend, tmp_path) -> None:
    emu.script_batch("file-job", BatchScript(queued_s=2 * MINUTES, running_s=10 * MINUTES))
    spec = make_spec(tmp_path, "file-job", 5, inline_threshold_rows=3)
    batch_id = backend.submit(spec)
    assert emu.count("files.upload_start") == 1 and emu.count("files.upload_bytes") == 1
    assert emu.last_body["batches.create"]["batch"]["inputConfig"]["fileName"].startswith("files/")

    wait_final(backend, batch_id)
    outcome = backend.collect(spec, batch_id)
    assert outcome["ok"] is True
    assert emu.count("files.download") == 1
    rows = read_jsonl(spec.options["output"])
    assert [r["key"] for r in rows] == [f"row-{i}" for i in range(5)]
    assert all("response" in r for r in rows)


@pytest.mark.parametrize("threshold", [1000, 2], ids=["inline-echoed-keys", "file"])
def test_dropped_rows_are_missing_with_a_retry_file(emu, backend, tmp_path, threshold) -> None:
    emu.script_batch("lossy", BatchScript(running_s=MINUTES, drop_rows=3, echo_metadata=True))
    spec = make_spec(tmp_path, "lossy", 8, inline_threshold_rows=threshold)
    batch_id = backend.submit(spec)
    wait_final(backend, batch_id)

    outcome = backend.collect(spec, batch_id)
    assert outcome["ok"] is False
    assert outcome["reconciliation"]["missing"] == 3
    assert outcome["reconciliation"]["succeeded"] == 5
    assert outcome["reconciliation"]["coverage"] == pytest.approx(5 / 8)
    assert "rows 5/8 ok, 0 failed, 3 missing" in outcome["summary"]
    assert len(read_jsonl(outcome["output"])) == 5
    retry = read_jsonl(outcome["retry_file"])
    originals = {r["key"]: r for r in read_jsonl(spec.options["input"])}
    assert [r["key"] for r in retry] == ["row-5", "row-6", "row-7"]
    assert retry == [originals[r["key"]] for r in retry]
    assert Path(outcome["retry_file"]).name == "lossy.retry.jsonl"


def test_row_errors_count_as_failed(emu, backend, tmp_path) -> None:
    emu.script_batch("errs", BatchScript(error_keys=["row-1"], error_indices=[3]))
    spec = make_spec(tmp_path, "errs", 5, inline_threshold_rows=2)
    batch_id = backend.submit(spec)
    wait_final(backend, batch_id)

    outcome = backend.collect(spec, batch_id)
    rec = outcome["reconciliation"]
    assert (rec["succeeded"], rec["failed"], rec["missing"]) == (3, 2, 0)
    assert outcome["ok"] is False
    errors = {r["key"]: r["error"] for r in read_jsonl(outcome["output"]) if "error" in r}
    assert set(errors) == {"row-1", "row-3"} and errors["row-1"]["code"] == 500
    assert [r["key"] for r in read_jsonl(outcome["retry_file"])] == ["row-1", "row-3"]


def test_stale_retry_file_is_removed_when_everything_succeeds(emu, backend, tmp_path) -> None:
    spec = make_spec(tmp_path, "clean", 2)
    stale = GeminiJobOptions.from_spec(spec).retry_file
    stale.parent.mkdir(parents=True)
    stale.write_text("old\n")
    batch_id = backend.submit(spec)
    wait_final(backend, batch_id)
    assert backend.collect(spec, batch_id)["retry_file"] is None
    assert not stale.exists()


@pytest.mark.parametrize("final", ["FAILED", "EXPIRED"])
def test_failed_batch_reports_everything_missing(emu, backend, tmp_path, final) -> None:
    emu.script_batch("doomed", BatchScript(running_s=MINUTES, final=final))
    spec = make_spec(tmp_path, "doomed", 4)
    batch_id = backend.submit(spec)
    assert wait_final(backend, batch_id).state == ExternalState.FAILED
    outcome = backend.collect(spec, batch_id)
    assert outcome["ok"] is False and outcome["reconciliation"]["missing"] == 4
    assert len(read_jsonl(outcome["retry_file"])) == 4


def test_unknown_state_counts_as_running(emu, backend, tmp_path) -> None:
    emu.script_batch("odd", BatchScript(final="BATCH_STATE_SOMETHING_NEW"))
    with pytest.warns(UserWarning):  # google-genai warns about the unknown enum value
        batch_id = backend.submit(make_spec(tmp_path, "odd", 1))
        status = backend.status(batch_id)
    assert status.state == ExternalState.RUNNING
    assert status.extra["batch_state"] == "SOMETHING_NEW"


def test_stuck_batch_fallback_answers_every_row(emu, tmp_path) -> None:
    backend = make_backend(emu, fallback_concurrency=3)
    script = BatchScript(queued_s=MINUTES, final="stuck", done_on_cancel=4, echo_metadata=True)
    emu.script_batch("stuck", script)
    spec = make_spec(tmp_path, "stuck", 10)
    batch_id = backend.submit(spec)
    wait_status(backend, batch_id, lambda s: s.state == ExternalState.RUNNING)

    outcome = backend.fallback(spec, batch_id)
    assert emu.count("batches.cancel") == 1
    assert emu.batch_state(batch_id) == "BATCH_STATE_CANCELLED"
    assert outcome["ok"] is True
    rec = outcome["reconciliation"]
    assert (rec["succeeded"], rec["missing"], rec["fallback"]) == (10, 0, 6)
    assert emu.count("models.generateContent") == 6
    sent = emu.last_body["models.generateContent"]
    assert sent["systemInstruction"]["parts"][0]["text"] == "be brief"
    assert sent["generationConfig"] == {"temperature": 0.2}
    assert "6 via fallback" in outcome["summary"]
    rows = read_jsonl(outcome["output"])
    assert [r["key"] for r in rows] == [f"row-{i}" for i in range(10)]
    assert all("response" in r for r in rows)
    assert [r["source"] for r in rows] == ["batch"] * 4 + ["fallback"] * 6
    assert outcome["retry_file"] is None


def test_fallback_waits_for_a_slow_cancel_and_pays_only_for_unfinished_rows(emu, tmp_path) -> None:
    backend = make_backend(emu, cancel_wait=QUICK_CANCEL)
    # the cancel takes 10 emulated minutes (0.15 s); 4 rows finish meanwhile
    script = BatchScript(final="stuck", done_on_cancel=4, cancel_delay_s=10 * MINUTES)
    emu.script_batch("slow-cancel", script)
    spec = make_spec(tmp_path, "slow-cancel", 10, inline_threshold_rows=2)
    batch_id = backend.submit(spec)

    outcome = backend.fallback(spec, batch_id)
    assert emu.count("batches.cancel") == 1
    assert emu.count("batches.get") >= 3  # read running after the cancel, polled, then final
    assert emu.batch_state(batch_id) == "BATCH_STATE_CANCELLED"
    assert emu.count("models.generateContent") == 6  # the 4 finished rows are not re-sent
    rec = outcome["reconciliation"]
    assert (rec["succeeded"], rec["missing"], rec["fallback"]) == (10, 0, 6)
    rows = read_jsonl(outcome["output"])
    assert [r["source"] for r in rows] == ["batch"] * 4 + ["fallback"] * 6
    assert outcome["ok"] is True and "after the cancel" not in outcome["summary"]


def test_fallback_retries_rows_that_errored_in_the_batch(emu, backend, tmp_path) -> None:
    emu.script_batch("half", BatchScript(error_indices=[0, 2]))
    spec = make_spec(tmp_path, "half", 3)
    batch_id = backend.submit(spec)
    wait_final(backend, batch_id)
    outcome = backend.fallback(spec, batch_id)
    assert emu.count("batches.cancel") == 0  # already final: nothing to cancel
    assert outcome["reconciliation"]["fallback"] == 2
    assert outcome["reconciliation"]["succeeded"] == 3
    rows = read_jsonl(outcome["output"])
    assert [r["source"] for r in rows] == ["fallback", "batch", "fallback"]


def test_fallback_none_cancels_and_collects_without_on_demand_calls(emu, backend, tmp_path) -> None:
    emu.script_batch("no-fb", BatchScript(final="stuck", done_on_cancel=1, echo_metadata=True))
    spec = make_spec(tmp_path, "no-fb", 3, fallback="none")
    outcome = backend.fallback(spec, backend.submit(spec))
    assert emu.count("models.generateContent") == 0
    assert outcome["ok"] is False
    assert (outcome["reconciliation"]["succeeded"], outcome["reconciliation"]["missing"]) == (1, 2)
    assert [r["key"] for r in read_jsonl(outcome["retry_file"])] == ["row-1", "row-2"]


def test_retry_policy_backs_off_exponentially_with_jitter_and_a_cap() -> None:
    policy = RetryPolicy(backoff=Backoff(initial=1, factor=2, max=5, jitter=0.5))
    assert [policy.backoff.delay(n, lambda: 0.0) for n in range(4)] == [1, 2, 4, 5]
    assert policy.backoff.delay(0, lambda: 0.999) == pytest.approx(1.4995)
    assert policy.http_retry_options().attempts == 4


def test_job_options_are_checked(tmp_path) -> None:
    with pytest.raises(PermanentBackendError, match="lack"):
        GeminiJobOptions.from_spec(JobSpec("x", "gemini_batch", {"model": "m"}))
    opts = GeminiJobOptions.from_spec(make_spec(tmp_path, "x", 1, sla=1800.0))
    assert opts.sla_s == 1800.0 and opts.inline_threshold_rows == 1000
    assert opts.retry_file == opts.output.with_name("x.retry.jsonl")


def test_status_many_lists_once_and_leaves_unlisted_ids_out(emu, backend, tmp_path) -> None:
    emu.script_batch("slow", BatchScript(final="stuck"))
    ids = [backend.submit(make_spec(tmp_path, label, 1)) for label in ("slow", "quick", "other")]
    statuses = backend.status_many(ids[:2])
    assert statuses[ids[0]].state == ExternalState.RUNNING
    assert statuses[ids[1]].state == ExternalState.SUCCEEDED
    assert emu.count("batches.list") == 1 and emu.count("batches.get") == 0
    emu.calls.clear()
    small = make_backend(emu, list_limit=1)  # the listing stops early: the watcher asks the rest
    assert len(small.status_many(ids)) == 1
    assert emu.count("batches.get") == 0


def test_503_503_then_200_succeeds(emu, backend, tmp_path) -> None:
    batch_id = backend.submit(make_spec(tmp_path, "flaky", 2))
    emu.inject_errors([503, 503], endpoint="batches.get")
    assert backend.status(batch_id).extra["batch_state"] == "SUCCEEDED"
    assert [c[2] for c in emu.calls if c[0] == "batches.get"] == [503, 503, 200]


def test_the_sdk_never_repeats_a_create(emu, backend, tmp_path) -> None:
    emu.inject_errors([503, 503], endpoint="batches.create")  # refused: no batch made
    with pytest.raises(TransientBackendError, match="503"):
        backend.submit(make_spec(tmp_path, "flaky", 2))
    assert emu.count("batches.create") == 1 and emu.batches() == []


def test_results_download_is_retried_by_the_backend(emu, backend, tmp_path) -> None:
    spec = make_spec(tmp_path, "dl", 3, inline_threshold_rows=1)
    batch_id = backend.submit(spec)
    wait_final(backend, batch_id)
    emu.inject_errors([503, 500], endpoint="files.download")
    assert backend.collect(spec, batch_id)["ok"] is True
    assert emu.count("files.download") == 3


def test_persistent_5xx_becomes_transient_error(emu, backend, tmp_path) -> None:
    batch_id = backend.submit(make_spec(tmp_path, "down", 1))
    emu.inject_errors([503] * 4, endpoint="batches.get")
    with pytest.raises(TransientBackendError, match="503"):
        backend.status(batch_id)
    assert emu.count("batches.get") == 4


def test_connection_refused_is_transient(emu, tmp_path) -> None:
    settings = Settings(gemini_base_url="http://127.0.0.1:9", gemini_api_key=SecretStr(KEY))
    quick = RetryPolicy(attempts=2, backoff=replace(RetryPolicy().backoff, initial=0.01))
    client = build_gemini_client(settings, retry=quick)
    backend = GeminiBatchBackend(client, retry=FAST)
    with pytest.raises(TransientBackendError) as info:
        backend.status("batches/nope")
    assert KEY not in str(info.value)


def test_400_fails_fast_with_the_api_message(emu, backend, tmp_path) -> None:
    emu.inject_errors([400], endpoint="batches.create", message="model gemini-9 is not supported")
    with pytest.raises(PermanentBackendError, match="model gemini-9 is not supported"):
        backend.submit(make_spec(tmp_path, "bad", 2))
    assert emu.count("batches.create") == 1


def test_unknown_batch_is_permanent(backend) -> None:
    with pytest.raises(PermanentBackendError, match="404"):
        backend.status("batches/does-not-exist")


def test_bad_input_reports_every_line_and_submits_nothing(emu, backend, tmp_path) -> None:
    bad = tmp_path / "bad.jsonl"
    good = json.dumps({"key": "a", "request": {"contents": [{"parts": [{"text": "hi"}]}]}})
    bad.write_text(
        "\n".join(
            [
                good,
                "",  # 2 blank
                '{"key": "b",',  # 3-4 split record
                ' "request": {"contents": [{"parts": [{"text": "x"}]}]}}',
                "{not json",  # 5
                json.dumps({"key": 7, "request": {"contents": [{}]}}),  # 6
                good,  # 7 duplicate of line 1
                json.dumps({"key": "c", "request": {}}),  # 8
            ]
        )
        + "\n"
    )
    spec = JobSpec(
        "bad", "gemini_batch", {"model": "m", "input": str(bad), "output": str(tmp_path / "o")}
    )
    with pytest.raises(InputFileError) as info:
        backend.submit(spec)
    assert [p.line for p in info.value.problems] == [2, 3, 5, 6, 7, 8]
    assert "record split across lines" in str(info.value)
    assert "first on line 1" in str(info.value)
    assert emu.count() == 0


def test_api_key_never_leaks(emu, tmp_path) -> None:
    wrong = "wrong-key-0123456789abcdef"
    emu.echo_key_in_errors = True  # the server puts the key it was sent in its 401 message
    backend = make_backend(emu, key=wrong)
    with pytest.raises(PermanentBackendError) as info:
        backend.submit(make_spec(tmp_path, "auth", 1))
    assert "401" in str(info.value) and "('***')" in str(info.value)  # echoed, then scrubbed
    assert emu.count("batches.create") == 1
    for text in (str(info.value), repr(info.value), repr(backend), backend.logs("batches/x")):
        assert wrong not in text


def test_client_key_resolution(emu, monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    with pytest.raises(PermanentBackendError, match="no Gemini API key"):
        build_gemini_client(Settings(gemini_base_url=emu.base_url))
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    client = build_gemini_client(Settings(gemini_base_url=emu.base_url), retry=FAST)
    batch_id = GeminiBatchBackend(client).submit(make_spec(tmp_path, "env-key", 1))
    assert batch_id.startswith("batches/")


def test_close_closes_the_client_and_later_calls_fail_clearly(emu, tmp_path) -> None:
    backend = make_backend(emu)
    external_id = backend.submit(make_spec(tmp_path, "closing", 2))
    assert capabilities(backend) == Capabilities(backend, backend, backend, backend)
    backend.close()
    backend.close()  # twice is fine: the night's cleanup may run after an early close
    closed = "the Gemini client is closed (its night has ended)"
    with pytest.raises(PermanentBackendError, match=re.escape(f"get batch: {closed}")):
        backend.status(external_id)
    assert backend.status_many([external_id, "batches/other"]) == {}  # each asked singly
    with pytest.raises(PermanentBackendError, match="closed"):
        backend.status("batches/other")
    with pytest.raises(PermanentBackendError, match="closed"):
        backend.submit(make_spec(tmp_path, "late", 1))
    with pytest.raises(RuntimeError, match="closed"):  # the SDK's own client: really closed
        backend._client.batches.get(name=external_id)


def test_the_fallback_answers_rows_while_the_job_s_own_spend_cap_leaves_room(emu, tmp_path) -> None:
    backend = make_backend(emu, fallback_concurrency=3)
    script = BatchScript(queued_s=MINUTES, final="stuck", done_on_cancel=4, echo_metadata=True)
    emu.script_batch("capped", script)
    # $1 a token: a batch row (4 + 7 tokens at half price) $5.50, an on-demand row $11
    prices = {"gemini-2.5-flash": {"input": 1e6, "output": 1e6}}
    spec = make_spec(tmp_path, "capped", 10, prices=prices, spend={"usd": 60})
    batch_id = backend.submit(spec)
    wait_status(backend, batch_id, lambda s: s.state == ExternalState.RUNNING)

    outcome = backend.fallback(spec, batch_id)
    # $22 kept from the batch; one row measured ($33), two more fit ($55); a fourth would not
    assert emu.count("models.generateContent") == 3
    assert outcome["cost_usd"] == 55.0 and outcome["cost_usd"] <= 60
    rec = outcome["reconciliation"]
    assert (rec["succeeded"], rec["missing"], rec["fallback"]) == (7, 3, 3)
    assert "spend cap of the job: $55.00 of $60 spent, 3 row(s) not answered" in outcome["summary"]
    assert [r["key"] for r in read_jsonl(outcome["retry_file"])] == ["row-7", "row-8", "row-9"]
    assert outcome["ok"] is False
