"""Match batch results to submitted keys: who succeeded, failed, went missing, needs a retry."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Reconciliation",
    "parse_results_jsonl",
    "reconcile",
    "render_results",
    "summary_line",
]

# a row result is {"response": {...}} or {"error": {"code": .., "message": ..}}
RowResult = Mapping[str, Any]


@dataclass(frozen=True)
class Reconciliation:
    """Counts for one batch against what was submitted; ``retry_keys`` in input order."""

    submitted: int
    succeeded: int
    failed: int
    missing: int
    fallback: int
    retry_keys: tuple[str, ...]
    unexpected: int = 0  # results whose key was never submitted (ignored)

    @property
    def coverage(self) -> float:
        """Share of submitted rows that got an answer (a response or an error)."""
        if self.submitted == 0:
            return 1.0
        return (self.succeeded + self.failed) / self.submitted

    @property
    def complete(self) -> bool:
        """True when every submitted row succeeded."""
        return self.succeeded == self.submitted

    def as_dict(self) -> dict[str, Any]:
        """The counts as a plain dict (what artifacts and the ledger store)."""
        return {
            "submitted": self.submitted,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "missing": self.missing,
            "coverage": round(self.coverage, 4),
            "fallback": self.fallback,
        }


def reconcile(
    submitted_keys: Sequence[str],
    results: Mapping[str, RowResult],
    fallback_keys: Iterable[str] = (),
) -> Reconciliation:
    """Classify every submitted key as succeeded, failed (error) or missing (absent)."""
    succeeded = failed = 0
    retry: list[str] = []
    for key in submitted_keys:
        result = results.get(key)
        if result is not None and result.get("response") is not None:
            succeeded += 1
            continue
        if result is not None and result.get("error") is not None:
            failed += 1
        retry.append(key)
    submitted = set(submitted_keys)
    from_fallback = {
        k for k in fallback_keys if k in submitted and (results.get(k) or {}).get("response")
    }
    return Reconciliation(
        submitted=len(submitted_keys),
        succeeded=succeeded,
        failed=failed,
        missing=len(retry) - failed,
        fallback=len(from_fallback),
        retry_keys=tuple(retry),
        unexpected=len(set(results) - submitted),
    )


def summary_line(
    rec: Reconciliation, cost_usd: float | None = None, *, unpriced: str | None = None
) -> str:
    """``rows 12/15 ok, 0 failed, 3 missing`` (+ fallback count and cost when known).

    ``unpriced``: the model whose price is unknown, said instead of a cost.
    """
    text = f"rows {rec.succeeded}/{rec.submitted} ok, {rec.failed} failed, {rec.missing} missing"
    if rec.fallback:
        text += f", {rec.fallback} via fallback"
    if cost_usd is not None:
        text += f" ~${cost_usd:.2f}" if cost_usd == 0 or cost_usd >= 0.005 else " <$0.01"
    elif unpriced is not None:
        text += f", cost unknown (no price for {unpriced}: set gemini.prices)"
    return text


def parse_results_jsonl(text: str) -> tuple[dict[str, RowResult], int]:
    """Results keyed by ``key`` from a responses file, plus the count of unusable lines."""
    results: dict[str, RowResult] = {}
    bad = 0
    for raw in text.splitlines():
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except ValueError:
            bad += 1
            continue
        key = obj.get("key") if isinstance(obj, dict) else None
        if not isinstance(key, str) or ("response" not in obj and "error" not in obj):
            bad += 1
            continue
        value = {"response": obj["response"]} if "response" in obj else {"error": obj["error"]}
        results[key] = value
    return results, bad


def render_results(
    keys: Sequence[str], results: Mapping[str, RowResult], fallback_keys: Iterable[str] = ()
) -> str:
    """Output JSONL in input order, one ``{"key","source","response"|"error"}`` per answered key.

    ``source`` is ``"fallback"`` for keys in ``fallback_keys`` (answered on demand), else
    ``"batch"``.
    """
    on_demand = set(fallback_keys)
    lines = []
    for key in keys:
        result = results.get(key) or {}
        field = "response" if result.get("response") is not None else "error"
        if result.get(field) is None:
            continue
        source = "fallback" if key in on_demand else "batch"
        lines.append(json.dumps({"key": key, "source": source, field: result[field]}) + "\n")
    return "".join(lines)
