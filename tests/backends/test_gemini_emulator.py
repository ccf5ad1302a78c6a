"""The Gemini emulator, driven through the real google-genai client and raw HTTP."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from google import genai
from google.genai import errors, types

from nightshift.sandbox.gemini_emulator import BatchScript, GeminiEmulator, fake_response
from tests.support import FakeClock, wait_until

KEY = "emu-test-key"
MODEL = "gemini-2.5-flash"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def emu(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> Iterator[GeminiEmulator]:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    with GeminiEmulator(time_scale=60, clock=clock) as emulator:
        yield emulator


@pytest.fixture
def client(emu: GeminiEmulator) -> genai.Client:
    retry = types.HttpRetryOptions(attempts=3, initial_delay=0.01, max_delay=0.02, jitter=0)
    options = types.HttpOptions(base_url=emu.base_url, api_version="v1beta", retry_options=retry)
    return genai.Client(vertexai=False, api_key=KEY, http_options=options)


def inline(n: int) -> list[dict]:
    return [{"contents": f"prompt {i}", "metadata": {"key": f"k{i}"}} for i in range(n)]


def test_base_url_is_loopback(emu: GeminiEmulator) -> None:
    assert emu.base_url.startswith("http://127.0.0.1:")


def test_missing_api_key_is_401(emu: GeminiEmulator) -> None:
    request = urllib.request.Request(f"{emu.base_url}/v1beta/batches", method="GET")
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=5)
    assert info.value.code == 401
    assert emu.count("batches.list") == 1


def test_batch_follows_its_script_in_scaled_time(emu, client, clock) -> None:
    # 10 emulated minutes queued, 20 running; time_scale 60 -> 10 s and 20 s of clock
    emu.script_batch("night", BatchScript(queued_s=600, running_s=1200))
    job = client.batches.create(model=MODEL, src=inline(3), config={"display_name": "night"})
    assert job.state == types.JobState.JOB_STATE_PENDING
    clock.now += 11
    assert client.batches.get(name=job.name).state == types.JobState.JOB_STATE_RUNNING
    clock.now += 20
    done = client.batches.get(name=job.name)
    assert done.state == types.JobState.JOB_STATE_SUCCEEDED
    assert done.end_time is not None
    texts = [r.response.text for r in done.dest.inlined_responses]
    assert texts == ["answer to: prompt 0", "answer to: prompt 1", "answer to: prompt 2"]


def test_inline_drop_rows_removes_the_tail_and_errors_by_key_or_index(emu, client) -> None:
    emu.script_batch("x", BatchScript(drop_rows=2, error_keys=["k1"], error_indices=[2]))
    job = client.batches.create(model=MODEL, src=inline(6), config={"display_name": "x"})
    rows = client.batches.get(name=job.name).dest.inlined_responses
    assert len(rows) == 4
    assert [r.error.code if r.error else None for r in rows] == [None, 500, 500, None]


def test_inline_metadata_is_echoed_only_when_the_script_says_so(emu, client) -> None:
    emu.script_batch("echo", BatchScript(echo_metadata=True, drop_keys=["k1"]))
    plain = client.batches.create(model=MODEL, src=inline(3))
    echoed = client.batches.create(model=MODEL, src=inline(3), config={"display_name": "echo"})
    assert [r.metadata for r in client.batches.get(name=plain.name).dest.inlined_responses] == [
        None
    ] * 3
    rows = client.batches.get(name=echoed.name).dest.inlined_responses
    assert [r.metadata for r in rows] == [{"key": "k0"}, {"key": "k2"}]


def test_object_error_details_break_the_sdk_for_get_and_list(emu, client, clock) -> None:
    details = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "X"}]
    emu.script_batch("odd", BatchScript(running_s=60, error_indices=[0], error_details=details))
    job = client.batches.create(model=MODEL, src=inline(1), config={"display_name": "odd"})
    clock.now += 2
    with pytest.raises(ValueError, match="details"):
        client.batches.get(name=job.name)
    with pytest.raises(ValueError, match="details"):
        list(client.batches.list())


def test_wrong_key_can_be_echoed_in_the_401_message(emu, client) -> None:
    emu.api_key, emu.echo_key_in_errors = "another-key", True
    with pytest.raises(errors.ClientError) as info:
        client.models.generate_content(model=MODEL, contents="hi")
    assert KEY in info.value.message and KEY in str(info.value)


def test_default_script_applies_to_unscripted_batches(emu, client) -> None:
    emu.default_script = BatchScript(final="EXPIRED")
    job = client.batches.create(model=MODEL, src=inline(1))
    got = client.batches.get(name=job.name)
    assert got.state == types.JobState.JOB_STATE_EXPIRED and got.dest is None


def test_stuck_batch_never_finishes_and_cancel_keeps_done_rows(emu, client, clock) -> None:
    emu.script_batch("s", BatchScript(final="stuck", done_on_cancel=2))
    job = client.batches.create(model=MODEL, src=inline(5), config={"display_name": "s"})
    clock.now += 10**6
    assert client.batches.get(name=job.name).state == types.JobState.JOB_STATE_RUNNING
    client.batches.cancel(name=job.name)
    got = client.batches.get(name=job.name)
    assert got.state == types.JobState.JOB_STATE_CANCELLED
    assert len(got.dest.inlined_responses) == 2


def test_cancel_delay_keeps_the_batch_running_then_cancels_with_done_rows(
    emu, client, clock
) -> None:
    # 10 emulated minutes for the cancel: 10 s of clock at time_scale 60
    emu.script_batch("slow", BatchScript(final="stuck", done_on_cancel=2, cancel_delay_s=600))
    job = client.batches.create(model=MODEL, src=inline(5), config={"display_name": "slow"})
    client.batches.cancel(name=job.name)
    got = client.batches.get(name=job.name)
    assert got.state == types.JobState.JOB_STATE_RUNNING and got.dest is None
    clock.now += 9
    client.batches.cancel(name=job.name)  # asking again does not restart the delay
    assert client.batches.get(name=job.name).state == types.JobState.JOB_STATE_RUNNING
    clock.now += 2
    got = client.batches.get(name=job.name)
    assert got.state == types.JobState.JOB_STATE_CANCELLED
    assert [r.response.text for r in got.dest.inlined_responses] == [
        "answer to: prompt 0",
        "answer to: prompt 1",
    ]


def test_a_batch_that_finishes_during_the_cancel_delay_succeeds(emu, client, clock) -> None:
    emu.script_batch("late", BatchScript(running_s=300, done_on_cancel=1, cancel_delay_s=600))
    job = client.batches.create(model=MODEL, src=inline(3), config={"display_name": "late"})
    client.batches.cancel(name=job.name)
    clock.now += 60  # 3600 emulated seconds: past both the run and the cancel delay
    got = client.batches.get(name=job.name)
    assert got.state == types.JobState.JOB_STATE_SUCCEEDED
    assert len(got.dest.inlined_responses) == 3


def test_shuffle_puts_no_result_at_its_input_position(emu, client) -> None:
    emu.script_batch("mixed", BatchScript(shuffle=True, echo_metadata=True))
    job = client.batches.create(model=MODEL, src=inline(4), config={"display_name": "mixed"})
    rows = client.batches.get(name=job.name).dest.inlined_responses
    assert [r.metadata["key"] for r in rows] == ["k3", "k0", "k1", "k2"]
    assert [r.response.text for r in rows][:2] == ["answer to: prompt 3", "answer to: prompt 0"]


def test_file_upload_batch_and_results_download(emu, client, tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    rows = [
        {"key": f"r{i}", "request": {"contents": [{"parts": [{"text": f"q{i}"}]}]}} for i in "abc"
    ]
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    emu.script_batch("f", BatchScript(drop_keys=["rb"], error_keys=["rc"]))
    file = client.files.upload(file=source, config={"mime_type": "application/jsonl"})
    assert file.name.startswith("files/") and file.mime_type == "application/jsonl"
    job = client.batches.create(model=MODEL, src=file.name, config={"display_name": "f"})
    out = client.batches.get(name=job.name).dest.file_name
    lines = [json.loads(x) for x in client.files.download(file=out).decode().splitlines()]
    assert [x["key"] for x in lines] == ["ra", "rc"]
    assert lines[0]["response"]["usageMetadata"]["totalTokenCount"] > 0
    assert lines[1]["error"]["code"] == 500
    assert emu.count("files.upload_start") == emu.count("files.upload_bytes") == 1


def test_create_rejects_unknown_input_file(emu, client) -> None:
    with pytest.raises(errors.ClientError) as info:
        client.batches.create(model=MODEL, src="files/nope")
    assert info.value.code == 400 and "does not exist" in info.value.message


def test_list_pages_and_delete(emu, client) -> None:
    names = [client.batches.create(model=MODEL, src=inline(1)).name for _ in range(5)]
    listed = [b.name for b in client.batches.list(config={"page_size": 2})]
    assert sorted(listed) == sorted(names)
    assert emu.count("batches.list") == 3
    client.batches.delete(name=names[0])
    with pytest.raises(errors.ClientError) as info:
        client.batches.get(name=names[0])
    assert info.value.code == 404


def test_generate_content_is_deterministic_with_usage(emu, client) -> None:
    response = client.models.generate_content(model=MODEL, contents="tell me about the night")
    assert response.text == "answer to: tell me about the night"
    usage = response.usage_metadata
    assert usage.total_token_count == usage.prompt_token_count + usage.candidates_token_count
    assert emu.count("models.generateContent") == 1


def test_fake_response_truncates_the_prompt() -> None:
    request = {"contents": [{"parts": [{"text": "x" * 100}]}]}
    assert fake_response(request)["candidates"][0]["content"]["parts"][0]["text"] == (
        "answer to: " + "x" * 40
    )


def test_injected_errors_per_endpoint_and_global(emu, client) -> None:
    emu.inject_errors([503, 503], endpoint="models.generateContent")
    assert client.models.generate_content(model=MODEL, contents="hi").text
    assert emu.count("models.generateContent") == 3
    emu.inject_errors([429])  # global: the next request of any kind
    job = client.batches.create(model=MODEL, src=inline(1))
    assert emu.count("batches.create") == 2 and job.name
    emu.inject_errors([400], message="custom problem")
    with pytest.raises(errors.ClientError, match="custom problem"):
        client.batches.get(name=job.name)


def test_a_lost_answer_still_does_the_work(emu, client) -> None:
    emu.inject_faults("after:503", endpoint="batches.create")
    once = types.CreateBatchJobConfig(
        display_name="lost",
        http_options=types.HttpOptions(retry_options=types.HttpRetryOptions(attempts=1)),
    )
    with pytest.raises(errors.ServerError):
        client.batches.create(model=MODEL, src=inline(1), config=once)
    assert emu.batches(display_name="lost") == ["batches/b000001"]
    assert [c[2] for c in emu.calls] == [503]


def test_a_hanging_answer_does_the_work_and_ends_on_reset(emu) -> None:
    options = types.HttpOptions(base_url=emu.base_url, api_version="v1beta", timeout=1000)
    quick = genai.Client(vertexai=False, api_key=KEY, http_options=options)
    emu.inject_faults("hang", endpoint="batches.create")
    with pytest.raises(Exception, match=r"(?i)timed? ?out"):
        quick.batches.create(model=MODEL, src=inline(1))
    # the work is done, whenever the server thread ran
    wait_until(emu.batches, 10, "the batch to be created", interval=0.01)
    assert len(emu.batches()) == 1
    emu.reset()  # lets the hung answer go
    with pytest.raises(ValueError, match="unknown fault"):
        emu.inject_faults("explode")


def test_a_batch_named_by_a_submission_key_follows_its_label_s_script(emu, client) -> None:
    emu.script_batch("report:x", BatchScript(final="EXPIRED"))
    config = types.CreateBatchJobConfig(display_name="cat/2026-11-29/report:x/2")
    job = client.batches.create(model=MODEL, src=inline(1), config=config)
    assert client.batches.get(name=job.name).state == types.JobState.JOB_STATE_EXPIRED
    other = client.batches.create(
        model=MODEL, src=inline(1), config={"display_name": "cat/2026-11-29/report:xy/1"}
    )
    assert client.batches.get(name=other.name).state == types.JobState.JOB_STATE_SUCCEEDED


def test_wrong_key_is_401_when_the_emulator_knows_the_key(emu, client) -> None:
    emu.api_key = "another-key"
    with pytest.raises(errors.ClientError) as info:
        client.models.generate_content(model=MODEL, contents="hi")
    assert info.value.code == 401


def test_module_entry_point_prints_its_base_url() -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nightshift.sandbox.gemini_emulator",
            "--port",
            "0",
            "--time-scale",
            "100",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        request = urllib.request.Request(f"{url}/v1beta/batches", headers={"x-goog-api-key": "k"})
        with urllib.request.urlopen(request, timeout=5) as reply:
            assert json.load(reply) == {"operations": []}
    finally:
        proc.terminate()
        proc.wait(timeout=5)
