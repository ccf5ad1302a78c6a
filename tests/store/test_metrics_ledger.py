"""Metrics read from a real ledger (SQLite, PostgreSQL), written as a textfile and pushed."""

from __future__ import annotations

import http.server
import logging
import socket
import threading
import tracemalloc
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import ClassVar

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from nightshift.config.settings import load_settings
from nightshift.metrics.export import export_ledger_metrics, export_metrics, write_metrics
from nightshift.metrics.families import (
    DWELL_BUCKETS,
    AlertCount,
    DwellBuckets,
    JobLatest,
    MetricsData,
    RunCount,
    registry,
)
from nightshift.metrics.ledger_rows import read_metrics
from nightshift.store.alert_log import DWELL, AlertLog, AlertRecord
from nightshift.store.ledger import Ledger

T0 = datetime(2026, 11, 27, 2, 0, tzinfo=UTC)
JOB = (("catalogue", "n.yaml"), ("job", "etl"))


def _night(ledger: Ledger, night: str, start: datetime, state: str, run_s: float) -> None:
    ledger.record_submit(night, "etl", "cli", f"x-{night}", 1, at=start)
    ledger.transition(night, "r", "etl", "cli", f"x-{night}", "queued", at=start, attempt=1)
    running = start + timedelta(seconds=10)
    ledger.transition(night, "r", "etl", "cli", f"x-{night}", "running", at=running, attempt=1)
    end = running + timedelta(seconds=run_s)
    ledger.transition(night, "r", "etl", "cli", f"x-{night}", state, at=end, attempt=1)
    ledger.record_state(night, "etl", state, finished_at=end)


def _fill(db_url: str) -> Ledger:
    ledger = Ledger(db_url, "n.yaml")
    _night(ledger, "2026-11-27", T0, "succeeded", 100)
    _night(ledger, "2026-11-28", T0 + timedelta(days=1), "succeeded", 200)
    _night(ledger, "2026-11-29", T0 + timedelta(days=2), "failed", 30)
    other = Ledger(db_url, "other.yaml")
    _night(other, "2026-11-29", T0 + timedelta(days=2), "succeeded", 5)
    AlertLog(ledger.engine).record(
        AlertRecord("n.yaml", "2026-11-29", "etl", DWELL, "alert", "night", T0, state="running")
    )
    return ledger


def _parse(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_the_textfile_holds_what_the_ledger_does(db_url: str, tmp_path: Path) -> None:
    ledger = _fill(db_url)
    path = tmp_path / "metrics" / "nightshift.prom"

    assert export_metrics(read_metrics(ledger.engine), path) is True

    got = _parse(path.read_text())
    assert got[("nightshift_job_runs_total", (*JOB, ("state", "succeeded")))] == 2
    assert got[("nightshift_job_runs_total", (*JOB, ("state", "failed")))] == 1
    assert got[("nightshift_job_duration_seconds", JOB)] == 40.0  # the failed night: 10 + 30
    last = T0 + timedelta(days=2, seconds=40)
    assert got[("nightshift_job_last_run_timestamp_seconds", JOB)] == last.timestamp()
    ok = T0 + timedelta(days=1, seconds=210)
    assert got[("nightshift_job_last_success_timestamp_seconds", JOB)] == ok.timestamp()
    running = (*JOB, ("state", "running"))
    assert got[("nightshift_state_dwell_seconds_count", running)] == 3
    assert got[("nightshift_state_dwell_seconds_sum", running)] == 330.0
    bucket = "nightshift_state_dwell_seconds_bucket"
    assert got[(bucket, (*JOB, ("le", "30.0"), ("state", "running")))] == 1
    assert got[(bucket, (*JOB, ("le", "120.0"), ("state", "running")))] == 2
    assert got[(bucket, (*JOB, ("le", "300.0"), ("state", "running")))] == 3
    assert got[("nightshift_night_severity", (("catalogue", "n.yaml"),))] == 2
    assert got[("nightshift_night_severity", (("catalogue", "other.yaml"),))] == 0
    assert got[("nightshift_alerts_total", (*JOB, ("level", "alert")))] == 1
    assert not list(path.parent.glob("*.tmp*"))  # written beside, then renamed over


class _Gateway(http.server.BaseHTTPRequestHandler):
    bodies: ClassVar[list[tuple[str, bytes]]] = []

    def do_PUT(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).bodies.append((self.path, body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def gateway() -> Iterator[str]:
    _Gateway.bodies = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Gateway)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_push_carries_the_same_metrics(gateway: str, tmp_path: Path) -> None:
    ledger = _fill(f"sqlite:///{tmp_path / 'l.sqlite3'}")
    settings = load_settings(state_dir=tmp_path, pushgateway_url=gateway)

    assert export_ledger_metrics(ledger.engine, settings) is True

    [(path, body)] = _Gateway.bodies
    assert path == "/metrics/job/nightshift"
    pushed = _parse(body.decode())
    assert pushed == _parse((tmp_path / "metrics" / "nightshift.prom").read_text())


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_gateway_that_is_down_costs_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"http://user:hunter2@127.0.0.1:{_closed_port()}"
    path = tmp_path / "m.prom"

    with caplog.at_level(logging.WARNING):
        assert export_metrics(MetricsData(), path, url, timeout=2) is False

    assert path.exists()  # the textfile went anyway
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith("metrics: push to http://127.0.0.1:") and "failed" in line
    assert "hunter2" not in line


def test_an_unwritable_path_costs_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")

    with caplog.at_level(logging.WARNING):
        assert export_metrics(MetricsData(), blocker / "m.prom") is False

    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["metrics"]


def test_an_empty_setting_turns_the_textfile_off(tmp_path: Path) -> None:
    assert load_settings(state_dir=tmp_path, metrics_file="").metrics_path() is None
    default = load_settings(state_dir=tmp_path).metrics_path()
    assert default == tmp_path.resolve() / "metrics" / "nightshift.prom"


def _many_jobs(n: int) -> MetricsData:
    """n jobs of one catalogue, three states each: ~50 lines and 7 KB of textfile a job."""
    states = ("queued", "running", "succeeded")
    jobs = [f"job-{i:04d}" for i in range(n)]
    cat = "/srv/nights/a-long-catalogue-path/nightshift.yaml"
    return MetricsData(
        runs=[RunCount(cat, j, "succeeded", 3) for j in jobs],
        latest=[JobLatest(cat, j, T0, 80.0, T0) for j in jobs],
        dwells=[
            DwellBuckets(cat, j, s, tuple(range(len(DWELL_BUCKETS))), 20, 400.0)
            for j in jobs
            for s in states
        ],
        alerts=[AlertCount(cat, j, "watch", 1) for j in jobs[::10]],
        severities={cat: "ok"},
    )


def test_a_big_catalogues_textfile_is_written_a_few_jobs_at_a_time(tmp_path: Path) -> None:
    """5,000 jobs made a 37 MB textfile, held whole three times over (its lines, the text, its
    bytes) at the night's end: 70 MB above the night's own peak. Written a slice at a time, the
    memory it takes is a small part of the file's size, and the file is the same. (300 jobs
    in slices of 5, as 5,000 in the night's slices of 50: tracemalloc slows what it traces.)"""
    data = _many_jobs(300)
    path = tmp_path / "m.prom"
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        write_metrics(data, path, size=5)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    size = path.stat().st_size
    assert size > 2 * 2**20, size
    assert peak < size / 4, f"writing a {size / 2**10:.0f} KB file took {peak / 2**10:.0f} KB"
    assert path.read_bytes() == generate_latest(registry(data))
    assert [p.name for p in tmp_path.iterdir()] == ["m.prom"]  # no temporary file left


def test_the_latest_night_s_spend_is_a_gauge_per_catalogue(db_url: str, tmp_path: Path) -> None:
    ledger = _fill(db_url)
    # the latest night of n.yaml: one paid job settled at $4.25, one still out there at $2
    ledger.record_submit("2026-11-29", "gen", "http", "g", 1, at=T0, committed_usd=3.0)
    ledger.record_state("2026-11-29", "gen", "succeeded", finished_at=T0, spent_usd=4.25)
    ledger.record_submit("2026-11-29", "batch", "gemini_batch", "b", 1, committed_usd=2.0)
    ledger.record_submit("2026-11-28", "old", "http", "o", 1, at=T0, committed_usd=9.0)
    path = tmp_path / "nightshift.prom"

    assert export_metrics(read_metrics(ledger.engine), path) is True

    got = _parse(path.read_text())
    assert got[("nightshift_spend_usd", (("catalogue", "n.yaml"),))] == 6.25
    assert ("nightshift_spend_usd", (("catalogue", "other.yaml"),)) not in got  # nothing paid


def test_missed_and_backfilled_nights_are_counted_per_catalogue(
    db_url: str, tmp_path: Path
) -> None:
    from nightshift.store.missed_nights import MissedNights

    ledger = _fill(db_url)
    named = [("2026-11-20", None), ("2026-11-21", None), ("2026-11-22", None)]
    MissedNights(ledger.engine, "n.yaml").name(named, by="test", reason="latest")
    ledger.record_submit("2026-11-21", "gen", "http", "g", 1, at=T0)  # backfilled since
    path = tmp_path / "nightshift.prom"

    assert export_metrics(read_metrics(ledger.engine), path) is True

    got = _parse(path.read_text())
    name = "nightshift_missed_nights"  # a gauge: a backfill moves a night from one to the other
    assert got[(name, (("became", "missed"), ("catalogue", "n.yaml")))] == 2
    assert got[(name, (("became", "backfilled"), ("catalogue", "n.yaml")))] == 1
