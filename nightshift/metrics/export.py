"""Write the metrics textfile (atomically) and push to a Pushgateway; never fail the caller."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa
from prometheus_client import generate_latest, push_to_gateway
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from nightshift.files import write_atomic
from nightshift.metrics.families import MetricsData, NightMetrics, registry

if TYPE_CHECKING:
    from nightshift.config.settings import Settings

__all__ = [
    "PUSH_TIMEOUT_S",
    "export_ledger_metrics",
    "export_metrics",
    "exposition",
    "write_metrics",
]

Logger = logging.Logger | logging.LoggerAdapter  # type: ignore[type-arg]

PUSH_TIMEOUT_S = 5.0  # a Pushgateway that hangs costs this much of a night's end, not more
JOB = "nightshift"  # the Pushgateway's job label


SLICE = 50  # label sets of a family formatted at once: the textfile is written in slices


def write_metrics(data: MetricsData, path: Path, size: int = SLICE) -> None:
    """The node-exporter textfile at ``path``, written whole or not at all (``write_atomic``).

    Prometheus's text, as ``generate_latest`` makes it, ``size`` label sets of a family at a
    time: 5,000 jobs make 37 MB of text, which ``write_to_textfile`` would hold whole, three
    times over."""
    write_atomic(path, exposition(data, size))


def exposition(data: MetricsData, size: int = SLICE) -> Iterator[bytes]:
    """The text format of every family, ``size`` label sets at a time: a family's ``# HELP``
    and ``# TYPE`` lines once, at its head, its samples after them in order."""
    for slices in NightMetrics(data).in_slices(size):
        for n, metric in enumerate(slices):
            text = generate_latest(_One(metric))
            yield text if n == 0 else text.split(b"\n", 2)[2]


class _One(Collector):
    """A registry of one family, as ``generate_latest`` reads one."""

    def __init__(self, metric: Metric) -> None:
        self._metric = metric

    def collect(self) -> Iterator[Metric]:
        yield self._metric


def export_metrics(
    data: MetricsData,
    path: Path | None,
    pushgateway: str | None = None,
    *,
    logger: Logger | None = None,
    timeout: float = PUSH_TIMEOUT_S,
) -> bool:
    """Write the textfile (when a path is given) and push (when a gateway is); True if all went.

    Each failure is one warning line (the Pushgateway's address, never more of it than the
    caller configured); nothing raises.
    """
    log: Logger = logger or logging.getLogger("nightshift.metrics")
    ok = True
    if path is not None:
        try:
            write_metrics(data, path)
        except OSError as exc:
            log.warning("metrics: could not write %s: %s", path, exc.strerror or exc)
            ok = False
    if pushgateway:
        try:
            push_to_gateway(pushgateway, job=JOB, registry=registry(data), timeout=timeout)
        except Exception as exc:  # urllib's URLError, a timeout, an HTTP error answer
            log.warning("metrics: push to %s failed: %s", _public(pushgateway), _reason(exc))
            ok = False
    return ok


def _public(url: str) -> str:
    """The gateway's address without any user:password part."""
    scheme, sep, rest = url.rpartition("://")
    host = rest.rsplit("@", 1)[-1]
    return f"{scheme}{sep}{host}" if sep else host


def _reason(exc: Exception) -> str:
    reason = getattr(exc, "reason", None)
    return f"{type(exc).__name__}: {reason if reason is not None else exc}"


def export_ledger_metrics(
    engine: sa.Engine, settings: Settings, *, logger: Logger | None = None
) -> bool:
    """Read the ledger's metrics and export them as ``settings`` say; True if all went."""
    from nightshift.metrics.ledger_rows import read_metrics

    log: Logger = logger or logging.getLogger("nightshift.metrics")
    try:
        data = read_metrics(engine)
    except sa.exc.SQLAlchemyError as exc:
        log.warning("metrics: could not read the ledger: %s", type(exc).__name__)
        return False
    return export_metrics(data, settings.metrics_path(), settings.pushgateway_url, logger=log)
