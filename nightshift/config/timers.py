"""A catalogue's timers: the ones that contradict each other, and jobs that outlive their night.

A Gemini batch's clock is its SLA (its fallback fires at ``sla x sla_fallback_at``); other jobs
end at their ``timeout`` or the night's ``deadline``, whichever comes first.
"""

from __future__ import annotations

import itertools
import math
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from nightshift.config.durations import format_duration
from nightshift.errors import CatalogueProblem

if TYPE_CHECKING:
    from nightshift.config.catalogue import Catalogue

__all__ = [
    "job_lifetime",
    "nightly_crons",
    "schedule_interval",
    "schedule_warnings",
    "timer_problems",
]

DAY_S = 86400.0
# enough fires of a cron to see its shortest gap (a weekly cron fires 8 times in 50 days)
_CRON_FIRES = 60

Lines = dict[tuple[Any, ...], int]


def timer_problems(catalogue: Catalogue, lines: Lines) -> list[CatalogueProblem]:
    """Timers of one job that can never all be honoured."""
    defaults = catalogue.defaults
    out: list[CatalogueProblem] = []
    for i, job in enumerate(catalogue.jobs):

        def problem(message: str, field: str, i: int = i, label: str = job.label) -> None:
            line = lines.get(("jobs", i, field)) or lines.get(("jobs", i))
            out.append(CatalogueProblem(message, line, label, field))

        timeout, queued = job.timeout, job.queued_timeout
        if timeout is not None and queued is not None and queued >= timeout:
            problem(
                f"queued_timeout ({_fmt(queued)}) is not shorter than timeout ({_fmt(timeout)}): "
                "it can never fire",
                "queued_timeout",
            )
        if job.backend == "gemini_batch":
            sla = job.sla if job.sla is not None else defaults.sla
            fallback_at = sla * defaults.sla_fallback_at
            if timeout is not None and job.fallback == "on_demand" and timeout < fallback_at:
                problem(
                    f"timeout ({_fmt(timeout)}) ends the batch before its fallback at "
                    f"{_fmt(fallback_at)} ({defaults.sla_fallback_at:g} x sla {_fmt(sla)}); "
                    "raise timeout, lower sla or set fallback: none",
                    "timeout",
                )
            if queued is not None and job.fallback == "on_demand" and queued >= fallback_at:
                problem(
                    f"queued_timeout ({_fmt(queued)}) is not before the batch's fallback at "
                    f"{_fmt(fallback_at)} ({defaults.sla_fallback_at:g} x sla {_fmt(sla)}), "
                    "which takes over a batch still queued: it can never fire",
                    "queued_timeout",
                )
        elif timeout is not None and timeout > defaults.deadline:
            problem(
                f"timeout ({_fmt(timeout)}) is longer than the night's deadline "
                f"({_fmt(defaults.deadline)}, defaults.deadline), which stops the job first",
                "timeout",
            )
    return out


def job_lifetime(catalogue: Catalogue, label: str) -> float:
    """The longest one attempt of a job can run before a timer ends it."""
    job = catalogue.job(label)
    if job.backend == "gemini_batch":
        sla = job.sla if job.sla is not None else catalogue.defaults.sla
        return job.timeout if job.timeout is not None else sla
    return min(job.timeout or math.inf, catalogue.defaults.deadline)


def schedule_warnings(catalogue: Catalogue) -> list[str]:
    """One line per job that can still run when the next night of its schedule starts."""
    path = catalogue.path or Path("<catalogue>")
    interval, source = schedule_interval(path)
    out = []
    for i, job in enumerate(catalogue.jobs):
        lifetime = job_lifetime(catalogue, job.label)
        if lifetime < interval:
            continue
        line = catalogue.line("jobs", i)
        where = f"{path}:{line}" if line else str(path)
        out.append(
            f"{where}: job {job.label!r}: warning: can run for up to {_fmt(lifetime)}, "
            f"not less than the {_fmt(interval)} between two nights ({source}); "
            "the next night may start while it still runs"
        )
    return out


def nightly_schedules(catalogue_path: Path) -> tuple[str, list[dict[str, Any]]] | None:
    """The nightly deployment of this catalogue in a ``prefect.yaml`` beside it (the one whose
    ``catalog`` parameter names it): its name and schedule entries; None without one. Other
    flows' deployments (the watchdog every 10 minutes, budgets, retention) are not nights."""
    folder = catalogue_path.absolute().parent
    try:
        data = yaml.safe_load((folder / "prefect.yaml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    target = os.path.normpath(catalogue_path.absolute())
    deployments = data.get("deployments") if isinstance(data, dict) else None
    for deployment in deployments if isinstance(deployments, list) else []:
        if not isinstance(deployment, dict) or not _is_nightly(deployment.get("entrypoint")):
            continue
        params = deployment.get("parameters") or {}
        catalog = params.get("catalogue") or params.get("catalog") or "nightshift.yaml"
        if os.path.normpath(folder / str(catalog)) != target:
            continue
        schedules = [s for s in deployment.get("schedules") or [] if isinstance(s, dict)]
        return str(deployment.get("name", "?")), schedules
    return None


def nightly_crons(catalogue_path: Path) -> list[tuple[str, str | None]]:
    """The active cron schedules of this catalogue's nightly deployment in a ``prefect.yaml``
    beside it, as (cron, time zone); [] without one."""
    found = nightly_schedules(catalogue_path)
    if found is None:
        return []
    crons = []
    for schedule in found[1]:
        if isinstance(schedule.get("cron"), str) and schedule.get("active", True) is not False:
            zone = schedule.get("timezone")
            crons.append((schedule["cron"], str(zone) if zone else None))
    return crons


def schedule_interval(catalogue_path: Path) -> tuple[float, str]:
    """Shortest gap between two nights of this catalogue, and where that came from: the
    schedules of its nightly deployment (cron or interval, ``nightly_schedules``); else a day
    is assumed."""
    found = nightly_schedules(catalogue_path)
    if found is not None:
        name, schedules = found
        gaps = [g for g in map(_gap, schedules) if g is not None]
        if gaps:
            return min(gaps), f"schedule of deployment {name!r} in prefect.yaml"
    return DAY_S, "no schedule for it in a prefect.yaml beside it: assumed daily"


def _is_nightly(entrypoint: object) -> bool:
    """Whether a deployment runs nights (no entrypoint: assume it does, as before)."""
    return entrypoint is None or str(entrypoint).endswith(":nightly")


def _gap(schedule: dict[str, Any]) -> float | None:
    """Shortest time between two runs of one prefect.yaml schedule entry."""
    if schedule.get("interval") is not None:
        try:
            return float(schedule["interval"])
        except (TypeError, ValueError):
            return None
    if not isinstance(schedule.get("cron"), str):
        return None
    from cronsim import CronSim, CronSimError  # Prefect's own cron library

    try:
        fires = CronSim(schedule["cron"], datetime(2026, 1, 1, tzinfo=UTC))
        times = [next(fires) for _ in range(_CRON_FIRES)]
    except (CronSimError, StopIteration):
        return None
    return min((b - a).total_seconds() for a, b in itertools.pairwise(times))


def _fmt(seconds: float) -> str:
    return format_duration(seconds)
