"""What each span of a night says: built from what the night knows when the span ends (the try's
outcome, its states as the ledger dates them, their budgets and levels). Values, no I/O, no
OpenTelemetry: ``export.py`` hands these to the SDK.

Names follow the CI/CD semantic conventions where they fit (a night run is a pipeline run, a job
try a task run; ``cicd.pipeline.*``) and the GenAI ones for a Gemini batch's tokens
(``gen_ai.*``); the rest is nightshift's own, under ``nightshift.*`` (``docs/tracing.md``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from nightshift.backends.base import COST_USD
from nightshift.engine.outcomes import JobOutcome, Outcome

__all__ = [
    "ERROR_OUTCOMES",
    "SpanEvent",
    "SpanRecord",
    "StateSeen",
    "chain_span",
    "night_span",
    "task_result",
    "try_span",
]

Attr = str | bool | int | float
# a try that ended so is an error in the trace
ERROR_OUTCOMES = frozenset({Outcome.FAILED, Outcome.PARTIAL, Outcome.TIMEOUT, Outcome.STUCK_QUEUED})
# cicd.pipeline.task.run.result, as the conventions name the results
_RESULTS = {
    Outcome.SUCCEEDED: "success",
    Outcome.PARTIAL: "failure",
    Outcome.FAILED: "failure",
    Outcome.TIMEOUT: "timeout",
    Outcome.STUCK_QUEUED: "timeout",
    Outcome.CANCELLED: "cancellation",
    Outcome.SKIPPED: "skip",
}


@dataclass(frozen=True)
class SpanEvent:
    name: str
    at: datetime
    attributes: Mapping[str, Attr] = field(default_factory=dict)


@dataclass(frozen=True)
class SpanRecord:
    """One finished span: its ids (``parent_id`` None: a root), its real start and end."""

    name: str
    trace_id: int
    span_id: int
    parent_id: int | None
    start: datetime
    end: datetime
    attributes: Mapping[str, Attr]
    events: tuple[SpanEvent, ...] = ()
    links: tuple[tuple[int, int], ...] = ()  # (trace id, span id) of earlier runs of the night
    error: str | None = None  # the span's status is an error, with this description
    sampled: bool = True


@dataclass(frozen=True)
class StateSeen:
    """A state of the try at the service, dated as the ledger dates it."""

    state: str
    at: datetime
    p50_s: float | None = None
    p95_s: float | None = None
    level: str = "ok"  # ok / watch / alert: the highest it reached in that state


def task_result(outcome: JobOutcome) -> str:
    """``cicd.pipeline.task.run.result`` of a try; a lost job (no outcome of its own) is
    ``error``."""
    if outcome.detail and outcome.detail.startswith("lost"):
        return "error"
    return _RESULTS.get(outcome.state, "error")


def _work(data: Mapping[str, Any]) -> dict[str, Attr]:
    """Tokens, rows and cost, where the try's results say them."""
    out: dict[str, Attr] = {}
    tokens = data.get("tokens")
    if isinstance(tokens, Mapping):
        if isinstance(tokens.get("prompt"), int):
            out["gen_ai.usage.input_tokens"] = tokens["prompt"]
        if isinstance(tokens.get("output"), int):
            out["gen_ai.usage.output_tokens"] = tokens["output"]
    rows = data.get("reconciliation")
    if isinstance(rows, Mapping):
        for key in ("submitted", "succeeded", "failed", "missing"):
            if isinstance(rows.get(key), int):
                out[f"nightshift.rows.{key}"] = rows[key]
    cost = data.get(COST_USD)
    if isinstance(cost, int | float) and not isinstance(cost, bool):
        out["nightshift.cost_usd"] = float(cost)
    return out


def try_span(
    outcome: JobOutcome,
    *,
    catalogue: str,
    night: str,
    attempt: int,
    trace_id: int,
    span_id: int,
    parent_id: int,
    start: datetime,
    end: datetime,
    states: Sequence[StateSeen] = (),
    sampled: bool = True,
) -> SpanRecord:
    """One try of one job: its service states as events, its outcome as its status."""
    attributes: dict[str, Attr] = {
        "cicd.pipeline.name": catalogue,
        "cicd.pipeline.task.name": outcome.label,
        "cicd.pipeline.task.run.id": f"{night}/{outcome.label}#{attempt}",
        "cicd.pipeline.task.run.result": task_result(outcome),
        "nightshift.catalogue": catalogue,
        "nightshift.night": night,
        "nightshift.job.label": outcome.label,
        "nightshift.job.attempt": attempt,
        "nightshift.job.state": outcome.state.value,
    }
    if outcome.backend:
        attributes["nightshift.job.backend"] = outcome.backend
        if outcome.backend == "gemini_batch":
            attributes["gen_ai.provider.name"] = "gcp.gemini"
    if outcome.external_id:
        attributes["nightshift.job.external_id"] = outcome.external_id
    if outcome.detail:
        attributes["nightshift.job.reason"] = outcome.detail.splitlines()[0][:500]
    attributes.update(_work(outcome.data))
    events = []
    for seen in states:
        said: dict[str, Attr] = {"nightshift.level": seen.level}
        if seen.p50_s is not None:
            said["nightshift.budget.p50_s"] = round(seen.p50_s, 3)
        if seen.p95_s is not None:
            said["nightshift.budget.p95_s"] = round(seen.p95_s, 3)
        events.append(SpanEvent(seen.state, seen.at, said))
    levels = [s.level for s in states]
    if "alert" in levels or "watch" in levels:
        attributes["nightshift.level"] = "alert" if "alert" in levels else "watch"
    error = None
    if outcome.state in ERROR_OUTCOMES or task_result(outcome) == "error":
        error = outcome.detail.splitlines()[0][:500] if outcome.detail else outcome.state.value
    return SpanRecord(
        f"{outcome.label} (try {attempt})",
        trace_id,
        span_id,
        parent_id,
        start,
        max(end, start),
        attributes,
        tuple(events),
        error=error,
        sampled=sampled,
    )


def chain_span(
    name: str,
    outcomes: Iterable[JobOutcome],
    *,
    catalogue: str,
    night: str,
    trace_id: int,
    span_id: int,
    parent_id: int,
    start: datetime,
    end: datetime,
    sampled: bool = True,
) -> SpanRecord:
    """A chain of dependent jobs (a subflow): failed when any step did not succeed."""
    steps = list(outcomes)
    bad = [o for o in steps if o.state is not Outcome.SUCCEEDED and not o.kept]
    attributes: dict[str, Attr] = {
        "cicd.pipeline.name": catalogue,
        "nightshift.catalogue": catalogue,
        "nightshift.night": night,
        "nightshift.chain": name,
        "nightshift.chain.steps": len(steps),
    }
    error = bad[0].named() if bad and bad[0].state in ERROR_OUTCOMES else None
    return SpanRecord(
        f"chain {name}", trace_id, span_id, parent_id, start, max(end, start), attributes,
        error=error, sampled=sampled,
    )  # fmt: skip


def night_span(
    *,
    catalogue: str,
    night: str,
    run_id: str,
    trace_id: int,
    span_id: int,
    parent_id: int | None,
    start: datetime,
    end: datetime,
    severity: str | None,
    links: Iterable[tuple[int, int]] = (),
    ended: str | None = None,
    sampled: bool = True,
) -> SpanRecord:
    """One run of a night: ``severity`` ok / partial / failed (None: it never joined, ``ended``
    says how it ended: interrupted, or killed and closed by the next run)."""
    result = {"ok": "success", "partial": "failure", "failed": "failure"}.get(severity or "")
    attributes: dict[str, Attr] = {
        "cicd.pipeline.name": catalogue,
        "cicd.pipeline.run.id": run_id,
        "nightshift.catalogue": catalogue,
        "nightshift.night": night,
        "nightshift.run_id": run_id,
    }
    if result is not None:
        attributes["cicd.pipeline.result"] = result
        attributes["nightshift.severity"] = str(severity)
    if ended is not None:
        attributes["nightshift.night.ended"] = ended
    error = None
    if severity in ("partial", "failed"):
        error = f"night {severity}"
    elif ended == "killed":
        error = "the night's process ended without closing its trace (killed)"
    return SpanRecord(
        f"night {catalogue} {night}", trace_id, span_id, parent_id, start, max(end, start),
        attributes, links=tuple(links), error=error, sampled=sampled,
    )  # fmt: skip
