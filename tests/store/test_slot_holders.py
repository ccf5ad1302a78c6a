"""The book of Prefect slot leases: a dead night's slots are found and given back once."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from nightshift.loop import NightLoop
from nightshift.orchestration.leases import SlotLeases, heal_orphans
from nightshift.store.lease import Lease
from nightshift.store.ledger import Ledger
from nightshift.store.slot_holders import SlotHolders
from tests.unit.test_leases import FakeServer


@dataclass
class HealingServer(FakeServer):
    """A fake server that also takes slots back without a lease."""

    temporary: bool = False
    taken_back: list[tuple[str, int]] = field(default_factory=list)

    def release_slots(self, name: str, slots: int) -> None:
        self.taken_back.append((name, slots))


def test_a_dead_nights_slots_are_given_back_once(db_url: str, night_loop: NightLoop) -> None:
    ledger = Ledger(db_url, "cat")
    server = HealingServer(size=3)
    dead = Lease(ledger.engine, "cat", owner="host:1:dead", ttl_s=60)
    dead.acquire()
    book = SlotHolders(ledger.engine, dead.owner, "cat", "http://prefect/api")
    # its spare leases are never released
    leases = SlotLeases(server, book=book, grace=3600, loop=night_loop)
    with leases.hold("nightshift-cli", 1.0), leases.hold("nightshift-cli", 1.0):
        pass  # taken and spare; the night dies (kill -9) before releasing them
    living = Lease(ledger.engine, "other", owner="host:2:alive", ttl_s=60)
    living.acquire()
    alive_book = SlotHolders(ledger.engine, living.owner, "other", "http://prefect/api")
    alive = SlotLeases(server, book=alive_book, loop=night_loop)
    with alive.hold("nightshift-cli", 1.0):
        # the dead night still holds its lease: nothing is an orphan yet
        rerun = SlotHolders(ledger.engine, "host:3:rerun", "cat", "http://prefect/api")
        assert rerun.orphans() == []
        dead.release()  # its lease runs out (here: gone at once)
        later = datetime.now(UTC) + timedelta(seconds=1)
        assert sorted(o.holder for o in rerun.orphans(later)) == ["host:1:dead"] * 2
        assert heal_orphans(rerun, server) == 2
        assert server.held == {"nightshift-cli#3"}  # the living night's only
        assert heal_orphans(rerun, server) == 0  # once
    ledger.close()


def test_on_the_temporary_server_the_slot_is_taken_back_without_its_lease(db_url: str) -> None:
    ledger = Ledger(db_url, "cat")
    here = "temporary:/home/prefect"
    SlotHolders(ledger.engine, "host:1:dead", "cat", here).taken("nightshift-cli", "L1")
    SlotHolders(ledger.engine, "host:1:dead", "cat", "http://elsewhere/api").taken("x", "L2")
    server = HealingServer(temporary=True)
    rerun = SlotHolders(ledger.engine, "host:2:rerun", "cat", here)
    assert heal_orphans(rerun, server) == 1
    assert server.taken_back == [("nightshift-cli", 1)]  # another server's orphan left alone
    ledger.close()


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)  # SQLite: one host's clock
def test_a_host_whose_clock_runs_ahead_gives_back_no_live_nights_slots(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nightshift.store import slot_holders

    ledger = Ledger(db_url, "cat")
    live = Lease(ledger.engine, "cat", owner="host:1:live", ttl_s=60)
    live.acquire()
    book = SlotHolders(ledger.engine, live.owner, "cat", "http://prefect/api")
    book.taken("nightshift-cli", "L1")

    class Ahead(datetime):  # this host's wall clock, 5 minutes ahead
        @classmethod
        def now(cls, tz=None):  # type: ignore[no-untyped-def, override]
            return datetime.now(tz) + timedelta(minutes=5)

    monkeypatch.setattr(slot_holders, "datetime", Ahead)
    other = SlotHolders(ledger.engine, "host:2:ahead", "other", "http://prefect/api")
    assert other.orphans() == []  # the live night's slot is not an orphan
    ledger.close()
