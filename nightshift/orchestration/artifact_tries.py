"""A retried night's artifacts, told apart at a glance: the current try's and the earlier ones'.

A UI Retry reruns the same flow run: its Artifacts tab then lists each try's report, summary,
progress and forecast side by side. The current try's say ``try 2, current: ...`` in their
description; when a retry begins, the earlier tries' artifacts of the run are re-described
``try 1, superseded by try 2: ...`` (Prefect keeps them: they are the earlier try's pages). A
run's first try is described as before. Nothing here may fail the night: a description that
cannot be changed is one warning.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from prefect.runtime import flow_run

__all__ = ["current_try", "described", "supersede_earlier_tries", "superseded"]

_log = logging.getLogger("nightshift.artifacts")
_SAID = re.compile(r"^try (\d+)(?:, current|, superseded by try \d+): ")


def current_try() -> int:
    """This flow run's try: 1, 2 after a Retry (1 outside a flow run)."""
    try:
        return max(int(flow_run.run_count or 1), 1)
    except (TypeError, ValueError):
        return 1


def described(text: str, attempt: int | None = None) -> str:
    """``text`` as the current try's artifact says it (unchanged on a first try)."""
    n = current_try() if attempt is None else attempt
    return text if n <= 1 else f"try {n}, current: {text}"


def superseded(description: str | None, by: int) -> str | None:
    """An earlier try's description once try ``by`` began (None: leave it as it is)."""
    text = description or ""
    match = _SAID.match(text)
    if match is not None:
        earlier = int(match.group(1))
        if earlier >= by:
            return None  # this try's own, or a later one's
        text = text[match.end() :]
    else:
        earlier = 1  # described before retries were said: the run's first try
    return f"try {earlier}, superseded by try {by}: {text}"


def supersede_earlier_tries(client: Any = None) -> int:
    """On a retry: re-describe the run's earlier artifacts as superseded; how many were."""
    n = current_try()
    run_id = flow_run.id
    if n <= 1 or not run_id:
        return 0
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import ArtifactUpdate
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    changed = 0
    try:
        with client or get_client(sync_client=True) as c:
            only = ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run_id]))
            for artifact in c.read_artifacts(artifact_filter=only):
                said = superseded(artifact.description, n)
                if said is not None and said != artifact.description:
                    c.update_artifact(artifact.id, ArtifactUpdate(description=said))
                    changed += 1
    except Exception as exc:  # the pages are a view: the night goes on without this
        _log.warning("could not mark the earlier tries' artifacts superseded: %s", exc)
    return changed
