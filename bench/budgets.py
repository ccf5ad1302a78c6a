"""Measure budgets from a big ledger: write, read back and compute from synthetic transitions.

Writes ``--rows`` transitions (a month of nights, several catalogues, every job walking
submitting -> submitted -> queued -> running -> final with log-normal dwells) into a SQLite
ledger in one bulk insert, reads every catalogue's back through ``Ledger.history`` in one query,
computes the budget tables, stores them as a snapshot and reads the latest snapshot back.
Prints seconds and rows/s for each step. Aim: the pandas part (computing) under 1 s for
1,000,000 transitions.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import sqlalchemy as sa

from nightshift.budgets import Budgets
from nightshift.budgets.columns import WINDOW
from nightshift.budgets.snapshots import BudgetSnapshots
from nightshift.budgets.table import BudgetTables, budget_tables
from nightshift.store.ledger import Ledger, UTCDateTime

NOW = datetime(2026, 11, 29, 6, 0, tzinfo=UTC)
STATES = ["submitting", "submitted", "queued", "running"]
MEDIAN_S = {"submitting": (0.5, 2), "submitted": (2, 10), "queued": (60, 1800)}
MEDIAN_S["running"] = (300, 7200)
SIGMA = 0.5
FAILED_SHARE = 0.03
CHUNK = 100_000


def synthetic(rows: int, catalogues: int, nights: int, seed: int = 7) -> list[dict[str, Any]]:
    """About ``rows`` transition rows: five per job-night, every night inside the window."""
    rng = np.random.default_rng(seed)
    hops = len(STATES) + 1  # the first row has no from_state, then one per state left
    labels = max(1, rows // hops // (nights * catalogues))
    cat, label, night = (
        a.ravel()
        for a in np.meshgrid(
            np.arange(catalogues), np.arange(labels), np.arange(nights), indexing="ij"
        )
    )
    jobs = cat.size
    # each label has its own normal per state; each night draws around it
    medians = np.stack(
        [rng.uniform(*MEDIAN_S[s], size=(catalogues, labels)) for s in STATES], axis=-1
    )
    dwell = rng.lognormal(np.log(medians[cat, label]), SIGMA)  # (jobs, states)
    night_start = NOW - timedelta(days=nights) + timedelta(hours=1)
    start_s = night * 86_400.0 + rng.uniform(0, 3600, size=jobs)
    offsets = np.concatenate([start_s[:, None], start_s[:, None] + dwell.cumsum(axis=1)], axis=1)
    at = (pd.Timestamp(night_start) + pd.to_timedelta(offsets.ravel(), unit="s")).to_pydatetime()
    final = np.where(rng.random(jobs) < FAILED_SHARE, "failed", "succeeded")
    backends = ["cli", "gemini_batch", "command"]
    out: list[dict[str, Any]] = []
    for j in range(jobs):
        c, lab, n = int(cat[j]), int(label[j]), int(night[j])
        base = {
            "catalogue": f"cat-{c}",
            "night": (night_start + timedelta(days=n)).date().isoformat(),
            "run_id": f"run-{c}-{n}",
            "label": f"job-{lab:05d}",
            "backend": backends[lab % len(backends)],
            "external_id": None,
        }
        path = [None, *STATES, str(final[j])]
        for k in range(hops):
            row = dict(base, from_state=path[k], to_state=path[k + 1], at=at[j * hops + k])
            row["dwell_s"] = None if k == 0 else float(dwell[j, k - 1])
            out.append(row)
    return out


def write(url: str, rows: list[dict[str, Any]]) -> None:
    """One transaction of chunked executemany inserts into the ledger's transitions table."""
    engine = Ledger(url).engine  # makes the schema through the ledger's own migrations
    table = sa.Table(
        "transitions", sa.MetaData(), sa.Column("at", UTCDateTime()), autoload_with=engine
    )
    with engine.begin() as conn:
        for i in range(0, len(rows), CHUNK):
            conn.execute(sa.insert(table), rows[i : i + CHUNK])
    engine.dispose()


def read(url: str, since: datetime) -> pd.DataFrame:
    """Every catalogue's history in one query: the frame the budgets read."""
    ledger = Ledger(url)
    try:
        return ledger.history(since, all_catalogues=True)
    finally:
        ledger.close()


def snapshot(url: str, tables: BudgetTables, dwells: int) -> tuple[float, float]:
    """Seconds to store ``tables`` as a snapshot, and to read the latest one back."""
    ledger = Ledger(url)
    store = BudgetSnapshots(ledger.engine)
    try:
        t0 = time.perf_counter()
        store.save(tables, built_at=NOW, since=NOW - WINDOW, dwells=dwells)
        t1 = time.perf_counter()
        store.latest()
        t2 = time.perf_counter()
    finally:
        ledger.close()
    return t1 - t0, t2 - t1


def rate(n: int, seconds: float) -> str:
    return f"{seconds:7.2f} s  {n / seconds:>12,.0f} rows/s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000, help="transitions to write")
    parser.add_argument("--catalogues", type=int, default=4)
    parser.add_argument("--nights", type=int, default=30, help="nights of history (<= 30)")
    args = parser.parse_args()

    started = time.perf_counter()
    rows = synthetic(args.rows, args.catalogues, min(args.nights, WINDOW.days))
    print(f"generated {len(rows):,} transitions in {time.perf_counter() - started:.2f} s")

    with tempfile.TemporaryDirectory(prefix="nightshift-bench-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'ledger.sqlite3'}"
        t0 = time.perf_counter()
        write(url, rows)
        t1 = time.perf_counter()
        history = read(url, NOW - WINDOW)
        t2 = time.perf_counter()
        tables = budget_tables(history, NOW)
        t3 = time.perf_counter()
        budgets = Budgets.from_frames(*tables)
        t4 = time.perf_counter()
        stored, loaded = snapshot(url, tables, len(history))

    print(f"write   {len(rows):>9,} transitions  {rate(len(rows), t1 - t0)}")
    print(f"read    {len(history):>9,} dwells       {rate(len(history), t2 - t1)}")
    print(f"compute {len(history):>9,} dwells       {rate(len(history), t3 - t2)}  (pandas)")
    print(f"lookup  {len(budgets.states):>9,} budgets      {t4 - t3:7.2f} s  (Budgets.from_frames)")
    budget_rows = sum(len(frame) for frame in tables)
    print(f"store   {budget_rows:>9,} budget rows  {rate(budget_rows, stored)}  (a snapshot)")
    print(f"load    {budget_rows:>9,} budget rows  {rate(budget_rows, loaded)}  (the latest)")
    print(
        f"tables: {len(tables.states):,} job x state, {len(tables.backends):,} backend x state, "
        f"{len(tables.jobs):,} jobs; sources {tables.states['source'].value_counts().to_dict()}"
    )
    verdict = "under" if t3 - t2 < 1 else "OVER"
    print(f"pandas part {t3 - t2:.2f} s: {verdict} the 1 s aim")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
