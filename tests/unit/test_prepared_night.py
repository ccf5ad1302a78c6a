"""A night prepared once (``orchestration/prepared_night.py``): read, checked, planned, its
ledger open; its errors are the one-line ones ``nightshift run`` prints, in their order."""

from __future__ import annotations

import socket
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from nightshift.errors import CatalogueError, NightArgumentError
from nightshift.loop import NightLoop
from nightshift.orchestration.prepared_night import PreparedNight, prepare_night
from nightshift.store.lease import Lease
from nightshift.store.lease_owner import machine
from nightshift.store.ledger import Ledger
from tests.support import new_ledger_url

# no process has it: above any pid_max Linux allows (2**22)
NO_SUCH_PID = 2_000_000_000

CATALOGUE = """\
name: prep
jobs:
  - {label: short, backend: command, argv: [x]}
  - {label: fetch, backend: command, argv: [x]}
  - {label: long, backend: command, argv: [x]}
  - {label: link, backend: command, argv: [x], depends_on: [fetch]}
"""


@pytest.fixture
def catalogue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NIGHTSHIFT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("NIGHTSHIFT_DATABASE_URL", new_ledger_url(tmp_path / "ledger.db"))
    path = tmp_path / "nightshift.yaml"
    path.write_text(CATALOGUE)
    return path


def _prepared(path: Path, **kwargs: object) -> PreparedNight:
    prepared = prepare_night(path, **kwargs)  # type: ignore[arg-type]
    prepared.close()  # the tests read what it holds; its ledger is not needed open
    return prepared


def test_a_prepared_night_holds_its_plan_longest_first_and_its_folder(catalogue: Path) -> None:
    ledger = Ledger(new_ledger_url(catalogue.parent / "ledger.db"), "prep")
    long_ago = datetime.now(UTC) - timedelta(days=2)
    for label, seconds in [("short", 10), ("long", 50)]:  # history: `long` is the longest
        ledger.record_submit("2026-11-01", label, "command", f"old-{label}", 1, at=long_ago)
        done = long_ago + timedelta(seconds=seconds)
        ledger.record_state("2026-11-01", label, "succeeded", finished_at=done)
    ledger.close()

    prepared = _prepared(catalogue, night="2026-11-29")

    assert prepared.night == "2026-11-29" and prepared.only is None
    assert prepared.catalogue.key == "prep"
    assert prepared.plan.independent == ["long", "short"]  # long jobs start first
    assert prepared.plan.chains == [["fetch", "link"]]
    # a table lists them as the catalogue does, chains after
    assert prepared.listed_labels() == ["short", "long", "fetch", "link"]
    runs = prepared.settings.state_dir / "runs" / "2026-11-29"
    assert prepared.run_path.parent == runs and not prepared.run_path.exists()
    given = catalogue.parent / "here"
    assert _prepared(catalogue, run_dir=str(given), only=["short"]).run_path == given


def test_only_narrows_the_plan(catalogue: Path) -> None:
    prepared = _prepared(catalogue, only=["link", "short"])
    assert prepared.only == ["link", "short"]
    assert prepared.plan.labels == ["short", "link"]  # its dependency is not run


def test_the_night_is_the_scheduled_start_s_date_by_default(catalogue: Path) -> None:
    scheduled = datetime(2026, 11, 29, 23, 30, tzinfo=UTC)
    assert _prepared(catalogue, scheduled=scheduled).night == "2026-11-29"


def test_a_bad_night_is_said_before_a_bad_catalogue(catalogue: Path) -> None:
    catalogue.write_text("jobs: [")
    with pytest.raises(NightArgumentError, match="--night must be a date like") as info:
        prepare_night(catalogue, night="../elsewhere")
    assert isinstance(info.value, ValueError)
    with pytest.raises(CatalogueError):
        prepare_night(catalogue, night="2026-11-29")


def test_an_unknown_only_label_names_the_catalogue(catalogue: Path) -> None:
    with pytest.raises(NightArgumentError) as info:
        prepare_night(catalogue, only=["short", "nope"])
    assert str(info.value) == f"{catalogue}: unknown job label(s): nope"


def test_a_ledger_that_cannot_be_opened_raises_the_database_s_error(
    catalogue: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nightshift.cli.exits import DATABASE_ERRORS

    monkeypatch.setenv("NIGHTSHIFT_DATABASE_URL", "sqlite:////proc/no-such-dir/x.db")
    with pytest.raises(DATABASE_ERRORS):
        prepare_night(catalogue)


def test_the_lease_holder_while_it_holds_it_and_none_once_expired(
    catalogue: Path, night_loop: NightLoop
) -> None:
    prepared = prepare_night(catalogue)
    try:
        assert prepared.lease_holder() is None
        key = prepared.catalogue.key
        with Lease(prepared.ledger.engine, key, owner="other-host:1:ab", ttl_s=60, loop=night_loop):
            held = prepared.lease_holder()
            assert held is not None and held[0] == "other-host:1:ab"
            assert 0 < held[1] <= 60
            later = datetime.now(UTC) + timedelta(seconds=61)
            assert prepared.lease_holder(now=later) is None  # a crashed night's: taken over
    finally:
        prepared.close()


def test_a_lease_left_by_a_gone_process_of_this_machine_holds_nobody(
    catalogue: Path, night_loop: NightLoop
) -> None:
    prepared = prepare_night(catalogue)
    dead = f"{socket.gethostname()}:{NO_SUCH_PID}:abcd1234:run-1@{machine()}"
    try:
        key = prepared.catalogue.key
        with Lease(prepared.ledger.engine, key, owner=dead, ttl_s=60, loop=night_loop):
            assert prepared.lease_holder() is None  # the night takes it over at once
        elsewhere = dead.replace(machine(), "0badc0de" if machine() != "0badc0de" else "1")
        with Lease(prepared.ledger.engine, key, owner=elsewhere, ttl_s=60, loop=night_loop):
            held = prepared.lease_holder()  # another machine's pid: never looked up here
            assert held is not None and held[0] == elsewhere
    finally:
        prepared.close()
