"""At-most-once batch creates: a lost answer or a crashed try is found by display name, never
sent again (real google-genai client against the emulator, creates counted there)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from google.genai import types
from pydantic import SecretStr

from nightshift.backends.base import JobSpec
from nightshift.backends.gemini.batch import GeminiBatchBackend, build_gemini_client
from nightshift.backends.gemini.results import read_manifest
from nightshift.config.settings import Settings
from nightshift.errors import PermanentBackendError, TransientBackendError
from nightshift.sandbox.gemini_emulator import GeminiEmulator
from tests.backends.test_gemini_backend import FAST, KEY, make_spec, wait_final

KEY_1 = "nightly/2026-11-29/gen:a/1"


def quick_backend(emu: GeminiEmulator, timeout_s: float = 2.0) -> GeminiBatchBackend:
    """A backend whose client gives up on an answer after ``timeout_s``."""
    settings = Settings(gemini_base_url=emu.base_url, gemini_api_key=SecretStr(KEY))
    client = build_gemini_client(settings, retry=FAST, timeout_s=timeout_s)
    return GeminiBatchBackend(client, retry=FAST)


def keyed(spec: JobSpec, key: str = KEY_1, resume_since: datetime | None = None) -> JobSpec:
    options = {**spec.options, "submission_key": key}
    if resume_since is not None:
        options["resume_since"] = resume_since.isoformat()
    return dataclasses.replace(spec, options=options)


def a_minute_ago() -> datetime:
    return datetime.now(UTC) - timedelta(minutes=1)


def test_the_batch_is_named_by_its_submission_key(emu, tmp_path) -> None:
    batch_id = quick_backend(emu).submit(keyed(make_spec(tmp_path, "gen:a", 2)))
    assert emu.batches(display_name=KEY_1) == [batch_id]
    assert quick_backend(emu).status(batch_id).extra["display_name"] == KEY_1


def test_a_create_that_times_out_is_found_not_sent_again(emu, tmp_path) -> None:
    emu.inject_faults("hang", endpoint="batches.create")
    backend = quick_backend(emu, timeout_s=3.0)
    batch_id = backend.submit(keyed(make_spec(tmp_path, "gen:a", 2)))
    assert emu.count("batches.create") == 1
    assert emu.batches() == [batch_id]
    assert emu.count("batches.list") >= 1  # it looked before deciding


@pytest.mark.parametrize("code", [503, 500, 504])
def test_an_error_after_the_create_is_found_not_sent_again(emu, tmp_path, code) -> None:
    emu.inject_faults(f"after:{code}", endpoint="batches.create")
    backend = quick_backend(emu)
    spec = keyed(make_spec(tmp_path, "gen:a", 3, inline_threshold_rows=1))  # uploaded file
    batch_id = backend.submit(spec)
    assert emu.count("batches.create") == 1 and emu.batches() == [batch_id]
    # found, not made here: its manifest is still written, so collect matches its rows
    assert read_manifest(Path(spec.options["output"]), batch_id) is not None
    wait_final(backend, batch_id)
    assert backend.collect(spec, batch_id)["reconciliation"]["succeeded"] == 3


def test_a_retry_after_a_lost_answer_and_a_failed_lookup_re_attaches(emu, tmp_path) -> None:
    emu.inject_faults("hang", endpoint="batches.create")
    emu.inject_errors([503] * 4, endpoint="batches.list")  # the lookup fails as well
    backend = quick_backend(emu, timeout_s=3.0)
    began = datetime.now(UTC)
    spec = make_spec(tmp_path, "gen:a", 2, inline_threshold_rows=1)
    with pytest.raises(TransientBackendError, match="look"):
        backend.submit(keyed(spec))
    assert emu.count("batches.create") == 1
    # the task is retried (or the night rerun after a crash) with the time the try began
    again = quick_backend(emu).submit(keyed(spec, resume_since=began))
    assert emu.count("batches.create") == 1
    assert emu.batches() == [again]
    assert emu.count("files.upload_start") == 1  # found before uploading again


def test_a_resumed_submit_finds_the_batch_a_crashed_try_made(emu, tmp_path) -> None:
    began = datetime.now(UTC)
    spec = make_spec(tmp_path, "gen:a", 2)
    backend = quick_backend(emu)
    # the crashed try: its create went through, then the process died before recording the id
    config = types.CreateBatchJobConfig(display_name=KEY_1)
    made = backend._client.batches.create(
        model="gemini-2.5-flash", src=[{"contents": "x"}], config=config
    )
    assert backend.submit(keyed(spec, resume_since=began)) == made.name
    assert emu.count("batches.create") == 1
    # another attempt of the same job is another key: created anew
    second = backend.submit(keyed(spec, key="nightly/2026-11-29/gen:a/2", resume_since=began))
    assert second != made.name and emu.count("batches.create") == 2


def test_a_resumed_submit_ignores_same_named_batches_from_before_it_began(emu, tmp_path) -> None:
    backend = quick_backend(emu)
    spec = make_spec(tmp_path, "gen:a", 1)
    old = backend.submit(keyed(spec))
    later = datetime.now(UTC) + timedelta(hours=1)  # the try began long after ``old``
    new = backend.submit(keyed(spec, resume_since=later))
    assert new != old and emu.count("batches.create") == 2


def test_two_batches_of_one_key_fail_the_job_saying_where_to_look(emu, tmp_path) -> None:
    backend = quick_backend(emu)
    spec = make_spec(tmp_path, "gen:a", 1)
    backend.submit(keyed(spec))
    backend.submit(keyed(spec))  # a duplicate made by some other way
    with pytest.raises(PermanentBackendError, match="duplicate") as info:
        backend.submit(keyed(spec, resume_since=a_minute_ago()))
    assert KEY_1 in str(info.value)
    assert emu.count("batches.create") == 2


def test_a_503_before_any_batch_was_made_is_transient_and_the_retry_creates_one(
    emu, tmp_path
) -> None:
    emu.inject_errors([503], endpoint="batches.create")  # refused: nothing made
    backend = quick_backend(emu)
    began = datetime.now(UTC)
    spec = make_spec(tmp_path, "gen:a", 2)
    with pytest.raises(TransientBackendError, match="503"):
        backend.submit(keyed(spec))
    assert emu.batches() == []
    batch_id = backend.submit(keyed(spec, resume_since=began))
    assert emu.batches() == [batch_id] and emu.count("batches.create") == 2


def test_a_rejected_create_is_permanent_without_a_lookup(emu, tmp_path) -> None:
    emu.inject_errors([400], endpoint="batches.create", message="bad model")
    with pytest.raises(PermanentBackendError, match="bad model"):
        quick_backend(emu).submit(keyed(make_spec(tmp_path, "gen:a", 1)))
    assert emu.count("batches.create") == 1 and emu.count("batches.list") == 0


def test_an_unreadable_resume_since_is_permanent(emu, tmp_path) -> None:
    spec = keyed(make_spec(tmp_path, "gen:a", 1))
    spec.options["resume_since"] = "yesterday-ish"
    with pytest.raises(PermanentBackendError, match="resume_since"):
        quick_backend(emu).submit(spec)
    assert emu.count("batches.create") == 0
