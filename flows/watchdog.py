"""A deployment entry point (``prefect.yaml``): the flow lives in ``nightshift.flows.watchdog``."""

from nightshift.flows.watchdog import watchdog

__all__ = ["watchdog"]
