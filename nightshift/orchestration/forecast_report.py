"""The night's forecast on its pages (pure: no I/O, no Prefect).

``render_forecast`` draws what a run forecast at its start (the ``nightly-forecast`` artifact,
the run's first); ``forecast_section`` and ``forecast_lines`` put that forecast against what
happened in the night report: the night's expected finish against its actual one, and the jobs
that ended late (``expected 05:40, finished 06:55``) or took a multiple of their usual.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from nightshift.config.durations import format_duration
from nightshift.engine.forecast_check import NightCheck, worst
from nightshift.engine.night_forecast import basis_words, unknown_jobs, unknown_line
from nightshift.store.forecasts import StoredForecast

__all__ = ["FORECAST_KEY", "TABLE_ROWS", "forecast_lines", "forecast_section", "render_forecast"]

FORECAST_KEY = "nightly-forecast"
TABLE_ROWS = 100  # the artifact's table: the jobs ending last, the rest counted
WORST_JOBS = 5
_PRECISE = timedelta(hours=1)  # a forecast night shorter than this shows seconds


def _clock(at: datetime, start: datetime, precise: bool) -> str:
    """``05:40`` (``05:40:12`` when ``precise``), ``+1d`` on a later day than ``start``."""
    at, start = at.astimezone(UTC), start.astimezone(UTC)
    days = (at.date() - start.date()).days
    shown = f"{at:%H:%M:%S}" if precise else f"{at:%H:%M}"
    return shown + (f" +{days}d" if days else "")


def _when(text: str) -> datetime:
    return datetime.fromisoformat(text)


def render_forecast(f: StoredForecast, catalogue: str) -> str:
    """A run's forecast as markdown: finish, critical path, late jobs, the jobs ending last."""
    precise = f.finish_p95 - f.start < _PRECISE

    def clock(at: datetime) -> str:
        return _clock(at, f.start, precise)

    body = f.body
    jobs, kept = body.get("jobs", []), body.get("kept", [])
    unknown = unknown_jobs(jobs, kept)
    made = f"Made at {f.made_at.astimezone(UTC):%H:%M:%S} UTC"
    out = [f"# Forecast · night {f.night} · {catalogue}", ""]
    if unknown:  # no figure that rests on jobs counted as 0 s
        out += [
            f"{made}: {unknown_line(unknown, len(jobs))}, no critical path. A job's usual time "
            "is learned from its nights (or its backend's); until then only its timers hold."
        ]
    else:
        out += [
            f"{made} {basis_words(jobs, kept)}: the night should finish at "
            f"**{clock(f.finish_p50)} UTC** (p50), {clock(f.finish_p95)} in the late case (p95).",
            "",
            "Critical path: " + (" -> ".join(f"`{x}`" for x in f.critical_path) or "none"),
        ]
    for key, case in (("late", ""), ("late_p95", " in the late case (p95)")):
        for late in body.get(key, []):
            how = format_duration(float(late["seconds"]))
            out += ["", f"Past the deadline{case}: `{late['label']}` by {how}"]
    if body.get("kept"):
        out += ["", f"Kept from an earlier run (0 s): {len(body['kept'])} job(s)"]
    jobs = sorted(jobs, key=lambda j: (j["end_p50"], j["label"]), reverse=True)
    out += [
        "",
        "| job | backend | start | end p50 | end p95 | slot wait | basis |",
        "|---|---|---|---|---|---|---|",
    ]
    for j in jobs[:TABLE_ROWS]:
        wait = format_duration(float(j["wait_s"])) if j["wait_s"] else "-"
        cells = [f"`{j['label']}`", j["backend"], clock(_when(j["start_p50"]))]
        ends = [clock(_when(j["end_p50"])), clock(_when(j["end_p95"]))]
        basis = "none: nothing learned" if j["label"] in unknown else j["basis"]
        cells += ["?", "?"] if unknown else ends  # an end after an unknown job is unknown too
        cells += [wait, basis]
        out.append("| " + " | ".join(cells) + " |")
    if len(jobs) > TABLE_ROWS:
        out += ["", f"and {len(jobs) - TABLE_ROWS} job(s) ending earlier"]
    return "\n".join(out) + "\n"


def forecast_section(check: NightCheck, *, at_least_s: float | None = None) -> dict[str, Any]:
    """The report's ``forecast`` field: the night's finish, forecast and actual, and its worst
    jobs. A job counts as late ``at_least_s`` past its expected end (default: 5 % of the
    forecast night, at least a minute)."""
    length = (check.expected - check.start).total_seconds()
    if at_least_s is None:
        at_least_s = max(60.0, 0.05 * length)
    error, pct = check.error_s, check.error_pct
    return {
        "start": check.start.astimezone(UTC).isoformat(),
        "expected": check.expected.astimezone(UTC).isoformat(),
        "expected_p95": check.expected_p95.astimezone(UTC).isoformat(),
        "finished": None if check.finished is None else check.finished.astimezone(UTC).isoformat(),
        "error_s": None if error is None else round(error, 1),
        "error_pct": None if pct is None else round(pct, 1),
        "critical_path": check.critical_path,
        "worst": [
            {
                "label": j.label,
                "expected_end": j.expected_end.astimezone(UTC).isoformat(),
                "end": j.end.astimezone(UTC).isoformat(),
                "late_s": round(j.late_s, 1),
                "ratio": None if j.ratio is None else round(j.ratio, 1),
            }
            for j in worst(check, at_least_s=at_least_s)[:WORST_JOBS]
        ],
    }


def forecast_lines(section: Mapping[str, Any]) -> list[str]:
    """The report's forecast against actual, as markdown lines."""
    if section.get("unknown"):  # made with jobs it knew nothing of: no finish was forecast
        said = unknown_line(list(section["unknown"]), int(section.get("jobs") or 0))
        return ["## Forecast against actual", "", f"No forecast to hold the night against: {said}."]
    start = _when(section["start"])
    precise = _when(section["expected_p95"]) - start < _PRECISE

    def clock(text: str) -> str:
        return _clock(_when(text), start, precise)

    said = f"Expected to finish at {clock(section['expected'])} UTC"
    said += f" (p95 {clock(section['expected_p95'])})"
    if section["finished"] is None:
        said += "; this run did not end every job it forecast."
    else:
        error = float(section["error_s"])
        how = "on time" if abs(error) < 1 else format_duration(abs(error))
        how += "" if abs(error) < 1 else (" later" if error > 0 else " earlier")
        pct = section.get("error_pct")
        how += "" if pct is None or abs(error) < 1 else f" than forecast ({pct:+.0f} %)"
        said += f", finished {clock(section['finished'])}: {how}."
    out = ["## Forecast against actual", "", said]
    if section["critical_path"]:
        path = " -> ".join(f"`{x}`" for x in section["critical_path"])
        out += ["", f"Forecast critical path: {path}"]
    if section["worst"]:
        out.append("")
    for j in section["worst"]:
        line = f"- `{j['label']}`: expected {clock(j['expected_end'])}, finished {clock(j['end'])}"
        if j["late_s"] > 0:
            line += f" ({format_duration(j['late_s'])} late)"
        if j["ratio"] is not None and j["ratio"] >= 1.5:
            line += f", {j['ratio']:.1f}x its usual"
        out.append(line)
    return out
