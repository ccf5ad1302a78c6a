"""Column names and defaults of the budget tables, shared by the pandas side and the lookup."""

from __future__ import annotations

from datetime import timedelta

from nightshift.config.catalogue import MIN_SAMPLES

__all__ = [
    "ALERT_AT",
    "AT",
    "BACKEND",
    "BACKEND_BUDGET_COLUMNS",
    "BASIS",
    "CATALOGUE",
    "DWELL_S",
    "HISTORY_COLUMNS",
    "JOB_BUDGET_COLUMNS",
    "LABEL",
    "MIN_SAMPLES",
    "NIGHT",
    "P50",
    "P95",
    "RUN_ID",
    "SOURCE",
    "SOURCE_N",
    "STATE",
    "STATE_BUDGET_COLUMNS",
    "WATCH_AT",
    "WINDOW",
    "N",
    "Source",
]

WINDOW = timedelta(days=30)  # budgets never read further back than this
# MIN_SAMPLES (7): fewer samples than this and a budget falls back (job -> backend -> learning);
# the default of a catalogue's `defaults.min_samples`, which every reader passes on as a value

# the input: Ledger.history()'s columns (nightshift.store.ledger.HISTORY_COLUMNS, the same names
# kept here so the lookup needs no store) and the catalogue
CATALOGUE = "catalogue"
NIGHT = "night"
RUN_ID = "run_id"
LABEL = "label"
BACKEND = "backend"
STATE = "state"  # the state the job dwelt in
DWELL_S = "dwell_s"  # seconds in STATE
AT = "at"  # when the job left STATE (datetime64, UTC)
HISTORY_COLUMNS = [CATALOGUE, NIGHT, RUN_ID, LABEL, BACKEND, STATE, DWELL_S, AT]

# the outputs
N = "n"  # the job's own samples (job-nights for the whole-job table)
P50 = "p50"  # seconds; NaN while learning
P95 = "p95"  # seconds; NaN while learning
WATCH_AT = "watch_at"  # = p95: longer than this is `watch`
ALERT_AT = "alert_at"  # = 2 x p95: longer than this is `alert`
SOURCE = "source"  # "job" | "backend" | "learning": where p50/p95 come from
SOURCE_N = "source_n"  # the samples behind p50/p95 (the backend's for "backend", else N)
BASIS = "basis"  # for people: "job (n=12)", "backend (n=40)", "learning (n=3)"


class Source:
    """The values of the SOURCE column."""

    JOB = "job"
    BACKEND = "backend"
    LEARNING = "learning"
    DECLARED = "declared"  # a job's own `expect:` until its history says otherwise (not stored)


_LEARNED = [N, P50, P95, WATCH_AT, ALERT_AT, SOURCE, SOURCE_N, BASIS]
# per (catalogue, label, state): one row per non-final state a job dwelt in
STATE_BUDGET_COLUMNS = [CATALOGUE, LABEL, STATE, BACKEND, *_LEARNED]
# per (catalogue, backend, state): every job of that backend pooled; the fallback's second step
BACKEND_BUDGET_COLUMNS = [CATALOGUE, BACKEND, STATE, N, P50, P95]
# per (catalogue, label): the whole job, one sample per job-night
JOB_BUDGET_COLUMNS = [CATALOGUE, LABEL, BACKEND, *_LEARNED]
