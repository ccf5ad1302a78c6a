"""A deployment entry point (``prefect.yaml``): the flow lives in ``nightshift.flows.nightly``."""

from nightshift.flows.nightly import nightly

__all__ = ["nightly"]
