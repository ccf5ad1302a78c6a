"""A deployment entry point (``prefect.yaml``): the flow lives in ``nightshift.flows.budgets``."""

from nightshift.flows.budgets import budgets

__all__ = ["budgets"]
