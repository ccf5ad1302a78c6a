"""The night report's picture: tonight's duration of each job against its budget band (PNG).

One line per job, worst first as in the table: the grey band runs from the usual p50 to p95, a
red tick marks 2 x p95 (an alert), the dot is tonight (green ok, orange partial, red not ok,
hollow when kept from an earlier run). Log seconds; matplotlib's Agg backend (no display).
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

__all__ = ["draw_apart", "plot_report"]

DRAW_TIMEOUT_S = 60.0

_FLOOR = 0.1  # a log axis has no 0
_TICKS = {0.1: "100ms", 1: "1s", 10: "10s", 60: "1m", 600: "10m", 3600: "1h", 21_600: "6h"}
_COLOURS = {"succeeded": "#2e7d32", "partial": "#ef6c00", "skipped": "#9e9e9e"}
_BAD = "#c62828"


def draw_apart(report: Mapping[str, Any], max_jobs: int = 40) -> bytes:
    """``plot_report`` in a Python process of its own: matplotlib (~30 MB) is never loaded into
    the night's process, whose memory is its jobs'. Drawn here if that process fails."""
    shown = {"night": report["night"], "jobs": list(report["jobs"])[:max_jobs]}
    try:
        done = subprocess.run(
            [sys.executable, "-m", __name__],
            input=json.dumps(shown).encode("utf-8"),
            capture_output=True,
            timeout=DRAW_TIMEOUT_S,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return plot_report(shown, max_jobs)
    return done.stdout


def plot_report(report: Mapping[str, Any], max_jobs: int = 40) -> bytes:
    """The PNG of ``report`` (``build_report``'s dict); its first ``max_jobs`` jobs."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    jobs = list(report["jobs"])[:max_jobs]
    height = 1.2 + 0.32 * max(1, len(jobs))
    fig, ax = plt.subplots(figsize=(8.5, height), dpi=90)
    try:
        for row, job in enumerate(jobs):
            y = len(jobs) - 1 - row
            if job["usual_p50_s"] is not None:
                p50, p95 = max(job["usual_p50_s"], _FLOOR), max(job["usual_p95_s"], _FLOOR)
                ax.plot([p50, p95], [y, y], color="#bdbdbd", linewidth=7, solid_capstyle="butt")
                ax.plot([2 * p95], [y], marker="|", markersize=12, color=_BAD)
            if job["tonight"] == "not run":
                continue  # nothing ran tonight: no dot
            colour = _COLOURS.get(job["state"], _BAD)
            kept = job["tonight"] == "kept"
            ax.plot(
                [max(job["duration_s"], _FLOOR)],
                [y],
                marker="o",
                markersize=7,
                color=colour,
                markerfacecolor="white" if kept else colour,
            )
        ax.set_yticks(range(len(jobs)))
        ax.set_yticklabels([f"{j['label']} ({j['shown_as']})" for j in reversed(jobs)], fontsize=8)
        ax.set_xscale("log")
        low, high = ax.get_xlim()
        ticks = [t for t in _TICKS if low <= t <= high] or list(_TICKS)[:3]
        ax.set_xticks(ticks, [_TICKS[t] for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel("grey: usual p50 to p95 · red tick: 2 x p95 (alert) · dot: tonight")
        ax.set_title(f"Night {report['night']}: durations against budgets", fontsize=10)
        ax.grid(axis="x", which="major", alpha=0.3)
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png")
        return buffer.getvalue()
    finally:
        plt.close(fig)


if __name__ == "__main__":  # draw_apart's process: the report's fields in, the PNG out
    sys.stdout.buffer.write(plot_report(json.load(sys.stdin)))
