"""GeminiBatchBackend results: inline matching, the submit manifest, cancelled batches,
per-id status_many failures and key-free error chains (real google-genai client, emulator)."""

from __future__ import annotations

import json
import time
import traceback
from pathlib import Path

import pytest

from nightshift.backends.base import ExternalState, JobStatus
from nightshift.backends.gemini.batch import GeminiBatchBackend
from nightshift.backends.gemini.results import manifest_path
from nightshift.backends.gemini.wait import CancelWait
from nightshift.backoff import Backoff
from nightshift.errors import BackendError, PermanentBackendError, TransientBackendError
from nightshift.sandbox.gemini_emulator import BatchScript, GeminiEmulator
from tests.backends.test_gemini_backend import (
    KEY,
    MINUTES,
    make_backend,
    make_spec,
    read_jsonl,
    write_input,
)
from tests.support import read_until, wait_final, wait_status

OBJECT_DETAILS = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "X"}]


@pytest.fixture
def backend(emu: GeminiEmulator) -> GeminiBatchBackend:
    return make_backend(emu)


def answer_text(row: dict) -> str:
    return str(row["response"]["candidates"][0]["content"]["parts"][0]["text"])


def wait_running(backend: GeminiBatchBackend, batch_id: str) -> None:
    wait_status(backend, batch_id, lambda s: s.state == ExternalState.RUNNING)


# -- 1. inline results are never matched by a guessed position --------------------------------
def test_inline_row_dropped_in_the_middle_without_echoed_keys_matches_nothing(
    emu, backend, tmp_path
) -> None:
    emu.script_batch("mid", BatchScript(drop_keys=["row-1"]))  # echo_metadata off
    spec = make_spec(tmp_path, "mid", 5)
    batch_id = backend.submit(spec)
    wait_final(backend, batch_id)

    outcome = backend.collect(spec, batch_id)
    assert outcome["ok"] is False
    rec = outcome["reconciliation"]
    assert (rec["succeeded"], rec["failed"], rec["missing"]) == (0, 0, 5)
    note = "4 results for 5 rows: cannot match inline results by position"
    assert note in outcome["summary"] and note in backend.logs(batch_id)
    assert read_jsonl(outcome["output"]) == []
    assert [r["key"] for r in read_jsonl(outcome["retry_file"])] == [f"row-{i}" for i in range(5)]


def test_inline_row_dropped_in_the_middle_with_echoed_keys_matches_by_key(
    emu, backend, tmp_path
) -> None:
    emu.script_batch("mid-echo", BatchScript(drop_keys=["row-1"], echo_metadata=True))
    spec = make_spec(tmp_path, "mid-echo", 5)
    batch_id = backend.submit(spec)
    wait_final(backend, batch_id)

    outcome = backend.collect(spec, batch_id)
    rec = outcome["reconciliation"]
    assert (rec["succeeded"], rec["missing"]) == (4, 1)
    rows = read_jsonl(outcome["output"])
    assert [r["key"] for r in rows] == ["row-0", "row-2", "row-3", "row-4"]
    for row in rows:  # each answer belongs to its own question
        assert answer_text(row) == f"answer to: question number {row['key'][4:]}"
    assert [r["key"] for r in read_jsonl(outcome["retry_file"])] == ["row-1"]
    assert "matched by echoed key" in outcome["summary"]


def test_unmatchable_inline_results_send_every_row_to_the_fallback(emu, backend, tmp_path) -> None:
    emu.script_batch("mid-fb", BatchScript(drop_keys=["row-2"]))
    spec = make_spec(tmp_path, "mid-fb", 4)
    batch_id = backend.submit(spec)
    wait_final(backend, batch_id)

    outcome = backend.fallback(spec, batch_id)
    assert emu.count("models.generateContent") == 4
    assert outcome["ok"] is True and outcome["reconciliation"]["fallback"] == 4
    rows = read_jsonl(outcome["output"])
    assert [r["source"] for r in rows] == ["fallback"] * 4
    assert [answer_text(r) for r in rows] == [f"answer to: question number {i}" for i in range(4)]
    assert "cannot match inline results by position" in outcome["summary"]


def test_reordered_inline_results_with_echoed_keys_match_by_key(emu, backend, tmp_path) -> None:
    # as many results as rows, but every echoed key disagrees with its position
    emu.script_batch("mixed", BatchScript(shuffle=True, echo_metadata=True, error_keys=["row-2"]))
    spec = make_spec(tmp_path, "mixed", 5)
    batch_id = backend.submit(spec)
    wait_final(backend, batch_id)

    outcome = backend.collect(spec, batch_id)
    rec = outcome["reconciliation"]
    assert (rec["succeeded"], rec["failed"], rec["missing"]) == (4, 1, 0)
    rows = read_jsonl(outcome["output"])
    assert [r["key"] for r in rows] == [f"row-{i}" for i in range(5)]
    for row in rows:  # each answer (or error) belongs to its own question
        if row["key"] == "row-2":
            assert row["error"]["message"] == "emulated row error for row-2"
        else:
            assert answer_text(row) == f"answer to: question number {row['key'][4:]}"
    assert (
        "5 results for 5 rows: matched by echoed key (responses out of input order)"
        in (outcome["summary"])
    )


def test_reordered_inline_results_without_keys_are_taken_in_order(emu, backend, tmp_path) -> None:
    # no echoed keys and equal counts: position is all there is (the API keeps input order)
    emu.script_batch("blind", BatchScript(shuffle=True))
    spec = make_spec(tmp_path, "blind", 3)
    batch_id = backend.submit(spec)
    wait_final(backend, batch_id)
    outcome = backend.collect(spec, batch_id)
    assert outcome["reconciliation"]["succeeded"] == 3
    rows = read_jsonl(outcome["output"])
    assert answer_text(rows[0]) == "answer to: question number 2"  # rotated by the emulator


# -- 2. status_many: one bad id never fails the others -----------------------------------------
def test_status_many_reports_an_unknown_batch_for_that_id_only(emu, backend, tmp_path) -> None:
    good = backend.submit(make_spec(tmp_path, "good", 1))
    statuses = backend.status_many([good, "batches/does-not-exist"])
    assert isinstance(statuses[good], JobStatus)
    assert statuses[good].state == ExternalState.SUCCEEDED
    assert "batches/does-not-exist" not in statuses  # the watcher asks it on a call of its own
    with pytest.raises(PermanentBackendError, match="404"):
        backend.status("batches/does-not-exist")


def test_status_many_survives_an_operation_the_sdk_cannot_parse(emu, backend, tmp_path) -> None:
    script = BatchScript(running_s=MINUTES, error_indices=[0], error_details=OBJECT_DETAILS)
    emu.script_batch("unparsable", script)
    emu.script_batch("fine", BatchScript(final="stuck"))
    bad = backend.submit(make_spec(tmp_path, "unparsable", 1))
    good = backend.submit(make_spec(tmp_path, "fine", 1))
    # wait for the bad batch to end: only then does it carry the object-valued details
    read_until(lambda: emu.batch_state(bad), lambda s: s == "BATCH_STATE_SUCCEEDED", 5, bad, 0.01)

    statuses = backend.status_many([bad, good])
    assert emu.count("batches.list") == 1  # the listing failed as a whole ...
    assert bad not in statuses  # ... so each is asked on a call of its own:
    assert backend.status(good).state == ExternalState.RUNNING  # the good one has its state
    with pytest.raises(PermanentBackendError, match="ValidationError"):
        backend.status(bad)


def test_status_many_raises_only_when_the_listing_itself_is_down(emu, backend, tmp_path) -> None:
    ids = [backend.submit(make_spec(tmp_path, f"j{i}", 1)) for i in range(2)]
    emu.inject_errors([503] * 4, endpoint="batches.list")
    with pytest.raises(TransientBackendError, match="503"):
        backend.status_many(ids)


# -- 3. the API key is in no chained exception ----------------------------------------------
def _chain_texts(exc: BaseException) -> list[str]:
    texts = ["".join(traceback.format_exception(exc)), str(exc), repr(exc)]
    seen: BaseException | None = exc
    while seen is not None:
        texts += [str(seen), repr(seen)]
        seen = seen.__cause__ or seen.__context__
    return texts


def test_wrong_key_echoed_by_the_server_is_in_no_exception_text(emu, tmp_path) -> None:
    leaked = "AIzaLEAK-nightshift-0b7e5c"
    emu.echo_key_in_errors = True
    backend = make_backend(emu, key=leaked)
    with pytest.raises(PermanentBackendError) as info:
        backend.submit(make_spec(tmp_path, "leak", 1))
    assert "401" in str(info.value) and "***" in str(info.value)  # the server did echo it
    assert info.value.__cause__ is None and info.value.__context__ is None
    for text in _chain_texts(info.value):
        assert leaked not in text


@pytest.mark.parametrize(
    ("status", "error"), [(400, PermanentBackendError), (503, TransientBackendError)]
)
def test_key_in_an_api_error_message_is_in_no_exception_text(emu, tmp_path, status, error) -> None:
    backend = make_backend(emu)
    batch_id = backend.submit(make_spec(tmp_path, "k", 1))
    emu.inject_errors([status] * 4, endpoint="batches.get", message=f"request with key {KEY}")
    with pytest.raises(error) as info:
        backend.status(batch_id)
    for text in _chain_texts(info.value):
        assert KEY not in text
    # the same for a failure handed back by status_many (the listing's key is refused)
    emu.inject_errors([403], endpoint="batches.list", message=f"list {KEY}")
    value = backend.status_many([batch_id, "batches/other"])[batch_id]
    assert isinstance(value, BackendError)
    for text in _chain_texts(value):
        assert KEY not in text


def test_fallback_row_errors_carry_the_http_code_without_the_key(emu, backend, tmp_path) -> None:
    emu.script_batch("fb-err", BatchScript(final="FAILED"))
    spec = make_spec(tmp_path, "fb-err", 1)
    batch_id = backend.submit(spec)
    emu.inject_errors([400], endpoint="models.generateContent", message=f"bad {KEY}")
    outcome = backend.fallback(spec, batch_id)
    [row] = read_jsonl(outcome["output"])
    assert row["source"] == "fallback" and row["error"]["code"] == 400
    assert KEY not in json.dumps(row)


# -- 5. the submitted rows survive the process ------------------------------------------------
def test_a_fresh_backend_collects_against_what_was_submitted(emu, tmp_path) -> None:
    emu.script_batch("kept", BatchScript(running_s=MINUTES, drop_keys=["row-2"]))
    spec = make_spec(tmp_path, "kept", 4, inline_threshold_rows=2)  # file mode: keys in file
    batch_id = make_backend(emu).submit(spec)
    manifest = manifest_path(Path(spec.options["output"]), batch_id)
    assert manifest.name.startswith(".kept.jsonl.batches_") and manifest.exists()
    original = {r["key"]: r for r in read_jsonl(spec.options["input"])}
    write_input(Path(spec.options["input"]), 7)  # tomorrow's rows overwrite the input
    Path(spec.options["input"]).write_text(
        Path(spec.options["input"]).read_text().replace("question", "changed")
    )

    fresh = make_backend(emu)  # a new process re-attaches by id
    wait_final(fresh, batch_id)
    outcome = fresh.collect(spec, batch_id)
    rec = outcome["reconciliation"]
    assert (rec["submitted"], rec["succeeded"], rec["missing"]) == (4, 3, 1)
    assert [r["key"] for r in read_jsonl(outcome["output"])] == ["row-0", "row-1", "row-3"]
    assert read_jsonl(outcome["retry_file"]) == [original["row-2"]]  # the submitted request
    assert "no submit manifest" not in outcome["summary"]

    fresh_again = make_backend(emu)
    outcome = fresh_again.fallback(spec, batch_id)
    assert emu.count("models.generateContent") == 1
    sent = emu.last_body["models.generateContent"]["contents"][0]["parts"][0]["text"]
    assert sent == "question number 2"
    assert outcome["reconciliation"]["submitted"] == 4 and outcome["ok"] is True


def test_without_a_manifest_collect_reads_the_input_and_says_so(emu, backend, tmp_path) -> None:
    spec = make_spec(tmp_path, "old", 3)
    batch_id = backend.submit(spec)
    manifest_path(Path(spec.options["output"]), batch_id).unlink()
    wait_final(backend, batch_id)
    outcome = backend.collect(spec, batch_id)
    assert outcome["ok"] is True
    assert "no submit manifest: reconciled against the current input file" in outcome["summary"]


def test_a_damaged_manifest_is_a_permanent_error(emu, backend, tmp_path) -> None:
    spec = make_spec(tmp_path, "torn", 2)
    batch_id = backend.submit(spec)
    manifest_path(Path(spec.options["output"]), batch_id).write_text('{"rows": [')
    with pytest.raises(PermanentBackendError, match="damaged manifest"):
        backend.collect(spec, batch_id)


# -- 6. a batch cancelled at the deadline is collected -----------------------------------------
@pytest.mark.parametrize(
    ("threshold", "echo"), [(2, False), (1000, True)], ids=["file", "inline-echoed-keys"]
)
def test_collect_after_a_deadline_cancel_keeps_what_finished(
    emu, backend, tmp_path, threshold, echo
) -> None:
    emu.script_batch("late", BatchScript(final="stuck", done_on_cancel=2, echo_metadata=echo))
    spec = make_spec(tmp_path, "late", 5, inline_threshold_rows=threshold)
    batch_id = backend.submit(spec)
    wait_running(backend, batch_id)
    backend.cancel(batch_id)
    assert backend.status(batch_id).state == ExternalState.CANCELLED

    outcome = backend.collect(spec, batch_id)
    assert outcome["ok"] is False
    rec = outcome["reconciliation"]
    assert (rec["submitted"], rec["succeeded"], rec["missing"]) == (5, 2, 3)
    assert [r["key"] for r in read_jsonl(outcome["output"])] == ["row-0", "row-1"]
    retry = [r["key"] for r in read_jsonl(outcome["retry_file"])]
    assert retry == ["row-2", "row-3", "row-4"]
    assert "batch CANCELLED" in outcome["summary"]


def test_collect_after_a_cancel_with_no_results_retries_every_row(emu, backend, tmp_path) -> None:
    emu.script_batch("none-done", BatchScript(final="stuck"))
    spec = make_spec(tmp_path, "none-done", 3)
    batch_id = backend.submit(spec)
    backend.cancel(batch_id)
    outcome = backend.collect(spec, batch_id)
    assert outcome["ok"] is False and outcome["reconciliation"]["missing"] == 3
    assert read_jsonl(outcome["output"]) == []
    assert len(read_jsonl(outcome["retry_file"])) == 3


def test_collect_after_a_slow_cancel_includes_rows_finished_meanwhile(
    clocked_emu, tmp_path
) -> None:
    emu, clock = clocked_emu
    backend = make_backend(
        emu, cancel_wait=CancelWait(timeout_s=30, backoff=Backoff(initial=0.01, factor=2, max=5.0))
    )
    script = BatchScript(final="stuck", done_on_cancel=3, cancel_delay_s=10 * MINUTES)
    emu.script_batch("slow", script)
    spec = make_spec(tmp_path, "slow", 5, inline_threshold_rows=2)
    batch_id = backend.submit(spec)
    backend.cancel(batch_id)
    assert backend.status(batch_id).state == ExternalState.RUNNING  # the cancel is not done yet
    clock.now += 10 * MINUTES / emu.time_scale  # now it is

    outcome = backend.collect(spec, batch_id)
    rec = outcome["reconciliation"]
    assert (rec["succeeded"], rec["missing"]) == (3, 2)
    assert [r["key"] for r in read_jsonl(outcome["output"])] == ["row-0", "row-1", "row-2"]
    assert [r["key"] for r in read_jsonl(outcome["retry_file"])] == ["row-3", "row-4"]
    assert "batch CANCELLED" in outcome["summary"]
    assert "after the cancel" not in outcome["summary"]


def test_collect_gives_up_on_a_cancel_that_never_settles_and_says_so(emu, tmp_path) -> None:
    wait = CancelWait(timeout_s=0.2, backoff=Backoff(initial=0.01, factor=2, max=0.05))
    backend = make_backend(emu, cancel_wait=wait)
    emu.script_batch("hung", BatchScript(final="stuck", done_on_cancel=3, cancel_delay_s=1e9))
    spec = make_spec(tmp_path, "hung", 3)
    batch_id = backend.submit(spec)
    backend.cancel(batch_id)
    started = time.monotonic()
    outcome = backend.collect(spec, batch_id)
    assert time.monotonic() - started < 1.5  # bounded by the wait
    assert emu.count("batches.get") >= 3
    assert outcome["ok"] is False and outcome["reconciliation"]["missing"] == 3
    assert "batch still RUNNING" in outcome["summary"] and "after the cancel" in outcome["summary"]
    assert "after the cancel" in " ".join(outcome["notes"])
    assert "after the cancel" in backend.logs(batch_id)
