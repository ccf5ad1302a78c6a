"""Per-backend caps as Prefect global concurrency limits, against the session's Prefect server."""

from __future__ import annotations

import httpx
import pytest

from nightshift.orchestration.limits import limit_name, prefect_slots
from tests.support import wait_until

pytestmark = pytest.mark.usefixtures("prefect_server")


def test_a_prefect_api_blip_during_a_capped_job_does_not_cancel_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from prefect.client.orchestration import SyncPrefectClient

    hold = prefect_slots({"cli": 1})
    calls: list[int] = []

    def blip(self: object, **_: object) -> None:
        calls.append(1)
        raise httpx.ConnectError("Prefect API unreachable (injected)")

    # every renewal of the slot's lease fails, as if the API went away; Prefect renews once
    # as the slot is taken, then every 3/4 of the lease
    monkeypatch.setattr(SyncPrefectClient, "renew_concurrency_lease", blip)
    with hold("cli", 10.0):
        # a strict slot would cancel this thread while it sleeps in here
        failed = "Concurrency lease renewal failed"
        wait_until(lambda: failed in caplog.text, 30, "the renewal to give up", interval=0.05)
        survived = True
    assert survived and len(calls) >= 3  # Prefect retried, then gave up without cancelling us


def test_a_limit_deleted_under_a_night_does_not_fail_its_jobs() -> None:
    from prefect.client.orchestration import get_client

    hold = prefect_slots({"command": 2})
    with get_client(sync_client=True) as client:
        client.delete_global_concurrency_limit_by_name(limit_name("command"))
    with hold("command", 5.0):
        pass  # the local admission gate still caps the night


def test_uncapped_backends_take_no_slot() -> None:
    hold = prefect_slots({})
    with hold("gemini_batch", 0.0):
        pass


def test_a_catalogue_may_have_limits_of_its_own(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from prefect.client.orchestration import get_client

    from nightshift.config.catalogue import load_catalogue
    from nightshift.orchestration.limits import limit_scope

    jobs = "jobs:\n  - {label: a, backend: cli, task: t}\n"
    (tmp_path / "team").mkdir()
    named = tmp_path / "team" / "nightshift.yaml"
    named.write_text("name: Team Nightly\nlimit_scope: catalogue\nlimits: {cli: 2}\n" + jobs)
    unnamed = tmp_path / "nightshift.yaml"
    unnamed.write_text("limit_scope: catalogue\nlimits: {cli: 3}\n" + jobs)
    shared = tmp_path / "shared.yaml"
    shared.write_text("limits: {cli: 4}\n" + jobs)

    scopes = [limit_scope(load_catalogue(p)) for p in (named, unnamed, shared)]

    assert scopes[0] == "team-nightly"
    assert scopes[1] is not None and scopes[1].startswith("nightshift-") and len(scopes[1]) == 17
    assert scopes[2] is None
    prefect_slots({"cli": 2}, scope=scopes[0])
    prefect_slots({"cli": 3}, scope=scopes[1])
    with get_client(sync_client=True) as client:
        own = client.read_global_concurrency_limit_by_name("nightshift-team-nightly-cli")
        other = client.read_global_concurrency_limit_by_name(limit_name("cli", scopes[1]))
    assert (own.limit, other.limit) == (2, 3)
