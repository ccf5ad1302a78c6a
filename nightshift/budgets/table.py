"""Budget tables from the ledger's dwell history: pure ``DataFrame -> DataFrame`` functions.

The input is ``Ledger.history()``'s frame plus a ``catalogue`` column (HISTORY_COLUMNS). Only
dwells that ended in ``[now - window, now]`` count (both ends included: the reader's
``history(since=now - window)`` is inclusive too), and only dwells in states a job is still on
its way in: a dwell in a final state is the idle gap before a rerun, nothing to budget.
A dwell whose clocks disagree (negative, or longer than a night: its two rows written by hosts
whose clocks differ) is kept out of learning and named by ``clock_disagreements``.
Percentiles are pandas' (linear interpolation between samples).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import NamedTuple

import numpy as np
import pandas as pd

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
from nightshift.dwells import MAX_DWELL_S
from nightshift.states import FINAL

__all__ = [
    "FINAL",
    "BudgetTables",
    "at_least",
    "backend_budgets",
    "budget_tables",
    "clock_disagreements",
    "job_budgets",
    "recent_dwells",
    "state_budgets",
    "thresholds",
]

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
    keep = _in_window(history, now, window) & _clocks_agree(history[DWELL_S])
    return history.loc[keep, [*_KEYS, DWELL_S, AT]].astype({DWELL_S: "float64"})


def clock_disagreements(
    history: pd.DataFrame, now: datetime, window: timedelta = WINDOW
) -> pd.DataFrame:
    """The window's dwells left out because their clocks disagree: negative, or over a day."""
    if now.tzinfo is None:
        raise ValueError(f"naive datetime {now!r}: pass a timezone-aware one")
    keep = _in_window(history, now, window) & ~_clocks_agree(history[DWELL_S])
    return history.loc[keep, [*_KEYS, DWELL_S, AT]].astype({DWELL_S: "float64"})


def _in_window(history: pd.DataFrame, now: datetime, window: timedelta) -> pd.Series:
    end = pd.Timestamp(now)
    at = history[AT]
    keep = (at >= end - window) & (at <= end)
    return keep & ~history[STATE].isin(FINAL) & history[DWELL_S].notna()


def _clocks_agree(dwell: pd.Series) -> pd.Series:
    """``clocks_agree`` of each dwell (a missing one is left to the caller)."""
    seconds = dwell.astype("float64")
    return seconds.isna() | ((seconds >= 0) & (seconds <= MAX_DWELL_S))


def backend_budgets(
    history: pd.DataFrame, now: datetime, window: timedelta = WINDOW
) -> pd.DataFrame:
    """Per (catalogue, backend, state): n, p50 and p95 of every job of that backend pooled."""
    coded = _Coded(recent_dwells(history, now, window))
    return _strings(_backends(coded), coded, BACKEND_BUDGET_COLUMNS)


def state_budgets(
    history: pd.DataFrame,
    now: datetime,
    window: timedelta = WINDOW,
    min_samples: int = MIN_SAMPLES,
) -> pd.DataFrame:
    """Per (catalogue, label, state): the job's budget, else its backend's, else learning."""
    coded = _Coded(recent_dwells(history, now, window))
    return _strings(_states(coded, _backends(coded), min_samples), coded, STATE_BUDGET_COLUMNS)


def job_budgets(
    history: pd.DataFrame,
    now: datetime,
    window: timedelta = WINDOW,
    min_samples: int = MIN_SAMPLES,
) -> pd.DataFrame:
    """Per (catalogue, label): the whole job, one sample per job-night (its dwells summed)."""
    coded = _Coded(recent_dwells(history, now, window))
    return _strings(_jobs(coded, min_samples), coded, JOB_BUDGET_COLUMNS)


def budget_tables(
    history: pd.DataFrame,
    now: datetime,
    window: timedelta = WINDOW,
    min_samples: int = MIN_SAMPLES,
) -> BudgetTables:
    """All three tables from one pass over the window."""
    coded = _Coded(recent_dwells(history, now, window))
    backends = _backends(coded)
    return BudgetTables(
        _strings(_states(coded, backends, min_samples), coded, STATE_BUDGET_COLUMNS),
        _strings(backends, coded, BACKEND_BUDGET_COLUMNS),
        _strings(_jobs(coded, min_samples), coded, JOB_BUDGET_COLUMNS),
    )


def at_least(tables: BudgetTables, min_samples: int = MIN_SAMPLES) -> BudgetTables:
    """``tables`` as a catalogue with ``min_samples`` sees them: the job -> backend -> learning
    choice made again from the job's own rows and its backend's pooled ones.

    For tables learned with ``min_samples=1`` (what a snapshot stores: every job's own p50 and
    p95) this is ``budget_tables`` with ``min_samples``; a row whose own samples were not kept
    (an older snapshot's backend or learning row) can only fall back.
    """
    states = _with_pooled(tables.states, tables.backends)
    _fall_back(states, (states[SOURCE] == Source.JOB) & (states[N] >= min_samples), min_samples)
    jobs = tables.jobs.copy()
    own = (jobs[SOURCE] == Source.JOB) & (jobs[N] >= min_samples)
    jobs[SOURCE] = pd.Series(
        np.where(own, Source.JOB, Source.LEARNING), index=jobs.index, dtype=str
    )
    jobs[SOURCE_N] = jobs[N]
    jobs[P50] = jobs[P50].where(own)
    jobs[P95] = jobs[P95].where(own)
    return BudgetTables(
        thresholds(states)[STATE_BUDGET_COLUMNS],
        tables.backends,
        thresholds(jobs)[JOB_BUDGET_COLUMNS],
    )


class _Coded:
    """The window's key columns as integer codes, and its dwells and end times as arrays."""

    # each string column is hashed once; every group below is then one int64 key (mixed radix
    # over the codes), which pandas groups several times faster than a few string columns

    def __init__(self, recent: pd.DataFrame) -> None:
        self.codes: dict[str, np.ndarray] = {}
        self.uniques: dict[str, np.ndarray] = {}
        for column in _KEYS:
            # an object array factorises about twice as fast as pandas' python-backed str dtype
            values = recent[column].to_numpy(dtype=object)
            codes, uniques = pd.factorize(values, use_na_sentinel=False)  # a missing key: its own
            self.codes[column], self.uniques[column] = codes.astype(np.int64), uniques
        self.dwell = recent[DWELL_S].to_numpy(dtype=np.float64)
        # microseconds since the epoch: an aware column's to_numpy() is a Timestamp per row
        self.at = pd.to_datetime(recent[AT], utc=True).array.asi8

    def size(self, column: str) -> int:
        return max(1, len(self.uniques[column]))

    def key(self, columns: list[str]) -> np.ndarray:
        """One int64 per row that orders and groups like ``columns`` together."""
        key = np.zeros(len(self.dwell), dtype=np.int64)
        for column in columns:
            key = key * self.size(column) + self.codes[column]
        return key

    def split(self, key: np.ndarray, columns: list[str]) -> dict[str, np.ndarray]:
        """The codes of ``columns`` a ``key`` was made of."""
        out: dict[str, np.ndarray] = {}
        for column in reversed(columns):
            key, out[column] = np.divmod(key, self.size(column))
        return {column: out[column] for column in columns}


def _percentiles(key: np.ndarray, values: np.ndarray) -> pd.DataFrame:
    """n, p50 and p95 of ``values`` per ``key``, indexed by the sorted keys."""
    grouped = pd.Series(values, dtype=np.float64).groupby(key, sort=True)
    # both quantiles in one call: one sort of the values within their groups, not two
    quantiles = grouped.quantile([0.5, 0.95]).unstack()
    out = quantiles.reindex(columns=[0.5, 0.95]).set_axis([P50, P95], axis=1).astype("float64")
    out.insert(0, N, grouped.size().astype("int64"))
    return out


def _by(coded: _Coded, columns: list[str], key: np.ndarray, values: np.ndarray) -> pd.DataFrame:
    """_percentiles with the key split back into one code column per name in ``columns``."""
    out = _percentiles(key, values)
    codes = coded.split(out.index.to_numpy(dtype=np.int64), columns)
    return pd.DataFrame(codes).join(out.reset_index(drop=True))


def _backends(coded: _Coded) -> pd.DataFrame:
    columns = [CATALOGUE, BACKEND, STATE]
    return _by(coded, columns, coded.key(columns), coded.dwell)


def _latest_backend(coded: _Coded) -> pd.DataFrame:
    """Per (catalogue, label): the backend of its latest dwell (a job may change backend)."""
    columns = [CATALOGUE, LABEL]
    latest = pd.Series(coded.at).groupby(coded.key(columns), sort=True).idxmax()
    out = pd.DataFrame(coded.split(latest.index.to_numpy(dtype=np.int64), columns))
    out[BACKEND] = coded.codes[BACKEND][latest.to_numpy(dtype=np.int64)]
    return out


def _states(coded: _Coded, backends: pd.DataFrame, min_samples: int) -> pd.DataFrame:
    columns = [CATALOGUE, LABEL, STATE]
    own = _by(coded, columns, coded.key(columns), coded.dwell)
    own = own.merge(_latest_backend(coded), on=[CATALOGUE, LABEL], how="left")
    both = _with_pooled(own, backends)
    _fall_back(both, both[N] >= min_samples, min_samples)
    return thresholds(both)


def _with_pooled(states: pd.DataFrame, backends: pd.DataFrame) -> pd.DataFrame:
    """Each state row beside its backend's pooled budget (``_n``, ``_p50``, ``_p95``)."""
    pooled = backends.rename(columns={N: "_n", P50: "_p50", P95: "_p95"})
    return states.merge(pooled, on=[CATALOGUE, BACKEND, STATE], how="left")


def _fall_back(both: pd.DataFrame, mine: pd.Series, min_samples: int) -> None:
    """In place: the job's own budget where ``mine``, else its backend's when that has
    ``min_samples``, else none (learning): the one job -> backend -> learning choice."""
    theirs = ~mine & (both["_n"].fillna(0) >= min_samples)
    source = np.select([mine, theirs], [Source.JOB, Source.BACKEND], Source.LEARNING)
    both[SOURCE] = pd.Series(source, index=both.index, dtype=str)
    both[SOURCE_N] = both[N].where(~theirs, both["_n"]).astype("int64")
    both[P50] = both[P50].where(mine, both["_p50"].where(theirs))
    both[P95] = both[P95].where(mine, both["_p95"].where(theirs))


def _jobs(coded: _Coded, min_samples: int) -> pd.DataFrame:
    """A job-night's whole job: the sum of its non-final dwells over every run of that night.

    Summed per night, not per run: a rerun that re-attaches to a running job writes that job's
    last dwells under its own run id, and the job is still one job. The idle gap before a
    resubmission is a dwell in a final state, already left out.
    """
    nights = pd.Series(coded.dwell).groupby(coded.key([CATALOGUE, LABEL, NIGHT])).sum()
    # NIGHT is the key's last digit: dropping it leaves the (catalogue, label) key
    job_key = nights.index.to_numpy(dtype=np.int64) // coded.size(NIGHT)
    out = _by(coded, [CATALOGUE, LABEL], job_key, nights.to_numpy())
    out = out.merge(_latest_backend(coded), on=[CATALOGUE, LABEL], how="left")
    mine = out[N] >= min_samples
    out[SOURCE] = pd.Series(np.where(mine, Source.JOB, Source.LEARNING), index=out.index, dtype=str)
    out[SOURCE_N] = out[N]
    out[P50] = out[P50].where(mine)
    out[P95] = out[P95].where(mine)
    return thresholds(out)


def thresholds(out: pd.DataFrame) -> pd.DataFrame:
    """Watch and alert thresholds and the basis for people, from p95, source and source_n."""
    out[WATCH_AT] = out[P95]
    out[ALERT_AT] = 2 * out[P95]
    out[BASIS] = out[SOURCE] + " (n=" + out[SOURCE_N].astype(str) + ")"
    return out


def _strings(out: pd.DataFrame, coded: _Coded, columns: list[str]) -> pd.DataFrame:
    """Codes back to strings, the rows in key order, ``columns`` in order."""
    out = out.copy()
    for column in set(_KEYS) & set(out.columns):
        values = coded.uniques[column][out[column].to_numpy()]
        out[column] = pd.Series(values, index=out.index, dtype=str)
    order = [c for c in (CATALOGUE, LABEL, BACKEND, STATE) if c in columns]
    if BACKEND in order and LABEL in order:
        order.remove(BACKEND)  # a job's backend follows from its label
    return out.sort_values(order, ignore_index=True)[columns]
