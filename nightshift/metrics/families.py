"""The metric families, from plain rows (pure: no database, no network).

Counters are counted over the ledger's kept history (retention may lower them: Prometheus reads
that as a counter reset). The dwell histogram is aggregated by the database into fixed buckets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

__all__ = [
    "DWELL_BUCKETS",
    "SEVERITY_VALUES",
    "AlertCount",
    "DwellBuckets",
    "JobLatest",
    "MetricsData",
    "NightMetrics",
    "RunCount",
    "night_severity",
    "registry",
]

# seconds: from "instant" to a day, the spread of the dwells a night sees
DWELL_BUCKETS: tuple[float, ...] = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 86400)
SEVERITY_VALUES = {"ok": 0, "partial": 1, "failed": 2}

_JOB = ["catalogue", "job"]


@dataclass(frozen=True)
class RunCount:
    """How many runs of a job the ledger keeps in one state."""

    catalogue: str
    job: str
    state: str
    count: int


@dataclass(frozen=True)
class JobLatest:
    """A job's latest finished run: how long it took, when it ended, when it last succeeded."""

    catalogue: str
    job: str
    last_run: datetime
    duration_s: float | None  # None: never submitted (failed before submit)
    last_success: datetime | None


@dataclass(frozen=True)
class DwellBuckets:
    """The dwells of one (catalogue, job, state): cumulative counts per DWELL_BUCKETS bound."""

    catalogue: str
    job: str
    state: str
    buckets: tuple[int, ...]  # one per DWELL_BUCKETS bound, cumulative
    count: int
    total_s: float


@dataclass(frozen=True)
class AlertCount:
    """How many levels of one kind were raised for a job."""

    catalogue: str
    job: str
    level: str
    count: int


@dataclass(frozen=True)
class MetricsData:
    """Everything the families are made from."""

    runs: Sequence[RunCount] = ()
    latest: Sequence[JobLatest] = ()
    dwells: Sequence[DwellBuckets] = ()
    alerts: Sequence[AlertCount] = ()
    # catalogue -> the severity of its latest night ("ok" | "partial" | "failed")
    severities: dict[str, str] = field(default_factory=dict)
    # catalogue -> what its latest night's paid jobs spent and still commit, USD
    spend: dict[str, float] = field(default_factory=dict)
    # (catalogue, "missed" | "backfilled") -> nights named missed: never run, or run since
    missed: dict[tuple[str, str], int] = field(default_factory=dict)
    # (catalogue, backend, state) -> incidents opened (several jobs of one backend stalled)
    incidents: dict[tuple[str, str, str], int] = field(default_factory=dict)


def night_severity(states: Iterable[str]) -> str:
    """A night's verdict from its job states, by the join's own rule (in flight: not ok)."""
    from nightshift.engine.outcomes import verdict

    return verdict(states).value


class NightMetrics(Collector):
    """A collector over a fixed ``MetricsData``: what the textfile and the push hold."""

    def __init__(self, data: MetricsData) -> None:
        self._data = data

    def collect(self) -> Iterator[Metric]:
        """Every family, with a sample per label set the data has."""
        for rows, build in _families(self._data):
            yield build(rows)

    def in_slices(self, size: int) -> Iterator[Iterator[Metric]]:
        """Every family as the same family over ``size`` label sets at a time, in order: a big
        catalogue's (tens of MB at 5,000 jobs) is never held whole. At least one per family."""
        for rows, build in _families(self._data):
            starts = range(0, max(1, len(rows)), size)
            yield (build(rows[i : i + size]) for i in starts)


Build = Callable[[Sequence[Any]], Metric]


def _families(data: MetricsData) -> list[tuple[Sequence[Any], Build]]:
    """Each family's rows, in the order its samples are written, and how to build it."""
    latest = sorted(data.latest, key=lambda j: (j.catalogue, j.job))
    return [
        (sorted(data.runs, key=lambda r: (r.catalogue, r.job, r.state)), _runs),
        (latest, _duration),
        (latest, _last_run),
        (latest, _last_success),
        (sorted(data.dwells, key=lambda d: (d.catalogue, d.job, d.state)), _dwell),
        (sorted(data.severities.items()), _severity),
        (sorted(data.alerts, key=lambda a: (a.catalogue, a.job, a.level)), _alerts),
        (sorted(data.spend.items()), _spend),
        (sorted(data.missed.items()), _missed),
        (sorted(data.incidents.items()), _incidents),
    ]


def _runs(rows: Sequence[RunCount]) -> Metric:
    runs = CounterMetricFamily(
        "nightshift_job_runs",
        "Job runs kept in the ledger, by final state",
        labels=[*_JOB, "state"],
    )
    for r in rows:
        runs.add_metric([r.catalogue, r.job, r.state], r.count)
    return runs


def _duration(rows: Sequence[JobLatest]) -> Metric:
    """Submit to finish of each job's latest finished run (none for one never submitted)."""
    duration = GaugeMetricFamily(
        "nightshift_job_duration_seconds", "Submit to finish of the job's latest run", labels=_JOB
    )
    for job in rows:
        if job.duration_s is not None:
            duration.add_metric([job.catalogue, job.job], max(0.0, job.duration_s))
    return duration


def _last_run(rows: Sequence[JobLatest]) -> Metric:
    last_run = GaugeMetricFamily(
        "nightshift_job_last_run_timestamp_seconds",
        "When the job's latest run finished",
        labels=_JOB,
    )
    for job in rows:
        last_run.add_metric([job.catalogue, job.job], job.last_run.timestamp())
    return last_run


def _last_success(rows: Sequence[JobLatest]) -> Metric:
    last_ok = GaugeMetricFamily(
        "nightshift_job_last_success_timestamp_seconds",
        "When the job last finished successfully",
        labels=_JOB,
    )
    for job in rows:
        if job.last_success is not None:
            last_ok.add_metric([job.catalogue, job.job], job.last_success.timestamp())
    return last_ok


def _dwell(rows: Sequence[DwellBuckets]) -> Metric:
    dwell = HistogramMetricFamily(
        "nightshift_state_dwell_seconds",
        "Seconds each job spent in each state",
        labels=[*_JOB, "state"],
    )
    for d in rows:
        bounds = [(_bound(b), float(n)) for b, n in zip(DWELL_BUCKETS, d.buckets, strict=True)]
        dwell.add_metric(
            [d.catalogue, d.job, d.state], [*bounds, ("+Inf", float(d.count))], d.total_s
        )
    return dwell


def _severity(rows: Sequence[tuple[str, str]]) -> Metric:
    severity = GaugeMetricFamily(
        "nightshift_night_severity",
        "The latest night's verdict: 0 ok, 1 partial, 2 failed",
        labels=["catalogue"],
    )
    for catalogue, verdict in rows:
        severity.add_metric([catalogue], SEVERITY_VALUES[verdict])
    return severity


def _alerts(rows: Sequence[AlertCount]) -> Metric:
    alerts = CounterMetricFamily(
        "nightshift_alerts", "Levels raised (watch, alert), by job", labels=[*_JOB, "level"]
    )
    for a in rows:
        alerts.add_metric([a.catalogue, a.job, a.level], a.count)
    return alerts


def _spend(rows: Sequence[tuple[str, float]]) -> Metric:
    spend = GaugeMetricFamily(
        "nightshift_spend_usd",
        "The latest night's spend on paid jobs, ended tries and tries still out there, USD",
        labels=["catalogue"],
    )
    for catalogue, usd in rows:
        spend.add_metric([catalogue], usd)
    return spend


def _incidents(rows: Sequence[tuple[tuple[str, str, str], int]]) -> Metric:
    incidents = CounterMetricFamily(
        "nightshift_incidents",
        "Incidents opened: several jobs of one backend stalled in one state together",
        labels=["catalogue", "backend", "state"],
    )
    for (catalogue, backend, state), count in rows:
        incidents.add_metric([catalogue, backend, state], count)
    return incidents


def _missed(rows: Sequence[tuple[tuple[str, str], int]]) -> Metric:
    missed = GaugeMetricFamily(
        "nightshift_missed_nights",
        "Nights of the schedule that never ran when due, as the ledger keeps them: still missed "
        "(never run), or backfilled (run since)",
        labels=["catalogue", "became"],
    )
    for (catalogue, became), count in rows:
        missed.add_metric([catalogue, became], count)
    return missed


def _bound(seconds: float) -> str:
    return f"{float(seconds)}"


def registry(data: MetricsData) -> CollectorRegistry:
    """A registry holding only the night metrics (no process or platform collectors)."""
    out = CollectorRegistry(auto_describe=False)
    out.register(NightMetrics(data))
    return out
