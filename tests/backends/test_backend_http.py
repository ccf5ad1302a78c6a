"""The http backend in whole nights against the sandbox job API on the real Redis and RQ."""

from __future__ import annotations

from itertools import accumulate
from pathlib import Path

from nightshift.engine.outcomes import Outcome
from nightshift.store.ledger import Ledger
from tests.http_night import catalogue, http_job, run_night, sandbox_api
from tests.support import wait_until


def test_a_job_succeeds_and_a_failing_one_fails_with_the_api_error_text(tmp_path: Path) -> None:
    with sandbox_api() as api:
        text = catalogue(
            [
                http_job("ok", api.base_url, '{task: "{label}", seconds: 0.2}'),
                http_job(
                    "bad", api.base_url, '{task: b, seconds: 0.1, fail: "disk full on /data"}'
                ),
            ]
        )
        ran = run_night(tmp_path, text)
        assert ran.outcome("ok").state is Outcome.SUCCEEDED, ran.outcome("ok").detail
        bad = ran.outcome("bad")
        assert bad.state is Outcome.FAILED and "disk full on /data" in (bad.detail or "")
        # permanent failures go to the API's dead-letter queue at once
        assert api.store.dead() == [bad.external_id.split("/", 1)[1]]
        assert "error: disk full on /data" in Path(bad.log_tail_path).read_text()


def test_a_transient_failure_is_retried_by_the_queue_and_succeeds(tmp_path: Path) -> None:
    with sandbox_api() as api:
        text = catalogue([http_job("flaky", api.base_url, "{task: f, seconds: 0.1, flaky: 1}")])
        ran = run_night(tmp_path, text)
        assert ran.outcome("flaky").state is Outcome.SUCCEEDED
        job = api.store.get(ran.outcome("flaky").external_id.split("/", 1)[1])
        assert job is not None and job["attempt"] == 2 and api.store.dead() == []


def test_the_night_deadline_cancels_the_job_at_the_api(tmp_path: Path) -> None:
    with sandbox_api() as api:
        text = catalogue(
            [http_job("long", api.base_url, "{task: l, seconds: 120}")], ", deadline: 3s"
        )
        ran = run_night(tmp_path, text)
        long = ran.outcome("long")
        assert long.state is Outcome.TIMEOUT and "night deadline" in (long.detail or "")
        job_id = long.external_id.split("/", 1)[1]
        wait_until(lambda: (api.store.get(job_id) or {}).get("status") == "canceled",
                   what="the API's job cancelled")  # fmt: skip


def test_twenty_jobs_against_a_quota_of_five_all_succeed_never_six_in_flight(
    tmp_path: Path,
) -> None:
    with sandbox_api(quota=5, workers=3) as api:
        listing = '    list: {url: "/jobs?ids={ids}", items_path: jobs}\n'
        jobs = [
            http_job(f"j{i:02d}", api.base_url, "{task: q, seconds: 0.2}", listing)
            for i in range(20)
        ]
        ran = run_night(tmp_path, catalogue(jobs))
        assert [j.state for j in ran.summary.jobs] == [Outcome.SUCCEEDED] * 20
        stats = api.stats
        assert stats["created"] == 20 and stats["refused"] > 0  # the quota was hit, and waited
        assert stats["high_water"] == {"night": 5}
        # and from the records themselves: never six jobs between created and ended at once
        spans = [(r["created_at"], r["ended_at"]) for r in _records(api)]
        points = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
        assert len(spans) == 20 and max(accumulate(d for _, d in points)) <= 5
        # a 429 is backpressure: no retry was used up
        assert [j.attempts for j in ran.summary.jobs] == [1] * 20
        assert stats["list"] >= 1  # due jobs were read in one call per tick


def test_a_lost_create_answer_leaves_exactly_one_job_in_the_queue(tmp_path: Path) -> None:
    with sandbox_api() as api:
        api.fault("lost_answer")  # created, then answered 503
        text = catalogue([http_job("once", api.base_url, "{task: o, seconds: 0.1}")])
        ran = run_night(tmp_path, text)
        assert ran.outcome("once").state is Outcome.SUCCEEDED
        assert len(api.store.jobs()) == 1 and api.stats["created"] == 1
        assert ran.backend.calls["creating"] == 2  # the retry sent the same Idempotency-Key


def test_a_lost_create_answer_is_looked_up_by_its_key(tmp_path: Path) -> None:
    with sandbox_api() as api:
        api.fault("lost_answer")
        lookup = '    lookup: {url: "/jobs?key={key}", items_path: jobs}\n'
        text = catalogue([http_job("once", api.base_url, "{task: o, seconds: 0.1}", lookup)])
        ran = run_night(tmp_path, text)
        assert ran.outcome("once").state is Outcome.SUCCEEDED
        assert len(api.store.jobs()) == 1
        assert ran.backend.calls["creating"] == 1 and ran.backend.calls["looking"] >= 1


def test_an_expired_record_is_reported_lost_and_never_submitted_again(tmp_path: Path) -> None:
    with sandbox_api() as api:
        text = catalogue([http_job("gone", api.base_url, "{task: g, seconds: 8}")])
        ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}", "http-test")
        try:
            import threading

            done: list[object] = []
            night = threading.Thread(target=lambda: done.append(run_night(tmp_path, text, ledger)))
            night.start()
            wait_until(lambda: any(r.get("status") == "started" for r in _records(api)),
                       what="the job running")  # fmt: skip
            # once the night has seen it: a 404 for a job never seen means "not visible yet"
            wait_until(lambda: any(t.to_state == "running"
                                   for t in ledger.dwells("2030-01-01", "gone")),
                       what="the night seeing it run")  # fmt: skip
            (job_id,) = api.store.jobs()
            api.store.expire(job_id)  # as its TTL would
            night.join(timeout=60)
            gone = done[0].outcome("gone")  # type: ignore[attr-defined]
            assert gone.state is Outcome.FAILED
            assert "lost" in gone.detail and "record expired" in gone.detail, gone.detail
            assert ledger.get_job("2030-01-01", "gone").state == "lost"
            # a rerun of the night re-attaches to it, finds it lost again, creates nothing
            again = run_night(tmp_path, text, ledger).outcome("gone")
            assert again.state is Outcome.FAILED and "record expired" in again.detail
            assert api.stats["created"] == 1
        finally:
            ledger.close()


def _records(api: object) -> list[dict[str, object]]:
    store = api.store  # type: ignore[attr-defined]
    return [r for i in store.jobs() if (r := store.get(i)) is not None]
