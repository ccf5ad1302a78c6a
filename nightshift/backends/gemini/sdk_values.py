"""Reading the google-genai SDK's values (state enums, pydantic objects) without importing it.

Apart from ``client`` so that the batch states and the results files need no SDK import: the
SDK takes a second or more to import, and reading a state or a result never needs it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["sdk_json", "sdk_state_name"]

_EXCLUDE = {"sdk_http_response", "automatic_function_calling_history", "parsed"}


def sdk_state_name(state: Any) -> str:
    """A batch or job state enum as its bare name (``SUCCEEDED``, not ``JOB_STATE_SUCCEEDED``)."""
    raw = getattr(state, "value", state) or "UNSPECIFIED"
    return str(raw).removeprefix("JOB_STATE_").removeprefix("BATCH_STATE_")


def sdk_json(model: Any) -> dict[str, Any]:
    """An SDK pydantic object as REST-style JSON (camelCase, no SDK-only fields)."""
    return dict(model.model_dump(mode="json", by_alias=True, exclude_none=True, exclude=_EXCLUDE))
