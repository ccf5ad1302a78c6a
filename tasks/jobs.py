"""The job task; it lives in ``nightshift.tasks.jobs``."""

from nightshift.tasks.jobs import run_job

__all__ = ["run_job"]
