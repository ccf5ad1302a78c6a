"""Job services as they behave: an id not visible yet, one never visible, a job given up on.

The sandbox job API on the real Redis with real RQ workers, started late or never: until a
worker took a job, its reads answer 404 (``unseen_until_taken``), as Flower's do.
"""

from __future__ import annotations

import threading
from pathlib import Path

from nightshift.engine.outcomes import Outcome, Severity
from nightshift.store.ledger import Ledger
from tests.http_night import NIGHT, Ran, catalogue, http_job, rq_workers, run_night, sandbox_api
from tests.support import wait_until

NO_CANCEL = '    cancel: {url: "/jobs/{id}/cancel"}\n'


def _in_background(tmp_path: Path, text: str, ledger: Ledger | None = None) -> tuple:
    ran: list[Ran] = []
    night = threading.Thread(target=lambda: ran.append(run_night(tmp_path, text, ledger)))
    night.start()
    return night, ran


def test_jobs_whose_ids_show_only_once_a_late_worker_takes_them_end_as_the_service_ends_them(
    tmp_path: Path,
) -> None:
    with sandbox_api(workers=0, unseen_until_taken=True) as api:
        text = catalogue(
            [
                http_job("a", api.base_url, "{task: a, seconds: 0.5}"),
                http_job("b", api.base_url, "{task: b, seconds: 0.5}"),
                http_job("bad", api.base_url, '{task: c, seconds: 0.2, fail: "bad input row 7"}'),
            ]
        )
        night, ran = _in_background(tmp_path, text)
        # the night has submitted every job and been told 404 for each: then the workers come
        wait_until(lambda: api.stats.get("created") == 3, what="three jobs created")
        wait_until(lambda: api.stats.get("status", 0) >= 6, what="404s for the fresh ids")
        assert not ran, "the night ended before any worker took a job"
        with rq_workers(api, 2):
            night.join(timeout=60)
        assert ran, "the night did not end"
        summary = ran[0].summary
        states = {j.label: (j.state, j.detail) for j in summary.jobs}
        assert states["a"][0] is Outcome.SUCCEEDED, states
        assert states["b"][0] is Outcome.SUCCEEDED, states
        assert states["bad"][0] is Outcome.FAILED and "bad input row 7" in str(states["bad"][1])
        assert summary.severity is Severity.PARTIAL
        assert api.stats["created"] == 3  # each created once


def test_a_job_never_seen_ends_lost_after_visible_within_and_is_cancelled(tmp_path: Path) -> None:
    with sandbox_api(workers=0, unseen_until_taken=True) as api:
        text = catalogue(
            [http_job("ghost", api.base_url, "{task: g, seconds: 1}", "    visible_within: 2s\n")]
        )
        ran = run_night(tmp_path, text)
        ghost = ran.outcome("ghost")
        assert ghost.state is Outcome.FAILED
        detail = ghost.detail or ""
        assert "lost: never seen at the service in 2s (visible_within)" in detail, detail
        assert "cancel accepted, but no status answer ever showed the job" in detail, detail
        job_id = ghost.external_id.split("/", 1)[1]
        assert (api.store.get(job_id) or {}).get("status") == "canceled"
        # asked on its backoff meanwhile (0.2 s doubling to 0.5 s), not once and given up
        assert api.stats["status"] >= 3


def test_a_rerun_reports_a_job_called_lost_as_the_service_finished_it(tmp_path: Path) -> None:
    with sandbox_api(workers=0, unseen_until_taken=True) as api:
        extra = "    visible_within: 1s\n"
        job = http_job("late", api.base_url, "{task: l, seconds: 0.2}", extra)
        text = catalogue([job.replace(NO_CANCEL, "")])  # an API without a cancel
        ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}", "http-test")
        try:
            first = run_night(tmp_path, text, ledger).outcome("late")
            assert first.state is Outcome.FAILED
            assert "may still be running at the service" in (first.detail or ""), first.detail
            assert ledger.get_job(NIGHT, "late").state == "lost"
            job_id = first.external_id.split("/", 1)[1]
            with rq_workers(api, 1):  # the worker comes: the job runs, unwatched
                wait_until(lambda: (api.store.get(job_id) or {}).get("status") == "finished",
                           timeout=30, what="the job done at the service")  # fmt: skip
            again = run_night(tmp_path, text, ledger).outcome("late")
            assert again.state is Outcome.SUCCEEDED, again.detail
            assert again.external_id == first.external_id
            assert api.stats["created"] == 1  # never submitted again
        finally:
            ledger.close()


def test_a_job_past_its_timeout_at_a_service_that_keeps_it_running_is_cancelled_and_says_so(
    tmp_path: Path,
) -> None:
    with sandbox_api(workers=2) as api:
        timeout = "    timeout: 2s\n"
        slow = http_job("slow", api.base_url, "{task: s, seconds: 60}", timeout)
        kept = http_job("kept", api.base_url, "{task: k, seconds: 60}", timeout)
        ran = run_night(tmp_path, catalogue([slow, kept.replace(NO_CANCEL, "")]))
        cancelled, running = ran.outcome("slow"), ran.outcome("kept")
        assert cancelled.state is Outcome.TIMEOUT
        assert cancelled.detail == "job timeout 2s; cancel accepted by the service"
        job_id = cancelled.external_id.split("/", 1)[1]
        wait_until(lambda: (api.store.get(job_id) or {}).get("status") == "canceled",
                   what="the API's job cancelled")  # fmt: skip
        # an API that cannot cancel: the night says the job may still be running there
        assert running.state is Outcome.TIMEOUT
        assert "may still be running at the service" in (running.detail or ""), running.detail
        kept_id = running.external_id.split("/", 1)[1]
        assert (api.store.get(kept_id) or {}).get("status") == "started"


def test_a_job_cancelled_before_the_service_ever_showed_it_stays_live_for_a_rerun(
    tmp_path: Path,
) -> None:
    """A cancel of an id never seen is not known to have reached the job (a Celery revoke sent
    while no worker is up is dropped, and the task runs when one starts): kept lost, said so."""
    with sandbox_api(workers=0, unseen_until_taken=True) as api:
        job = http_job("early", api.base_url, "{task: e, seconds: 1}", "    timeout: 2s\n")
        ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}", "http-test")
        try:
            first = run_night(tmp_path, catalogue([job]), ledger).outcome("early")
            assert first.state is Outcome.TIMEOUT
            assert "no status answer ever showed the job: it may still run" in (first.detail or "")
            assert ledger.get_job(NIGHT, "early").state == "lost"
            # the rerun asks again: the service cancelled it after all, and says so now
            again = run_night(tmp_path, catalogue([job]), ledger).outcome("early")
            assert again.state is Outcome.CANCELLED, again.detail
            assert api.stats["created"] == 1
        finally:
            ledger.close()
