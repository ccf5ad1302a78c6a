"""The lease on a real SQLite file: refusal, takeover on expiry, release, processes, races."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from nightshift.errors import LockHeldError
from nightshift.loop import NightLoop
from nightshift.store.lease import Lease
from nightshift.store.lease_owner import default_owner, machine
from tests.support import FakeClock, wait_until

REPO = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 11, 29, 1, 0, tzinfo=UTC)
KEY = "nightshift.yaml"


@pytest.fixture
def url(db_url: str) -> str:
    """Each test runs on SQLite, and on PostgreSQL when NIGHTSHIFT_TEST_POSTGRES_URL is set."""
    return db_url


@pytest.fixture
def one_host_url(tmp_path: Path) -> str:
    """SQLite: one host, whose clock is the lease's clock, so a fake clock moves its expiry."""
    return f"sqlite:///{tmp_path / 'ledger.sqlite3'}"


@pytest.fixture
def shared_url(db_url: str) -> str:
    """PostgreSQL: the database's ``now()`` is the lease's clock, whatever the hosts' say (a
    SQLite file is one host's: its clock is the host's)."""
    return db_url


ON_POSTGRESQL = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)


def test_a_second_acquire_is_refused_naming_the_holder(one_host_url: str) -> None:
    clock = FakeClock(T0)
    Lease(one_host_url, KEY, "host-a:1:aaaaaaaa", ttl_s=60, clock=clock).acquire()
    clock.advance(15)

    with pytest.raises(LockHeldError) as refused:
        Lease(one_host_url, KEY, "host-b:2:bbbbbbbb", ttl_s=60, clock=clock).acquire()

    assert (refused.value.key, refused.value.owner) == (KEY, "host-a:1:aaaaaaaa")
    assert refused.value.expires_in_s == pytest.approx(45.0)
    assert "is running (host host-a, pid 1)" in str(refused.value)


def test_other_keys_are_independent(url: str) -> None:
    Lease(url, "a.yaml", "one").acquire()
    Lease(url, "b.yaml", "two").acquire()


def test_the_holder_can_reacquire_and_renew(one_host_url: str) -> None:
    clock = FakeClock(T0)
    lease = Lease(one_host_url, KEY, "me", ttl_s=60, clock=clock)
    lease.acquire()
    lease.acquire()
    clock.advance(50)
    lease.renew()

    assert lease.holder() == ("me", T0 + timedelta(seconds=110))


def test_an_expired_lease_is_taken_over(one_host_url: str) -> None:
    clock = FakeClock(T0)
    crashed = Lease(one_host_url, KEY, "crashed", ttl_s=60, clock=clock)
    crashed.acquire()
    clock.advance(60.001)

    Lease(one_host_url, KEY, "rescuer", ttl_s=60, clock=clock).acquire()

    # the crashed run, were it to come back, has lost the lease
    with pytest.raises(LockHeldError, match="rescuer"):
        crashed.renew()


def test_release_lets_another_acquire(url: str) -> None:
    first = Lease(url, KEY, "first")
    first.acquire()
    first.release()

    Lease(url, KEY, "second").acquire()


def test_release_does_not_free_someone_elses_lease(one_host_url: str) -> None:
    clock = FakeClock(T0)
    old = Lease(one_host_url, KEY, "old", ttl_s=60, clock=clock)
    old.acquire()
    clock.advance(61)
    Lease(one_host_url, KEY, "new", ttl_s=60, clock=clock).acquire()

    old.release()

    assert old.holder() == ("new", T0 + timedelta(seconds=121))


def test_the_context_manager_releases_even_on_error(url: str, night_loop: NightLoop) -> None:
    with pytest.raises(RuntimeError), Lease(url, KEY, "me", ttl_s=60, loop=night_loop):
        raise RuntimeError("the night blew up")

    assert Lease(url, KEY, "other").holder() is None


def test_the_context_manager_keeps_renewing(url: str, night_loop: NightLoop) -> None:
    with Lease(url, KEY, "me", ttl_s=0.3, loop=night_loop) as lease:
        first_expiry = _holder_expiry(lease)
        wait_until(lambda: _holder_expiry(lease) != first_expiry, 5, "the lease to be renewed")
        assert lease.lost is None


def _holder_expiry(lease: Lease) -> datetime:
    holder = lease.holder()
    assert holder is not None
    return holder[1]


def test_default_owner_is_host_pid_uuid8_at_machine() -> None:
    head, machine_ = default_owner().rsplit("@", 1)
    host, pid, tag = head.rsplit(":", 2)
    assert host
    assert int(pid) > 0
    assert len(tag) == 8
    assert machine_ == machine() and len(machine_) == 8
    assert default_owner() != default_owner()


def test_eight_threads_racing_exactly_one_wins(url: str) -> None:
    leases = [Lease(url, KEY, f"thread-{i}", ttl_s=60) for i in range(8)]
    start = threading.Barrier(len(leases))
    won: list[str] = []
    refused: list[str] = []

    def race(lease: Lease) -> None:
        start.wait()
        try:
            lease.acquire()
        except LockHeldError as exc:
            refused.append(exc.owner)
        else:
            won.append(lease.owner)

    threads = [threading.Thread(target=race, args=(lease,)) for lease in leases]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert len(won) == 1
    assert refused == [won[0]] * 7


_HOLDER = """
import sys
from nightshift.loop import NightLoop
from nightshift.store.lease import Lease
owner = "child:" + sys.argv[3] if sys.argv[3] else None  # None: the default, as a night's
ttl = float(sys.argv[4])
with NightLoop() as loop, Lease(sys.argv[1], sys.argv[2], owner, ttl_s=ttl, loop=loop):
    print("acquired", flush=True)
    sys.stdin.read()
"""


def _holding(url: str, owner: str, ttl_s: float) -> subprocess.Popen[str]:
    """A child process holding the lease (renewing it) until its stdin closes, or it is killed."""
    child = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, url, KEY, owner, str(ttl_s)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "acquired"
    return child


def test_a_lease_held_by_a_killed_process_becomes_free_once_expired(url: str) -> None:
    child = _holding(url, "holder", 1.0)  # an owner that names no machine: its ttl runs out
    try:
        me = Lease(url, KEY, "parent", ttl_s=1.0)

        # the child keeps renewing: we stay locked out for well beyond one ttl
        blocked_until = time.monotonic() + 1.6
        while time.monotonic() < blocked_until:
            with pytest.raises(LockHeldError, match="child:holder"):
                me.acquire()
            time.sleep(0.1)

        child.kill()  # SIGKILL: no release, no more renewals
        child.wait(timeout=10)

        def acquired() -> bool:
            try:
                me.acquire()
            except LockHeldError as exc:
                assert exc.owner == "child:holder"
                return False
            return True

        wait_until(acquired, 10, "the dead holder's lease to expire", interval=0.05)
        assert me.holder() is not None
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)


def test_a_lease_of_a_process_of_this_machine_killed_is_taken_over_at_once(url: str) -> None:
    """A night killed with kill -9 (no release): its rerun on the same machine need not wait
    out the lease's ttl (60 s), once the holder's process is gone, and not before."""
    child = _holding(url, "", 60.0)  # the default owner: host:pid:tag@machine
    try:
        me = Lease(url, KEY, ttl_s=60.0)
        with pytest.raises(LockHeldError) as refused:  # alive: refused, its ttl left
            me.acquire()
        holder = refused.value.owner
        assert holder.startswith(f"{socket.gethostname()}:{child.pid}:")
        assert refused.value.expires_in_s > 50

        child.kill()  # SIGKILL: no release
        child.wait(timeout=10)
        me.acquire()  # at once: its process is gone

        held = me.holder()
        assert held is not None and held[0] == me.owner
        # the dead night's row is gone with it: a third comer is refused, naming us
        with pytest.raises(LockHeldError) as again:
            Lease(url, KEY, ttl_s=60.0).acquire()
        assert again.value.owner == me.owner
        assert f"is running (host {socket.gethostname()}, pid {os.getpid()})" in str(again.value)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)


def test_a_renewal_never_takes_the_lease_back_from_another_holder(one_host_url: str) -> None:
    """A night whose lease lapsed (a database outage) and was taken meanwhile by a rerun that
    then died: its renewal is refused (the night stops), not a silent take-back."""
    mine = Lease(one_host_url, KEY, ttl_s=60.0)
    mine.acquire()
    dead = f"{socket.gethostname()}:2000000000:abcd1234@{machine()}"  # no such pid here
    from sqlalchemy import text

    with mine.engine.begin() as conn:
        conn.execute(text("UPDATE leases SET owner = :o WHERE key = :k"), {"o": dead, "k": KEY})
    with pytest.raises(LockHeldError):
        mine.renew()
    Lease(one_host_url, KEY, ttl_s=60.0).acquire()  # a new night takes it over at once


def _break_database(url: str) -> None:
    """Take the lease table away: OperationalError on SQLite, ProgrammingError on PostgreSQL."""
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE leases"))
    engine.dispose()


def test_a_lease_not_renewed_within_its_ttl_is_reported_lost(
    url: str, caplog, night_loop: NightLoop
) -> None:
    clock = FakeClock(T0)
    with Lease(url, KEY, "me", ttl_s=0.3, clock=clock, loop=night_loop) as lease:
        _break_database(url)
        # the renewer saw the outage, said so
        wait_until(lambda: "renewing the lease" in caplog.text, 10, "the outage to be reported")
        assert lease.lost_reason is None  # within the ttl on the lease's clock: still ours
        clock.advance(0.31)
        reason = lease.lost_reason
        assert reason is not None and "not renewed" in reason and KEY in reason
        assert lease._renewer is not None and not lease._renewer.done()  # it keeps trying
    # leaving the block while the database is down does not raise over the night's outcome


def test_a_lease_taken_over_is_reported_lost(one_host_url: str, night_loop: NightLoop) -> None:
    clock = FakeClock(T0)
    with Lease(one_host_url, KEY, "me", ttl_s=0.3, clock=clock, loop=night_loop) as lease:
        rescuer = Lease(one_host_url, KEY, "rescuer", ttl_s=60, clock=clock)

        def take_over() -> bool:
            # past the ttl on the shared fake clock; the holder's renewer (every 0.1 s of real
            # time) may renew first, on a busy machine: then the lease is still its, try again
            clock.advance(0.31)
            try:
                rescuer.acquire()
            except LockHeldError:
                return False
            return True

        wait_until(take_over, 30, "the rescuer to take the lease once it lapsed")
        wait_until(lambda: lease.lost is not None, 10, "the takeover to be noticed")
        assert "rescuer" in (lease.lost_reason or "")


def test_a_lease_that_cannot_start_its_renewals_is_given_back(url: str) -> None:
    from nightshift.loop import NightLoop

    loop = NightLoop()
    loop.close()  # the night's loop is gone: no renewal could keep the lease
    with pytest.raises(RuntimeError, match="loop is closed"), Lease(url, KEY, "me", loop=loop):
        pass
    assert Lease(url, KEY, "other").holder() is None


SKEWS = [
    pytest.param(0, 5, id="the-asker-5-minutes-ahead"),
    pytest.param(0, -5, id="the-asker-5-minutes-behind"),
    pytest.param(5, 0, id="the-holder-5-minutes-ahead"),
    pytest.param(-5, 0, id="the-holder-5-minutes-behind"),
]


def _host_clock(minutes: int):  # type: ignore[no-untyped-def]
    """A host's wall clock, ``minutes`` off the true time (its sleeps untouched)."""
    return lambda: datetime.now(UTC) + timedelta(minutes=minutes)


@ON_POSTGRESQL
@pytest.mark.parametrize(("holder_off", "asker_off"), SKEWS)
def test_a_host_whose_clock_is_off_can_neither_take_nor_lose_a_live_lease(
    shared_url: str, holder_off: int, asker_off: int
) -> None:
    holder = Lease(shared_url, KEY, "host-a", ttl_s=60, clock=_host_clock(holder_off))
    holder.acquire()

    with pytest.raises(LockHeldError) as refused:
        Lease(shared_url, KEY, "host-b", ttl_s=60, clock=_host_clock(asker_off)).acquire()

    assert refused.value.owner == "host-a"
    # the time left is the database's: about the ttl, not the ttl give or take 5 minutes
    assert 30 < refused.value.expires_in_s <= 60
    holder.renew()  # still the holder's own


@ON_POSTGRESQL
def test_a_lease_expires_on_the_database_clock(shared_url: str) -> None:
    ahead = _host_clock(5)
    crashed = Lease(shared_url, KEY, "crashed", ttl_s=0.3, clock=_host_clock(-5))
    crashed.acquire()
    rescuer = Lease(shared_url, KEY, "rescuer", ttl_s=60, clock=ahead)

    def acquired() -> bool:
        try:
            rescuer.acquire()
        except LockHeldError:
            return False
        return True

    wait_until(acquired, 10, "the unrenewed lease to run out on the database's clock")
    with pytest.raises(LockHeldError, match="rescuer"):
        crashed.renew()
