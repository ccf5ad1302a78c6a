"""Patient submits: a burst of 429s costs a wait, never the job nor a duplicate (real
google-genai client against the emulator, the fake agy as a subprocess; fake clocks)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from pydantic import SecretStr

from nightshift.backends.base import JobSpec
from nightshift.backends.cli import CliBackend
from nightshift.backends.gemini.batch import GeminiBatchBackend, build_gemini_client
from nightshift.backends.patience import Patience, retry_after_in, submit_patiently
from nightshift.config.settings import Settings
from nightshift.errors import TransientBackendError
from tests.backends.test_gemini_backend import FAST, KEY, make_spec
from tests.backends.test_gemini_submit import keyed
from tests.support import FakeClock

AGY = [sys.executable, "-m", "nightshift.sandbox.agy"]


def patience(clock: FakeClock, seconds: float = 300.0) -> Patience:
    """Patience on a fake clock: each wait moves the clock instead of sleeping."""
    return Patience(seconds=seconds, clock=clock, sleep=clock.advance, rand=lambda: 0.0)


def test_gemini_five_429s_then_a_create_makes_one_batch(emu, tmp_path) -> None:
    clock = FakeClock()
    settings = Settings(gemini_base_url=emu.base_url, gemini_api_key=SecretStr(KEY))
    client = build_gemini_client(settings, retry=FAST, timeout_s=5)
    backend = GeminiBatchBackend(client, retry=FAST, patience=patience(clock))
    emu.inject_errors([429] * 5, endpoint="batches.create", retry_after=7)
    batch_id = backend.submit(keyed(make_spec(tmp_path, "gen:a", 2)))
    assert emu.batches() == [batch_id]  # exactly one submission made a batch
    assert emu.count("batches.create") == 6
    assert emu.count("batches.list") == 5  # looked for it before every resend
    assert clock() - 1000.0 >= 5 * 7  # the Retry-After was honoured


def test_gemini_patience_runs_out_with_a_transient_error(emu, tmp_path) -> None:
    clock = FakeClock()
    settings = Settings(gemini_base_url=emu.base_url, gemini_api_key=SecretStr(KEY))
    client = build_gemini_client(settings, retry=FAST, timeout_s=5)
    backend = GeminiBatchBackend(client, retry=FAST, patience=patience(clock, seconds=10))
    emu.inject_errors([503] * 50, endpoint="batches.create")
    with pytest.raises(TransientBackendError, match="looks again before creating"):
        backend.submit(keyed(make_spec(tmp_path, "gen:a", 2)))
    assert emu.batches() == []
    assert 10.0 <= clock() - 1000.0 < 11.0  # bounded by its patience


def test_cli_five_429s_then_a_run_makes_one_job(tmp_path: Path) -> None:
    clock = FakeClock()
    calls = tmp_path / "calls.jsonl"
    env = {"AGY_STATE_DIR": str(tmp_path / "agy"), "AGY_BUSY_RUNS": "5"}
    backend = CliBackend(AGY, env={**env, "AGY_CALL_LOG": str(calls)}, patience=patience(clock))
    spec = JobSpec("article", "cli", {"task": "write [queue=0 run=0]", "model": "m"})
    job_id = backend.submit(spec)
    assert [p.stem for p in (tmp_path / "agy" / "jobs").glob("agy-*.json")] == [job_id]
    argvs = [json.loads(line)[:2] for line in calls.read_text().splitlines()]
    assert argvs.count(["run", "--detach"]) == 6
    # a lookup before every resend
    assert argvs.count(["jobs", "list"]) == 5
    assert clock() > 1000.0


def test_the_loop_honours_retry_after_and_looks_before_each_resend() -> None:
    clock = FakeClock(0.0)
    sent: list[float] = []
    looked: list[float] = []

    def send() -> str:
        sent.append(clock())
        if len(sent) < 3:
            raise TransientBackendError("HTTP 429: Retry-After: 20")
        return "job-1"

    def look() -> str | None:
        looked.append(clock())
        return None

    got = submit_patiently(send, look, patience(clock), lambda e: retry_after_in(str(e)))
    assert got == "job-1"
    assert sent == [0.0, 20.0, 40.0] and looked == [20.0, 40.0]


def test_a_job_found_by_the_lookup_is_not_sent_again() -> None:
    clock = FakeClock(0.0)
    sent: list[int] = []

    def send() -> str:
        sent.append(1)
        raise TransientBackendError("timed out")  # the job was made, its answer lost

    assert submit_patiently(send, lambda: "job-1", patience(clock)) == "job-1"
    assert sent == [1]


def test_retry_after_in_text() -> None:
    assert retry_after_in("429 Too Many Requests: retry after 3s") == 3.0
    assert retry_after_in("Retry-After: 1.5") == 1.5
    assert retry_after_in("busy") is None
