"""Streamed ends: the night listens to the job API's Server-Sent Events instead of polling."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path

from nightshift.backends.base import ExternalState, JobStatus
from nightshift.backends.http import HttpBackend
from nightshift.backoff import Backoff
from nightshift.config.loader import parse_catalogue
from nightshift.engine.jobspec import job_spec
from nightshift.engine.outcomes import Outcome
from nightshift.engine.watcher import Watcher, WatchRequest
from nightshift.loop import NightLoop
from nightshift.sandbox.jobs_store import update
from tests.http_night import TOKEN, catalogue, http_job, run_night, sandbox_api
from tests.support import eventually

STREAM = '    stream_url: "/jobs/{id}/stream"\n'
SLOW_POLLS = ", poll: {initial: 30s, max: 30s}"  # a poll would come far too late to pass


def test_a_streamed_end_is_seen_within_a_second_with_no_status_calls(
    tmp_path: Path, night_loop: NightLoop
) -> None:
    with sandbox_api() as api:
        text = catalogue([http_job("s", api.base_url, "{task: s, seconds: 1}", STREAM)])
        catalogue_ = parse_catalogue(text, tmp_path / "n.yaml")
        backend = HttpBackend({"s": catalogue_.job("s")}, environ={"SANDBOX_JOBS_TOKEN": TOKEN})
        seen: dict[ExternalState, datetime] = {}
        watcher = Watcher(
            on_change=lambda _l, s, _st: seen.setdefault(s, datetime.now(UTC)), loop=night_loop
        )
        try:
            for attempt in range(3):
                seen.clear()
                external_id = backend.submit(job_spec(catalogue_, "s", f"key-{attempt}"))
                request = WatchRequest("s", backend, external_id, Backoff(30, 2, 30))  # type: ignore[arg-type]
                assert watcher.watch(request).result(timeout=60).reason == "final"
                record = api.store.get(external_id.split("/", 1)[1])
                assert record is not None and record["status"] == "finished"
                ended = datetime.fromisoformat(record["ended_at"])
                late = (seen[ExternalState.SUCCEEDED] - ended).total_seconds()
                assert 0 <= late < 1.0, late
            assert api.stats.get("status", 0) == 0 and "reading" not in backend.calls
            assert api.stats["stream"] == 3
        finally:
            watcher.stop()
            backend.close()


def test_a_night_hears_its_streamed_end_long_before_its_next_poll(tmp_path: Path) -> None:
    with sandbox_api() as api:
        job = http_job("s", api.base_url, "{task: s, seconds: 2}", STREAM)
        text = catalogue([job]).replace(", poll: {initial: 0.2s, max: 0.5s}", SLOW_POLLS)
        ran = run_night(tmp_path, text)
        out = ran.outcome("s")
        assert out.state is Outcome.SUCCEEDED, out.detail
        record = api.store.get(out.external_id.split("/", 1)[1])
        assert record is not None
        # recorded and published: the ledger's write included, still far before a 30 s poll
        late = (ran.finished_at("s") - datetime.fromisoformat(record["ended_at"])).total_seconds()
        assert 0 <= late < 10, late
        assert api.stats.get("status", 0) == 0 and "reading" not in ran.backend.calls


def test_a_dropped_stream_is_polled_then_listened_to_again(tmp_path: Path) -> None:
    with sandbox_api() as api:
        api.fault("drop_stream")  # the stream breaks after its first event
        job = http_job("d", api.base_url, "{task: d, seconds: 3}", STREAM)
        ran = run_night(tmp_path, catalogue([job]))
        assert ran.outcome("d").state is Outcome.SUCCEEDED
        # one poll after the drop found it going: its stream again, which heard its end
        assert (api.stats["stream"], api.stats["status"]) == (2, 1)
        assert ran.backend.calls["reading"] == api.stats["status"]


def test_500_streams_take_no_thread_and_every_end_is_heard(
    tmp_path: Path, night_loop: NightLoop
) -> None:
    count = 500
    with sandbox_api(redis=False, look_s=0.5) as api:
        text = catalogue([http_job("many", api.base_url, "{task: m}", STREAM)])
        job = parse_catalogue(text, tmp_path / "n.yaml").job("many")
        backend = HttpBackend({"many": job}, environ={"SANDBOX_JOBS_TOKEN": TOKEN})
        ids = [f"m{i:03d}" for i in range(count)]
        for job_id in ids:  # running jobs, put straight into the store: no worker needed
            api.store.put({"job_id": job_id, "status": "started", "user": "night", "log": []})
        seen: dict[str, ExternalState] = {}
        lock = threading.Lock()

        def changed(label: str, state: ExternalState, _status: JobStatus) -> None:
            with lock:
                seen[label] = state

        before = threading.active_count()
        watcher = Watcher(on_change=changed, loop=night_loop)
        try:
            futures = [
                watcher.watch(
                    WatchRequest(f"j{i}", backend, f"many/{job_id}", Backoff(30, 2, 30))  # type: ignore[arg-type]
                )
                for i, job_id in enumerate(ids)
            ]
            if not eventually(lambda: api.stats.get("stream", 0) == count, timeout=120):
                # where a stream went missing: never asked, refused, or dropped to polling
                raise AssertionError(
                    f"not every stream open after 120 s: the backend asked {backend.calls}, "
                    f"the API saw {api.stats}, {len(watcher.in_flight())} jobs watched"
                )
            # every stream is a task on the watcher's loop: no thread of their own
            assert [t for t in threading.enumerate() if "stream" in t.name] == []
            # the watcher's loop; its status pool is bounded (32) and idle
            assert threading.active_count() - before <= 1 + 32
            for job_id in ids:
                update(api.store, job_id, status="finished")
            for future in futures:
                assert future.result(timeout=120).reason == "final"
            assert set(seen.values()) == {ExternalState.SUCCEEDED} and len(seen) == count
            assert api.stats.get("status", 0) == 0
        finally:
            watcher.stop()
            backend.close()
