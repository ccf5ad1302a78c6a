"""``nightshift status`` and ``nightshift cancel`` from outside, against a real ledger and agy.

Cancel stops the work whether or not the night's process is alive: with none, the jobs are
cancelled out there and recorded ``cancelled``; with a live night, the night sees them end
``cancelled`` with the reason and submits nothing more.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from nightshift.cli.main import main
from nightshift.config.settings import load_settings
from nightshift.loop import NightLoop
from nightshift.states import LIVE as LIVE_STATES
from nightshift.store.lease import Lease
from nightshift.store.lease_owner import machine
from nightshift.store.ledger import Ledger
from tests.support import start_run, wait_until

NIGHT = "2026-11-29"
NAME = "cancel-test"


def _agy(*argv: str) -> Any:
    out = subprocess.run(
        [sys.executable, "-m", "nightshift.sandbox.agy", *argv, "--json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out)


@pytest.fixture
def catalogue(sandbox: Path) -> Path:
    path = sandbox / "n.yaml"
    path.write_text(
        f"name: {NAME}\n"
        "defaults: {poll: {initial: 0.2s, factor: 2, max: 1s}, stagger: 0s}\n"
        "jobs:\n"
        "  - {label: long, backend: cli, task: 'long [queue=0 run=600]'}\n"
        "  - {label: done, backend: cli, task: 'done [run=0.1]'}\n"
    )
    return path


def _ledger() -> Ledger:
    return Ledger(load_settings().ledger_url(), NAME)


def _in_flight(job_id: str) -> None:
    """A night that submitted ``long`` and saw it run, and whose ``done`` succeeded: the rows
    a night writes (its job's row says ``queued`` from its submit to its end)."""
    ledger = _ledger()
    try:
        ledger.record_submit(NIGHT, "long", "cli", job_id, 1)
        ledger.transition(NIGHT, "run-1", "long", "cli", job_id, "submitted", attempt=1)
        ledger.transition(NIGHT, "run-1", "long", "cli", job_id, "running", attempt=1)
        ledger.record_submit(NIGHT, "done", "cli", "agy-old", 1)
        ledger.record_state(NIGHT, "done", "succeeded", finished_at=datetime.now(UTC))
    finally:
        ledger.close()


def test_status_shows_the_nights_jobs_and_who_holds_its_lease(
    catalogue: Path, capsys, night_loop: NightLoop
) -> None:
    job_id = _agy("run", "--detach", "--task", "long [run=600]")["job_id"]
    _in_flight(job_id)
    ledger = _ledger()
    try:
        with Lease(
            ledger.engine, NAME, owner="night-host:4242:abcd1234:flow-run-1", loop=night_loop
        ):
            assert main(["status", "--catalogue", str(catalogue), "--night", NIGHT, "--json"]) == 0
    finally:
        ledger.close()
    shown = json.loads(capsys.readouterr().out)
    jobs = {job["label"]: job for job in shown["jobs"]}
    assert jobs["long"]["state"] == "running" and jobs["long"]["in_flight"]
    assert jobs["long"]["external_id"] == job_id and jobs["long"]["attempts"] == 1
    assert jobs["long"]["since"] is not None and "expected_end" in jobs["long"]
    assert jobs["done"]["state"] == "succeeded" and not jobs["done"]["in_flight"]
    lease = shown["lease"]
    assert (lease["host"], lease["pid"], lease["flow_run"]) == ("night-host", 4242, "flow-run-1")
    assert lease["gone"] is False
    # and once nobody holds it, a table and a line that says so
    assert main(["status", "--catalogue", str(catalogue), "--night", NIGHT]) == 0
    assert "lease: free" in capsys.readouterr().out
    # a night of this machine killed with -9: its lease is left, and says the next run takes it
    dead = f"{socket.gethostname()}:2000000000:abcd1234:flow-run-2@{machine()}"
    ledger = _ledger()
    try:
        with Lease(ledger.engine, NAME, owner=dead, loop=night_loop):
            assert main(["status", "--catalogue", str(catalogue), "--night", NIGHT]) == 0
    finally:
        ledger.close()
    out = " ".join(capsys.readouterr().out.split())
    assert "lease: left by host" in out and "pid 2000000000, flow run flow-run-2" in out, out
    assert "whose process is gone: the next run takes it over at once" in out, out


def test_cancel_with_no_night_alive_cancels_and_records_the_jobs(catalogue: Path, capsys) -> None:
    job_id = _agy("run", "--detach", "--task", "long [run=600]")["job_id"]
    _in_flight(job_id)
    assert main(["cancel", "--catalogue", str(catalogue), "--night", NIGHT]) == 0
    out = capsys.readouterr().out
    assert f"long (cli {job_id}): cancelled" in out
    assert _agy("jobs", "get", job_id)["state"] == "cancelled"
    ledger = _ledger()
    try:
        record = ledger.get_job(NIGHT, "long")
        assert record is not None and record.state == "cancelled"
        assert record.detail is not None and "cancelled by nightshift cancel" in record.detail
        assert ledger.dwells(NIGHT, "long")[-1].to_state == "cancelled"
        done = ledger.get_job(NIGHT, "done")
        assert done is not None and done.state == "succeeded"  # a final job is left alone
        assert Lease(ledger.engine, NAME).holder() is None  # taken for a moment, given back
    finally:
        ledger.close()


@pytest.mark.timeout(900)
@pytest.mark.usefixtures("prefect_server")
def test_a_live_night_sees_its_jobs_cancelled_with_the_reason(catalogue: Path, capsys) -> None:
    night = start_run(catalogue, NIGHT)
    ledger = _ledger()
    try:

        def long_in_flight_and_done_over() -> bool:
            # cancel only once `done` has ended: cancelled too, it would make the night exit 1
            record, done = ledger.get_job(NIGHT, "long"), ledger.get_job(NIGHT, "done")
            assert night.poll() is None, "the night ended before its job ran"
            in_flight = (
                record is not None and record.state in LIVE_STATES and bool(record.external_id)
            )
            return in_flight and done is not None and done.state == "succeeded"

        wait_until(long_in_flight_and_done_over, 400, "long in flight, done over", interval=0.2)
        record = ledger.get_job(NIGHT, "long")
        assert record is not None and record.external_id
        assert main(["cancel", "--catalogue", str(catalogue), "--night", NIGHT]) == 0
        assert "the night is running" in capsys.readouterr().out
        assert night.wait(timeout=120) == 2  # `done` succeeded, `long` was cancelled
        assert _agy("jobs", "get", record.external_id)["state"] == "cancelled"
        ended = ledger.get_job(NIGHT, "long")
        assert ended is not None and ended.state == "cancelled"
        assert ended.detail is not None and "cancelled by nightshift cancel" in ended.detail
    finally:
        if night.poll() is None:
            night.kill()
            night.wait()
        ledger.close()


@pytest.mark.parametrize("command", ["status", "cancel"])
def test_bad_input_is_one_line_and_exit_4(command: str, catalogue: Path, capsys) -> None:
    assert main([command, "--catalogue", str(catalogue.with_name("nope.yaml"))]) == 4
    assert len(capsys.readouterr().err.splitlines()) == 1
    assert main([command, "--catalogue", str(catalogue), "--night", "2001-01-01"]) == 4
    (line,) = capsys.readouterr().err.splitlines()
    assert "no jobs of 'cancel-test' recorded for the night 2001-01-01" in line


@pytest.mark.parametrize("command", ["status", "cancel"])
def test_a_database_that_is_down_is_one_line_and_exit_6(
    command: str, catalogue: Path, monkeypatch, capsys
) -> None:
    monkeypatch.setenv("NIGHTSHIFT_DATABASE_URL", "postgresql+psycopg://u:pw@127.0.0.1:1/ledger")
    assert main([command, "--catalogue", str(catalogue), "--night", NIGHT]) == 6
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("cannot open the ledger database ")


def test_status_names_missed_nights_and_what_became_of_them(catalogue: Path, capsys) -> None:
    from nightshift.store.missed_nights import MissedNights

    ledger = _ledger()
    try:
        slot = datetime(2026, 11, 27, 2, 0, tzinfo=UTC)
        MissedNights(ledger.engine, NAME).name(
            [("2026-11-27", slot), ("2026-11-28", slot.replace(day=28))],
            by="flow run night 2026-11-29",
            reason="defaults.missed.run is latest",
        )
        # 11-28 was backfilled since, and ended ok
        ledger.record_submit("2026-11-28", "done", "cli", "x1", 1)
        ledger.record_state("2026-11-28", "done", "succeeded")
    finally:
        ledger.close()

    # a missed night that never ran: not "no jobs recorded", but what became of it
    assert main(["status", "--catalogue", str(catalogue), "--night", "2026-11-27", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["jobs"] == []
    assert [(m["night"], m["became"]) for m in out["missed"]] == [("2026-11-27", "missed")]
    assert out["missed"][0]["scheduled_at"] == "2026-11-27T02:00:00+00:00"

    assert main(["status", "--catalogue", str(catalogue), "--night", "2026-11-28"]) == 0
    text = capsys.readouterr().out
    assert "night 2026-11-27 missed (never run)" in text
    assert "this night was missed (run since: ok)" in text
    assert f"nightshift backfill --catalogue {catalogue} --from 2026-11-27 --to 2026-11-27" in text


LONG = ["publish:feeds-to-the-warehouse", "report:daily-cost-rollup-europe", "fetch:feeds"]


def test_status_in_80_columns_keeps_every_label_and_time_whole(
    sandbox: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = sandbox / "long.yaml"
    path.write_text(
        f"name: {NAME}\njobs:\n"
        + "".join(f"  - {{label: '{x}', backend: cli, task: 'x [run=1]'}}\n" for x in LONG)
    )
    first = datetime(2026, 11, 29, 22, 10, 5, tzinfo=UTC)
    retry = datetime(2026, 11, 29, 22, 15, 41, tzinfo=UTC)
    ledger = _ledger()
    try:
        ledger.record_submit(NIGHT, LONG[0], "cli", "agy-0123456789abcdef0123", 1)
        ledger.transition(NIGHT, "run-1", LONG[0], "cli", "agy-0123", "running", at=first)
        ledger.record_state(NIGHT, LONG[0], "running")
        # skipped by the first try and again by the retry: the retry's time is its latest
        ledger.transition(NIGHT, "run-1", LONG[1], "cli", None, "skipped", at=first)
        ledger.record_state(NIGHT, LONG[1], "skipped", finished_at=first)
        ledger.transition(NIGHT, "run-2", LONG[1], "cli", None, "skipped", at=retry)
        ledger.record_state(NIGHT, LONG[1], "skipped", finished_at=retry)
        ledger.record_submit(NIGHT, LONG[2], "cli", "agy-feeds", 1)
        after = datetime(2026, 11, 30, 2, 0, 9, tzinfo=UTC)
        ledger.transition(NIGHT, "run-2", LONG[2], "cli", "agy-feeds", "succeeded", at=after)
        ledger.record_state(NIGHT, LONG[2], "succeeded", finished_at=after)
    finally:
        ledger.close()
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["status", "--catalogue", str(path), "--night", NIGHT]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80, out
    for label in LONG:
        assert label in out, out  # whole, on one line
    assert "…" not in out
    assert "22:10:05" in out and "22:15:41" in out  # the retry's, for the step skipped again
    assert "11-30 02:00:09" in out  # another day says which
