"""Estimated Gemini cost from usage metadata: USD per 1M tokens, batch at 50 %."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BATCH_DISCOUNT",
    "DEFAULT_PRICE",
    "PRICES",
    "Price",
    "TokenUsage",
    "estimate_cost",
    "job_cost",
    "price_for",
    "sum_usage",
    "usage_from_metadata",
]

BATCH_DISCOUNT = 0.5  # the Batch API bills half the on-demand price


@dataclass(frozen=True)
class Price:
    """On-demand USD per 1M input (prompt) and output (candidates + thinking) tokens."""

    input_per_m: float
    output_per_m: float


# Published list prices (prompts <= 200k tokens); gemini-3.5-flash is our planning figure.
PRICES: dict[str, Price] = {
    "gemini-2.5-flash": Price(0.30, 2.50),
    "gemini-2.5-pro": Price(1.25, 10.00),
    "gemini-3.5-flash": Price(0.50, 3.00),
}
# unknown models are priced like the dearest one so an estimate never flatters
DEFAULT_PRICE = Price(1.25, 10.00)


@dataclass(frozen=True)
class TokenUsage:
    """Token counts summed over rows."""

    prompt: int = 0
    output: int = 0
    total: int = 0
    rows: int = 0

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            self.prompt + other.prompt,
            self.output + other.output,
            self.total + other.total,
            self.rows + other.rows,
        )

    def as_dict(self) -> dict[str, int]:
        """Plain dict for reports."""
        return {"prompt": self.prompt, "output": self.output, "total": self.total}


def price_for(model: str) -> Price:
    """Price of a model; ``models/`` prefixes and version suffixes are ignored."""
    name = model.removeprefix("models/")
    if name in PRICES:
        return PRICES[name]
    # "gemini-2.5-flash-001" -> gemini-2.5-flash; the longest matching name wins
    matches = [m for m in PRICES if name.startswith(m + "-")]
    return PRICES[max(matches, key=len)] if matches else DEFAULT_PRICE


def _count(meta: Mapping[str, Any], camel: str, snake: str) -> int:
    value = meta.get(camel, meta.get(snake))
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def usage_from_metadata(meta: Mapping[str, Any] | None) -> TokenUsage:
    """Usage of one response from its usageMetadata (camelCase or snake_case keys)."""
    if not meta:
        return TokenUsage(rows=1)
    prompt = _count(meta, "promptTokenCount", "prompt_token_count")
    output = _count(meta, "candidatesTokenCount", "candidates_token_count") + _count(
        meta, "thoughtsTokenCount", "thoughts_token_count"
    )
    total = _count(meta, "totalTokenCount", "total_token_count") or prompt + output
    return TokenUsage(prompt, output, total, 1)


def sum_usage(responses: Iterable[Mapping[str, Any] | None]) -> TokenUsage:
    """Summed usage over response JSON objects (each may carry ``usageMetadata``)."""
    usage = TokenUsage()
    for response in responses:
        if response is None:
            continue
        meta = response.get("usageMetadata", response.get("usage_metadata"))
        usage += usage_from_metadata(meta)
    return usage


def estimate_cost(model: str, usage: TokenUsage, *, batch: bool = True) -> float:
    """Estimated USD for ``usage`` on ``model``; batch usage at the batch discount."""
    price = price_for(model)
    usd = (usage.prompt * price.input_per_m + usage.output * price.output_per_m) / 1_000_000
    return usd * BATCH_DISCOUNT if batch else usd


def job_cost(
    model: str, results: Mapping[str, Mapping[str, Any]], fallback_keys: Iterable[str] = ()
) -> tuple[TokenUsage, float]:
    """Tokens and USD of one job's row results: batch rows at batch price, fallback on demand."""
    on_demand = set(fallback_keys)
    batch = sum_usage(r.get("response") for k, r in results.items() if k not in on_demand)
    direct = sum_usage(r.get("response") for k, r in results.items() if k in on_demand)
    cost = estimate_cost(model, batch) + estimate_cost(model, direct, batch=False)
    return batch + direct, cost
