"""One hung status call holds one job: a job the listing misses is asked on a call of its own."""

from __future__ import annotations

import sys
from pathlib import Path

from nightshift.backends.base import ExternalState, JobSpec
from nightshift.backends.cli import CliBackend
from nightshift.backoff import Backoff
from nightshift.engine.watcher import Watcher, WatchRequest
from nightshift.loop import NightLoop
from tests.support import wait_final

AGY = [sys.executable, "-m", "nightshift.sandbox.agy"]


def test_a_hung_jobs_get_does_not_hold_back_another_jobs_answer(
    tmp_path: Path, night_loop: NightLoop
) -> None:
    state = tmp_path / "agy"
    # its own deadline is long: only the answer in hand going on without it passes the test
    backend = CliBackend(AGY, timeout_s=300, env={"AGY_STATE_DIR": str(state)})

    def submit(task: str) -> str:
        return backend.submit(JobSpec("x", "cli", {"task": task, "model": "m"}))

    hung = submit("hidden and hung [unlisted hang_get queue=0 run=600]")
    done = submit("quick [queue=0 run=0]")
    assert wait_final(backend, done).state is ExternalState.SUCCEEDED
    now = [100.0]  # both fall due in the same tick: one listing for the two
    watcher = Watcher(lambda *_: None, clock=lambda: now[0], loop=night_loop)
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


def test_a_hung_batches_get_does_not_hold_back_another_batchs_answer(
    emu, tmp_path, night_loop: NightLoop
) -> None:
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
    watcher = Watcher(lambda *_: None, clock=lambda: now[0], loop=night_loop)
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


def test_a_listing_that_hangs_on_one_job_holds_no_other_job(
    tmp_path: Path, night_loop: NightLoop
) -> None:
    """`jobs list` hangs while it lists the hung job: past the listing's own deadline (half the
    poll cap) every job is asked on a call of its own, so the others end on time."""
    from nightshift.config.loader import parse_catalogue
    from nightshift.engine.admission import Admission
    from nightshift.engine.night import NightParts
    from nightshift.engine.outcomes import Outcome
    from nightshift.engine.plan import plan_night
    from nightshift.store.ledger import Ledger
    from tests.night_kit import run_night

    state = tmp_path / "agy"
    jobs = "".join(
        f"  - {{label: ok-{i}, backend: cli, task: 'fine [queue=0 run=1]'}}\n" for i in range(4)
    )
    hung = (
        "  - {label: hung, backend: cli, task: 'hangs [queue=0 run=600 hang_get]', timeout: 6s}\n"
    )
    text = (
        "name: hung-listing\ndefaults: {poll: {initial: 0.5s, max: 2s}, stagger: 0s, "
        f"deadline: 40s, retry_delay: 0.1s}}\njobs:\n{hung}{jobs}"
    )
    cat = parse_catalogue(text, tmp_path / "nightshift.yaml")
    backend = CliBackend(AGY, timeout_s=300, env={"AGY_STATE_DIR": str(state)})
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}", cat.key)
    parts = NightParts(
        backends={"cli": backend},  # type: ignore[dict-item]
        ledger=ledger,
        admission=Admission(0),
        sinks=[],
        budgets=None,
        poll_hints=None,
        loop=night_loop,
    )
    try:
        summary = run_night(cat, parts, plan_night(cat), night="2030-01-01", run_dir=tmp_path)
    finally:
        (state / "release-hang").touch()
        ledger.close()
    by = {j.label: j for j in summary.jobs}
    for i in range(4):
        ok = by[f"ok-{i}"]
        # a 1 s job seen ended within a few poll caps, not at the hung job's timeout
        assert ok.state is Outcome.SUCCEEDED and ok.duration_s < 5.5, (ok.state, ok.duration_s)
    assert by["hung"].state is Outcome.TIMEOUT
    # its status never answered: the cancel is not known to have reached it, so it stays live
    assert by["hung"].detail == (
        "job timeout 6s; cancel accepted, but no status answer ever showed the job: it may "
        "still run there"
    ), by["hung"].detail
