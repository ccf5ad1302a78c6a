"""Dwell budgets: what normal is for each job and state, learned from the ledger's history.

``table`` computes the budget tables from a history frame (pandas; import it when you compute);
``lookup`` is the light side a night or the watchdog uses: ``Budgets``, ``Budget``, ``classify``.
Importing this package pulls in no pandas.
"""

from __future__ import annotations

from nightshift.budgets.lookup import Budget, Budgets, Level, classify

__all__ = ["Budget", "Budgets", "Level", "classify"]
