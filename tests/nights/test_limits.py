"""Per-backend caps as Prefect global concurrency limits, against the session's Prefect server."""

from __future__ import annotations

import time

import httpx
import pytest

from nightshift.loop import NightLoop
from nightshift.orchestration.leases import PrefectLeaseApi, SlotLeases
from nightshift.orchestration.limits import limit_name, prefect_slots
from tests.support import wait_until

pytestmark = pytest.mark.usefixtures("prefect_server")


def test_a_prefect_api_blip_during_a_capped_job_does_not_cancel_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, night_loop: NightLoop
) -> None:
    from prefect.client.orchestration import SyncPrefectClient

    leases = SlotLeases(PrefectLeaseApi(), renew_every=0.05, loop=night_loop)
    hold = prefect_slots({"cli": 1}, leases=leases)
    calls: list[int] = []

    def blip(self: object, **_: object) -> None:
        calls.append(1)
        raise httpx.ConnectError("Prefect API unreachable (injected)")

    # every renewal of the slot's lease fails, as if the API went away
    monkeypatch.setattr(SyncPrefectClient, "renew_concurrency_lease", blip)
    with hold("cli", 10.0):
        # nothing cancels this thread while it waits in here: the renewal only warns
        failed = "could not renew a Prefect concurrency lease"
        wait_until(lambda: failed in caplog.text, 30, "the renewal to fail", interval=0.05)
        wait_until(lambda: len(calls) >= 3, 30, "renewals to go on", interval=0.05)
        survived = True
    hold.close()
    assert survived


def test_the_lease_client_is_open_before_the_nights_first_job_asks_for_a_slot(
    night_loop: NightLoop,
) -> None:
    calls: list[str] = []

    class Recorded(PrefectLeaseApi):
        def open(self) -> None:
            calls.append("open")
            super().open()

        def acquire(self, name: str) -> str | None:
            calls.append("acquire")
            return super().acquire(name)

    hold = prefect_slots({"cli": 1}, scope="early", leases=SlotLeases(Recorded(), loop=night_loop))
    assert calls == ["open"]  # the night's first lease finds the connection made
    with hold("cli", 10):
        pass
    hold.close()
    assert calls == ["open", "acquire"]


def test_a_slot_goes_to_the_nights_next_job_and_to_another_night_once_released(
    night_loop: NightLoop,
) -> None:
    from prefect.client.orchestration import get_client

    class Counted(PrefectLeaseApi):
        acquired = 0

        def acquire(self, name: str) -> str | None:
            Counted.acquired += 1
            return super().acquire(name)

    ours = prefect_slots(
        {"cli": 1}, scope="handoff", leases=SlotLeases(Counted(), grace=0.2, loop=night_loop)
    )
    theirs = prefect_slots({"cli": 1}, scope="handoff", loop=night_loop)

    def active() -> int:
        with get_client(sync_client=True) as client:
            return client.read_global_concurrency_limit_by_name(
                limit_name("cli", "handoff")
            ).active_slots

    first = ours("cli", 10)
    first.__enter__()
    assert active() == 1
    with pytest.raises(TimeoutError), theirs("cli", 0.3):
        pass  # full: the other night waits (on our short poll) and gives up at its deadline
    ours.hand_on("cli")  # our first job was seen to end
    asked = Counted.acquired
    with ours("cli", 10):
        assert Counted.acquired == asked  # the lease itself: no call to the server
        first.__exit__(None, None, None)
        assert active() == 1  # one job of ours in flight, one slot
    # spare for the grace, then released: the other night gets it on its next poll (0.2 s of
    # grace and a poll of at most 0.5 s; the bound leaves a loaded machine room, the 10 s
    # timeout is what a slot never released would hit)
    started = time.monotonic()
    with theirs("cli", 10):
        assert time.monotonic() - started < 5.0
    theirs.close()
    ours.close()
    assert active() == 0


def test_a_rate_is_a_limit_with_a_slot_decay(night_loop: NightLoop) -> None:
    from prefect.client.orchestration import get_client

    from nightshift.config.limits import BackendLimit
    from nightshift.orchestration.limits import rate_limit_name

    hold = prefect_slots(
        {"cli": BackendLimit.model_validate({"concurrency": 2, "rate": "4/s"})},
        scope="paced",
        loop=night_loop,
    )
    with get_client(sync_client=True) as client:
        rate = client.read_global_concurrency_limit_by_name(rate_limit_name("cli", "paced"))
        cap = client.read_global_concurrency_limit_by_name(limit_name("cli", "paced"))
    assert (rate.limit, rate.slot_decay_per_second) == (4, 4.0)
    assert (cap.limit, cap.slot_decay_per_second) == (2, 0.0)
    started = time.monotonic()
    for _ in range(6):
        with hold("cli", 10):
            pass  # each takes a turn of the rate: four at once, then one every quarter second
    assert time.monotonic() - started >= 0.25
    hold.close()


def test_a_limit_deleted_under_a_night_does_not_fail_its_jobs(night_loop: NightLoop) -> None:
    from prefect.client.orchestration import get_client

    hold = prefect_slots({"command": 2}, loop=night_loop)
    with get_client(sync_client=True) as client:
        client.delete_global_concurrency_limit_by_name(limit_name("command"))
    with hold("command", 5.0):
        pass  # the local admission gate still caps the night


def test_uncapped_backends_take_no_slot(night_loop: NightLoop) -> None:
    hold = prefect_slots({}, loop=night_loop)
    with hold("gemini_batch", 0.0):
        pass


def test_a_catalogue_may_have_limits_of_its_own(tmp_path, night_loop: NightLoop) -> None:  # type: ignore[no-untyped-def]
    from prefect.client.orchestration import get_client

    from nightshift.config.loader import load_catalogue
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
    prefect_slots({"cli": 2}, scope=scopes[0], loop=night_loop)
    prefect_slots({"cli": 3}, scope=scopes[1], loop=night_loop)
    with get_client(sync_client=True) as client:
        own = client.read_global_concurrency_limit_by_name("nightshift-team-nightly-cli")
        other = client.read_global_concurrency_limit_by_name(limit_name("cli", scopes[1]))
    assert (own.limit, other.limit) == (2, 3)


def test_a_slot_lease_lives_as_long_as_the_nights_own_lease(
    monkeypatch: pytest.MonkeyPatch,
    night_loop: NightLoop,
) -> None:
    # a night killed with -9 keeps its slots until their lease ends: with Prefect's default
    # 300 s, a rerun after the night's own 60 s lease waited out its deadline for them
    from prefect.client.orchestration import SyncPrefectClient

    from nightshift.orchestration.leases import slot_lease_s

    asked: list[float] = []
    real = SyncPrefectClient.increment_concurrency_slots_with_lease

    def spy(self: SyncPrefectClient, *args: object, **kwargs: object) -> object:
        asked.append(float(kwargs["lease_duration"]))  # type: ignore[arg-type]
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(SyncPrefectClient, "increment_concurrency_slots_with_lease", spy)
    assert (slot_lease_s(5), slot_lease_s(60), slot_lease_s(600)) == (60.0, 60.0, 600.0)
    hold = prefect_slots({"cli": 1}, scope="short-lease", lease_s=slot_lease_s(60), loop=night_loop)
    with hold("cli", 10):
        pass
    hold.close()
    assert asked == [60.0]


def test_slots_asked_for_at_once_are_granted_at_once(
    caplog: pytest.LogCaptureFixture, night_loop: NightLoop
) -> None:
    """Two jobs of a capped backend starting together: on the old code their two requests met
    at the server, one was answered 503 and taken again on Prefect's retry, 2 s later (the
    night's longest job started 2 s late half the time: bench/handoff.py)."""
    import logging
    import threading

    caplog.set_level(logging.DEBUG, logger="prefect.client")
    hold = prefect_slots(
        {"cli": 4}, scope="together", leases=SlotLeases(PrefectLeaseApi(), loop=night_loop)
    )
    start = threading.Barrier(4)
    took: list[float] = []

    def job() -> None:
        start.wait()
        began = time.monotonic()
        with hold("cli", 30):
            took.append(time.monotonic() - began)

    try:
        threads = [threading.Thread(target=job) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        hold.close()
    assert len(took) == 4
    assert "retryable status code" not in caplog.text
    assert max(took) < 1.5  # a retry waits about 2 s
