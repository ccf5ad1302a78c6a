"""The submission options the runner hands every backend: which attempt, and whether it resumes.

``options["submission_key"]`` names one attempt of one job (``catalogue/night/label/attempt``);
``options["resume_since"]`` (ISO-8601, UTC if no offset) says an earlier try of that attempt
began submitting then and may have started the external job: look for it before starting one.
"""

from __future__ import annotations

from datetime import UTC, datetime

from nightshift.backends.base import JobSpec
from nightshift.errors import PermanentBackendError

__all__ = ["resume_since", "submission_key"]


def submission_key(spec: JobSpec) -> str | None:
    """The attempt's submission key, if the runner gave one."""
    key = spec.options.get("submission_key")
    return str(key) if key else None


def resume_since(spec: JobSpec) -> datetime | None:
    """When an earlier try of this attempt began submitting (aware, UTC); None on a first try."""
    raw = spec.options.get("resume_since")
    if raw is None:
        return None
    try:
        since = raw if isinstance(raw, datetime) else datetime.fromisoformat(str(raw))
    except ValueError:
        raise PermanentBackendError(
            f"job {spec.label!r}: resume_since {raw!r} is not an ISO-8601 time"
        ) from None
    return since.astimezone(UTC) if since.tzinfo else since.replace(tzinfo=UTC)
