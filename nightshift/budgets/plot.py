"""The budgets as a picture: per job, each state's dwells with the budget's p50 and p95 marked.

One block per job, one line per state it dwelt in (in lifecycle order): every dwell of the
window as a dot, the middle half as a box, the budget's p50 (black), p95 = watch (orange) and
2 x p95 = alert (red) as ticks, and the same in words on the right. The seconds axis is
logarithmic and the same for every job of a page, so jobs compare at a glance; a state still
learning has no ticks and says so. Pages of at most ``per_page`` jobs keep a big catalogue
readable. One Axes per page and one artist per kind of mark keep drawing fast; matplotlib's
Agg backend, so no display is needed.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from nightshift.budgets.columns import (
    ALERT_AT,
    BACKEND,
    BASIS,
    CATALOGUE,
    DWELL_S,
    LABEL,
    P50,
    P95,
    SOURCE,
    STATE,
    Source,
)
from nightshift.config.durations import format_duration
from nightshift.states import PATH, JobState

if TYPE_CHECKING:
    from nightshift.budgets.table import BudgetTables

__all__ = ["PER_PAGE", "plot_budgets", "state_order"]

PER_PAGE = 40  # jobs per picture
FLOOR_S = 0.1  # a log axis has no 0: shorter dwells are drawn here
MAX_DOTS = 300  # dots per state (a random sample beyond that; the box and ticks use them all)
_LIFECYCLE = [*PATH, JobState.FALLBACK]
_TICKS = {0.1: "100ms", 1: "1s", 10: "10s", 60: "1m", 600: "10m", 3600: "1h", 21_600: "6h"}
_TICKS |= {86_400: "1d", 604_800: "1w"}
# inches: the page's width, one state's line, a job's title line, the margins around the plot
_WIDTH, _LINE, _HEAD = 10.5, 0.28, 0.36
_LEFT, _RIGHT, _TOP, _BOTTOM = 1.0, 3.0, 0.8, 0.55
_HALF = 0.36  # half a tick's height, in lines


def state_order(states: list[str]) -> list[str]:
    """The lifecycle's states first, in order, then any other in name order."""
    known = [s for s in _LIFECYCLE if s in states]
    return known + sorted(set(states) - set(known))


def plot_budgets(
    dwells: pd.DataFrame,
    tables: BudgetTables,
    folder: Path,
    *,
    built_at: datetime,
    per_page: int = PER_PAGE,
) -> list[Path]:
    """Draw ``tables`` over the window's ``dwells`` (``recent_dwells``); the PNGs written.

    One file per catalogue and page (``budgets-<catalogue>[-<page>].png``) under ``folder``;
    none when there is nothing to draw.
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    states, jobs = tables.states, tables.jobs
    written: list[Path] = []
    slugs = _slugs(list(dict.fromkeys(states[CATALOGUE])))
    for catalogue, page, pages, labels in _pages(states, per_page):
        rows = states[(states[CATALOGUE] == catalogue) & states[LABEL].isin(labels)]
        mine = dwells[(dwells[CATALOGUE] == catalogue) & dwells[LABEL].isin(labels)]
        mine_jobs = jobs[jobs[CATALOGUE] == catalogue].set_index(LABEL)
        layout = _Layout()
        for label in labels:
            job = mine_jobs.loc[label] if label in mine_jobs.index else None
            layout.job(label, rows[rows[LABEL] == label], mine[mine[LABEL] == label], job)
        height = layout.y * _LINE + _TOP + _BOTTOM
        figure = plt.figure(figsize=(_WIDTH, height))
        figure.subplots_adjust(
            left=_LEFT / _WIDTH,
            right=1 - _RIGHT / _WIDTH,
            top=1 - _TOP / height,
            bottom=_BOTTOM / height,
        )
        layout.draw(figure.add_subplot(), mine)
        of = f", page {page} of {pages}" if pages > 1 else ""
        figure.text(
            0.01,
            1 - 0.12 / height,
            f"dwell budgets of {catalogue}{of}, built {built_at:%Y-%m-%d %H:%M} UTC\n"
            "dots: each dwell of the last 30 days · box: middle half · "
            "ticks: p50 (black), p95 = watch (orange), 2 x p95 = alert (red)",
            fontsize=9,
            va="top",
        )
        suffix = f"-{page}" if pages > 1 else ""
        path = folder / f"budgets-{slugs[catalogue]}{suffix}.png"
        figure.savefig(path, dpi=100)
        plt.close(figure)
        written.append(path)
    return written


class _Layout:
    """Every mark of one page, gathered job by job, then drawn once per kind."""

    def __init__(self) -> None:
        self.y = 0.0  # the next free line, counting down the page
        self.dots: list[tuple[np.ndarray, np.ndarray]] = []
        self.boxes: list[tuple[float, float, float]] = []  # (y, q1, q3)
        self.ticks: dict[str, list[tuple[float, float]]] = {"p50": [], "p95": [], "alert": []}
        self.state_labels: list[tuple[float, str]] = []
        self.notes: list[tuple[float, str, bool]] = []  # (y, text, learning)
        self.titles: list[tuple[float, str, str]] = []  # (y, job, whole job)
        self.rules: list[float] = []
        self._rng = np.random.default_rng(0)  # the same picture for the same data

    def job(
        self, label: str, rows: pd.DataFrame, dwells: pd.DataFrame, whole: pd.Series | None
    ) -> None:
        """One job's block: its title line, then a line per state."""
        backend = rows[BACKEND].iloc[0] if len(rows) else ""
        self.rules.append(self.y)
        self.titles.append((self.y + _HEAD / _LINE / 2, f"{label}  ({backend})", _whole(whole)))
        self.y += _HEAD / _LINE
        by_state = rows.set_index(STATE)
        for state in state_order(list(rows[STATE])):
            y = self.y + 0.5
            self.y += 1
            self.state_labels.append((y, state))
            values = np.maximum(dwells.loc[dwells[STATE] == state, DWELL_S].to_numpy(), FLOOR_S)
            if len(values):
                q1, q3 = np.percentile(values, [25, 75])
                self.boxes.append((y, float(q1), float(q3)))
                if len(values) > MAX_DOTS:
                    values = self._rng.choice(values, MAX_DOTS, replace=False)
                self.dots.append((values, y + self._rng.uniform(-0.2, 0.2, len(values))))
            row = by_state.loc[state]
            if row[SOURCE] == Source.LEARNING or pd.isna(row[P95]):
                self.notes.append((y, str(row[BASIS]), True))
                continue
            self.ticks["p50"].append((y, float(row[P50])))
            self.ticks["p95"].append((y, float(row[P95])))
            self.ticks["alert"].append((y, float(row[ALERT_AT])))
            words = f"p50 {format_duration(row[P50])} · p95 {format_duration(row[P95])}"
            self.notes.append((y, f"{words} · {row[BASIS]}", False))
        self.y += 0.3  # air before the next job

    def draw(self, ax: Any, dwells: pd.DataFrame) -> None:
        """Everything gathered, on one Axes with a log seconds axis."""
        from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

        if self.boxes:
            y, q1, q3 = (np.array(v) for v in zip(*self.boxes, strict=True))
            ax.barh(y, q3 - q1, left=q1, height=0.6, color="#c6dbef", edgecolor="#6baed6", lw=0.6)
        if self.dots:
            dots_x = np.concatenate([d[0] for d in self.dots])
            dots_y = np.concatenate([d[1] for d in self.dots])
            ax.scatter(dots_x, dots_y, s=5, color="#525252", alpha=0.5, linewidths=0, zorder=3)
        for name, colour, width in (("alert", "#d62728", 1.2), ("p95", "#fd8d3c", 2.2)):
            self._ticks(ax, name, colour, width)
        self._ticks(ax, "p50", "black", 2.2)
        for rule in self.rules[1:]:
            ax.axhline(rule, color="#bdbdbd", linewidth=0.6)
        side = ax.get_yaxis_transform()  # x in axes fractions, y in lines
        for line, title, whole in self.titles:
            ax.text(
                -0.09, line, title, transform=side, fontsize=8.5, fontweight="bold", va="center"
            )
            ax.text(1.01, line, whole, transform=side, fontsize=8, va="center", color="#252525")
        for line, note, learning in self.notes:
            colour, style = ("#737373", "italic") if learning else ("#252525", "normal")
            ax.text(1.01, line, note, transform=side, fontsize=8, va="center", color=colour,
                    style=style)  # fmt: skip
        ax.set_yticks([y for y, _ in self.state_labels], [s for _, s in self.state_labels])
        ax.tick_params(axis="y", labelsize=8.5, length=0)
        ax.set_ylim(self.y, 0)
        values = dwells[DWELL_S].to_numpy()
        top = float(np.nanmax(values)) if len(values) else 60.0
        top = max([top, 10.0, *(x for _, x in self.ticks["alert"])])
        ax.set_xscale("log")
        ax.set_xlim(FLOOR_S / 1.5, top * 2)
        ax.xaxis.set_major_locator(FixedLocator(list(_TICKS)))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: _TICKS.get(x, format_duration(x))))
        ax.tick_params(axis="x", labelsize=8.5, top=True, labeltop=True)
        ax.grid(axis="x", color="#e5e5e5", linewidth=0.8)
        ax.set_axisbelow(True)
        ax.set_xlabel("time in state (log scale)", fontsize=9)

    def _ticks(self, ax: Any, name: str, colour: str, width: float) -> None:
        marks = self.ticks[name]
        if marks:
            y, x = (np.array(v) for v in zip(*marks, strict=True))
            ax.vlines(
                np.maximum(x, FLOOR_S), y - _HALF, y + _HALF, color=colour, lw=width, zorder=4
            )


def _pages(states: pd.DataFrame, per_page: int) -> Iterator[tuple[str, int, int, list[str]]]:
    """(catalogue, page, pages, labels) per page, in the table's order."""
    per_page = max(1, per_page)
    for catalogue in dict.fromkeys(states[CATALOGUE]):
        labels = list(dict.fromkeys(states.loc[states[CATALOGUE] == catalogue, LABEL]))
        pages = -(-len(labels) // per_page)
        for page in range(pages):
            yield catalogue, page + 1, pages, labels[page * per_page : (page + 1) * per_page]


def _whole(job: pd.Series | None) -> str:
    """The whole job's budget in words, for its title line."""
    if job is None:
        return ""
    if job[SOURCE] == Source.LEARNING or pd.isna(job[P95]):
        return f"whole job: {job[BASIS]}"
    p50, p95 = format_duration(job[P50]), format_duration(job[P95])
    return f"whole job: p50 {p50} · p95 {p95} · {job[BASIS]}"


def _slugs(catalogues: list[str]) -> dict[str, str]:
    """Each catalogue key as a file name part, different for different keys."""
    out: dict[str, str] = {}
    for catalogue in catalogues:
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", catalogue).strip("_.")[-80:] or "catalogue"
        if slug in out.values():  # `team/a` and `team_a`: the key's hash tells them apart
            slug += "-" + hashlib.sha1(catalogue.encode()).hexdigest()[:8]
        out[catalogue] = slug
    return out
