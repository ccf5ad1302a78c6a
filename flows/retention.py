"""A deployment entry point (``prefect.yaml``): the flow lives in ``nightshift.flows.retention``."""

from nightshift.flows.retention import retention

__all__ = ["retention"]
