"""One hung status call holds one job: a job the listing misses is asked on a call of its own."""

from __future__ import annotations

import sys
from pathlib import Path

from nightshift.backends.base import ExternalState, JobSpec
from nightshift.backends.cli import CliBackend
from nightshift.backoff import Backoff
from nightshift.engine.watcher import Watcher, WatchRequest
from tests.support import wait_final

AGY = [sys.executable, "-m", "nightshift.sandbox.agy"]


def test_a_hung_jobs_get_does_not_hold_back_another_jobs_answer(tmp_path: Path) -> None:
    state = tmp_path / "agy"
    # its own deadline is long: only the answer in hand going on without it passes the test
    backend = CliBackend(AGY, timeout_s=300, env={"AGY_STATE_DIR": str(state)})

    def submit(task: str) -> str:
        return backend.submit(JobSpec("x", "cli", {"task": task, "model": "m"}))

    hung = submit("hidden and hung [unlisted hang_get queue=0 run=600]")
    done = submit("quick [queue=0 run=0]")
    assert wait_final(backend, done).state is ExternalState.SUCCEEDED
    now = [100.0]  # both fall due in the same tick: one listing for the two
    watcher = Watcher(lambda *_: None, clock=lambda: now[0])
    try:
        policy = Backoff(initial=1.0, factor=2.0, max=30.0)
        futures = {
            job_id: watcher.watch(WatchRequest(label=job_id, backend=backend,
                                               external_id=job_id, policy=policy))
            for job_id in (hung, done)
        }  # fmt: skip
        now[0] += 1.0
        watcher.poke()
        # the listing answered for `done` at once: it must not wait for `hung`'s jobs get
        result = futures[done].result(timeout=60)
        assert (result.reason, result.status and result.status.state) == (
            "final",
            ExternalState.SUCCEEDED,
        )
        assert not futures[hung].done()  # its own call is still out, on its own deadline
    finally:
        (state / "release-hang").touch()
        watcher.stop()


def test_a_hung_batches_get_does_not_hold_back_another_batchs_answer(emu, tmp_path) -> None:
    from pydantic import SecretStr

    from nightshift.backends.gemini.batch import GeminiBatchBackend, build_gemini_client
    from nightshift.config.settings import Settings
    from tests.backends.test_gemini_backend import FAST, KEY, make_spec

    settings = Settings(gemini_base_url=emu.base_url, gemini_api_key=SecretStr(KEY))
    client = build_gemini_client(settings, retry=FAST, timeout_s=300)  # a long own deadline
    backend = GeminiBatchBackend(client, retry=FAST, list_limit=1)  # lists the newest only
    hung, done = (backend.submit(make_spec(tmp_path, name, 1)) for name in ("old", "new"))
    for batch in (hung, done):
        assert wait_final(backend, batch).state is ExternalState.SUCCEEDED
    emu.inject_faults("hang", endpoint="batches.get")  # the unlisted one's own call hangs
    now = [100.0]
    watcher = Watcher(lambda *_: None, clock=lambda: now[0])
    try:
        policy = Backoff(initial=1.0, factor=2.0, max=30.0)
        futures = {
            name: watcher.watch(WatchRequest(label=name, backend=backend, external_id=name,
                                             policy=policy))
            for name in (hung, done)
        }  # fmt: skip
        now[0] += 1.0
        watcher.poke()
        result = futures[done].result(timeout=60)
        assert result.reason == "final"
        assert not futures[hung].done()
    finally:
        emu.reset()  # lets the hung answer go
        watcher.stop()
