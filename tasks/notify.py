"""The notify task; it lives in ``nightshift.tasks.notify``."""

from nightshift.tasks.notify import notify

__all__ = ["notify"]
