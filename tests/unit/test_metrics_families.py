"""The metric families from literal rows, read back with prometheus-client's own parser."""

from __future__ import annotations

from datetime import UTC, datetime

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from nightshift.metrics.families import (
    DWELL_BUCKETS,
    AlertCount,
    DwellBuckets,
    JobLatest,
    MetricsData,
    RunCount,
    night_severity,
    registry,
)

T = datetime(2026, 11, 29, 2, 30, tzinfo=UTC)


def _samples(data: MetricsData) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry(data)).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_every_family_has_its_samples() -> None:
    data = MetricsData(
        runs=[RunCount("n.yaml", "etl", "succeeded", 28), RunCount("n.yaml", "etl", "failed", 2)],
        latest=[JobLatest("n.yaml", "etl", T, 720.0, datetime(2026, 11, 28, 2, 0, tzinfo=UTC))],
        dwells=[DwellBuckets("n.yaml", "etl", "queued", (0, 1, 2, *([3] * 10)), 3, 40.5)],
        alerts=[AlertCount("n.yaml", "etl", "alert", 1)],
        severities={"n.yaml": "partial"},
    )

    got = _samples(data)

    job = (("catalogue", "n.yaml"), ("job", "etl"))
    assert got[("nightshift_job_runs_total", (*job, ("state", "succeeded")))] == 28
    assert got[("nightshift_job_runs_total", (*job, ("state", "failed")))] == 2
    assert got[("nightshift_job_duration_seconds", job)] == 720.0
    assert got[("nightshift_job_last_run_timestamp_seconds", job)] == T.timestamp()
    assert (
        got[("nightshift_job_last_success_timestamp_seconds", job)]
        == datetime(2026, 11, 28, 2, 0, tzinfo=UTC).timestamp()
    )
    queued = (*job, ("state", "queued"))
    assert got[("nightshift_state_dwell_seconds_count", queued)] == 3
    assert got[("nightshift_state_dwell_seconds_sum", queued)] == 40.5
    assert got[("nightshift_state_dwell_seconds_bucket", (*job, ("le", "5.0"), queued[2]))] == 1
    assert got[("nightshift_state_dwell_seconds_bucket", (*job, ("le", "+Inf"), queued[2]))] == 3
    assert got[("nightshift_night_severity", (("catalogue", "n.yaml"),))] == 1
    assert got[("nightshift_alerts_total", (*job, ("level", "alert")))] == 1


def test_an_empty_ledger_gives_families_without_samples() -> None:
    text = generate_latest(registry(MetricsData())).decode()

    names = {family.name for family in text_string_to_metric_families(text)}

    assert "nightshift_job_runs" in names and "nightshift_state_dwell_seconds" in names
    assert _samples(MetricsData()) == {}


def test_a_job_never_submitted_has_no_duration_and_a_never_ok_one_no_last_success() -> None:
    got = _samples(MetricsData(latest=[JobLatest("n.yaml", "etl", T, None, None)]))

    assert set(got) == {
        ("nightshift_job_last_run_timestamp_seconds", (("catalogue", "n.yaml"), ("job", "etl")))
    }


def test_severity_is_the_joins_verdict() -> None:
    assert night_severity(["succeeded", "succeeded"]) == "ok"
    assert night_severity(["succeeded", "failed"]) == "partial"
    assert night_severity(["partial", "partial"]) == "partial"
    assert night_severity(["failed", "timeout", "running"]) == "failed"
    assert night_severity(["succeeded", "running"]) == "partial"  # in flight is not ok


def test_the_buckets_run_from_a_second_to_a_day() -> None:
    assert DWELL_BUCKETS[0] == 1 and DWELL_BUCKETS[-1] == 86400
    assert list(DWELL_BUCKETS) == sorted(DWELL_BUCKETS)
