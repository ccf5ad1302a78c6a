"""Budget tables from the ledger's dwell history: pure ``DataFrame -> DataFrame`` functions.

The input is ``Ledger.history()``'s frame plus a ``catalogue`` column (HISTORY_COLUMNS). Only
dwells that ended in ``[now - window, now]`` count (both ends included: the reader's
``history(since=now - window)`` is inclusive too), and only dwells in states a job is still on
its way in: a dwell in a final state is the idle gap before a rerun, nothing to budget.
Percentiles are pandas' (linear interpolation between samples).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import NamedTuple

import numpy as np
import pandas as pd

from nightshift.backends.base import FINAL_STATES
from nightshift.budgets.columns import (
    ALERT_AT,
    AT,
    BACKEND,
    BACKEND_BUDGET_COLUMNS,
    BASIS,
    CATALOGUE,
    DWELL_S,
    JOB_BUDGET_COLUMNS,
    LABEL,
    MIN_SAMPLES,
    NIGHT,
    P50,
    P95,
    SOURCE,
    SOURCE_N,
    STATE,
    STATE_BUDGET_COLUMNS,
    WATCH_AT,
    WINDOW,
    N,
    Source,
)
from nightshift.engine.outcomes import FINAL_OUTCOMES

__all__ = [
    "FINAL",
    "BudgetTables",
    "backend_budgets",
    "budget_tables",
    "job_budgets",
    "recent_dwells",
    "state_budgets",
]

# every name a job's last state can have: the night's outcomes and the backends' final states
FINAL: frozenset[str] = FINAL_OUTCOMES | {state.value for state in FINAL_STATES}

_KEYS = [CATALOGUE, LABEL, BACKEND, STATE, NIGHT]


class BudgetTables(NamedTuple):
    """The three tables one snapshot holds."""

    states: pd.DataFrame  # STATE_BUDGET_COLUMNS
    backends: pd.DataFrame  # BACKEND_BUDGET_COLUMNS
    jobs: pd.DataFrame  # JOB_BUDGET_COLUMNS


def recent_dwells(history: pd.DataFrame, now: datetime, window: timedelta = WINDOW) -> pd.DataFrame:
    """The dwells that count: ended in ``[now - window, now]``, in a non-final state."""
    if now.tzinfo is None:
        raise ValueError(f"naive datetime {now!r}: pass a timezone-aware one")
    end = pd.Timestamp(now)
    at = history[AT]
    keep = (at >= end - window) & (at <= end)
    keep &= ~history[STATE].isin(FINAL) & history[DWELL_S].notna()
    recent = history.loc[keep, [*_KEYS, DWELL_S, AT]]
    # one factorisation per key instead of one per groupby below
    return recent.astype({**dict.fromkeys(_KEYS, "category"), DWELL_S: "float64"})


def backend_budgets(
    history: pd.DataFrame, now: datetime, window: timedelta = WINDOW
) -> pd.DataFrame:
    """Per (catalogue, backend, state): n, p50 and p95 of every job of that backend pooled."""
    return _backends(recent_dwells(history, now, window))


def state_budgets(
    history: pd.DataFrame,
    now: datetime,
    window: timedelta = WINDOW,
    min_samples: int = MIN_SAMPLES,
) -> pd.DataFrame:
    """Per (catalogue, label, state): the job's budget, else its backend's, else learning."""
    recent = recent_dwells(history, now, window)
    return _states(recent, _backends(recent), min_samples)


def job_budgets(
    history: pd.DataFrame,
    now: datetime,
    window: timedelta = WINDOW,
    min_samples: int = MIN_SAMPLES,
) -> pd.DataFrame:
    """Per (catalogue, label): the whole job, one sample per job-night (its dwells summed)."""
    return _jobs(recent_dwells(history, now, window), min_samples)


def budget_tables(
    history: pd.DataFrame,
    now: datetime,
    window: timedelta = WINDOW,
    min_samples: int = MIN_SAMPLES,
) -> BudgetTables:
    """All three tables from one pass over the window."""
    recent = recent_dwells(history, now, window)
    backends = _backends(recent)
    return BudgetTables(
        _states(recent, backends, min_samples), backends, _jobs(recent, min_samples)
    )


def _percentiles(dwells: pd.DataFrame, keys: list[str], value: str = DWELL_S) -> pd.DataFrame:
    """n, p50 and p95 of ``value`` per ``keys``, the keys as plain string columns."""
    grouped = dwells.groupby(keys, observed=True, sort=True)[value]
    out = pd.DataFrame(
        {
            N: grouped.size().astype("int64"),
            P50: grouped.quantile(0.5).astype("float64"),
            P95: grouped.quantile(0.95).astype("float64"),
        }
    ).reset_index()
    return out.astype(dict.fromkeys(keys, str))


def _backends(recent: pd.DataFrame) -> pd.DataFrame:
    out = _percentiles(recent, [CATALOGUE, BACKEND, STATE])
    return out[BACKEND_BUDGET_COLUMNS]


def _latest_backend(recent: pd.DataFrame) -> pd.DataFrame:
    """Per (catalogue, label): the backend of its latest dwell (a job may change backend)."""
    latest = recent.groupby([CATALOGUE, LABEL], observed=True)[AT].idxmax()
    out = recent.loc[latest.to_numpy(), [CATALOGUE, LABEL, BACKEND]]
    return out.astype(str).reset_index(drop=True)


def _states(recent: pd.DataFrame, backends: pd.DataFrame, min_samples: int) -> pd.DataFrame:
    own = _percentiles(recent, [CATALOGUE, LABEL, STATE])
    own = own.merge(_latest_backend(recent), on=[CATALOGUE, LABEL], how="left")
    pooled = backends.rename(columns={N: "_n", P50: "_p50", P95: "_p95"})
    both = own.merge(pooled, on=[CATALOGUE, BACKEND, STATE], how="left")
    mine = both[N] >= min_samples
    theirs = ~mine & (both["_n"].fillna(0) >= min_samples)
    source = np.select([mine, theirs], [Source.JOB, Source.BACKEND], Source.LEARNING)
    both[SOURCE] = pd.Series(source, index=both.index, dtype=str)
    both[SOURCE_N] = both[N].where(~theirs, both["_n"]).astype("int64")
    both[P50] = both[P50].where(mine, both["_p50"].where(theirs))
    both[P95] = both[P95].where(mine, both["_p95"].where(theirs))
    return _finish(both, STATE_BUDGET_COLUMNS, [CATALOGUE, LABEL, STATE])


def _jobs(recent: pd.DataFrame, min_samples: int) -> pd.DataFrame:
    """A job-night's whole job: the sum of its non-final dwells over every run of that night.

    Summed per night, not per run: a rerun that re-attaches to a running job writes that job's
    last dwells under its own run id, and the job is still one job. The idle gap before a
    resubmission is a dwell in a final state, already left out.
    """
    keys = [CATALOGUE, LABEL, NIGHT]
    nights = recent.groupby(keys, observed=True, sort=False)[DWELL_S].sum().reset_index()
    out = _percentiles(nights, [CATALOGUE, LABEL])
    out = out.merge(_latest_backend(recent), on=[CATALOGUE, LABEL], how="left")
    mine = out[N] >= min_samples
    out[SOURCE] = pd.Series(np.where(mine, Source.JOB, Source.LEARNING), index=out.index, dtype=str)
    out[SOURCE_N] = out[N]
    out[P50] = out[P50].where(mine)
    out[P95] = out[P95].where(mine)
    return _finish(out, JOB_BUDGET_COLUMNS, [CATALOGUE, LABEL])


def _finish(out: pd.DataFrame, columns: list[str], order: list[str]) -> pd.DataFrame:
    """Watch and alert thresholds, the basis for people, the columns in order."""
    out[WATCH_AT] = out[P95]
    out[ALERT_AT] = 2 * out[P95]
    out[BASIS] = out[SOURCE] + " (n=" + out[SOURCE_N].astype(str) + ")"
    return out.sort_values(order, ignore_index=True)[columns]
