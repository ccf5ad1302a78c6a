"""A dwell measured across clocks: what the ledger keeps and what learning may trust.

Two rows of one job may be written by different hosts (a night taken over, a rerun elsewhere)
or on different threads of one host. A few hundred milliseconds out of order is one host's
threads: the dwell is 0. Anything further out is a disagreement of clocks: the ledger keeps it as
measured (negative), and learning (budgets, the usual durations, the metrics) leaves it out, as
it leaves out a dwell longer than any night (``clocks_agree``).
"""

from __future__ import annotations

__all__ = ["CLOCK_SLACK_S", "MAX_DWELL_S", "clocks_agree", "measured_dwell"]

CLOCK_SLACK_S = 1.0  # rows this far out of order are one host's threads, not two clocks
MAX_DWELL_S = 86_400.0  # no state of a night lasts longer than a day


def measured_dwell(seconds: float) -> float:
    """The dwell the ledger writes for ``seconds`` between two rows: 0 for one host's slack."""
    return seconds if seconds < -CLOCK_SLACK_S else max(0.0, seconds)


def clocks_agree(seconds: float) -> bool:
    """Whether a dwell can be learned from: neither negative nor longer than a night."""
    return 0.0 <= seconds <= MAX_DWELL_S
