"""Estimated Gemini cost from usage metadata: USD per 1M tokens, batch at 50 %.

A model with no known price (none built in, none in the catalogue's ``gemini.prices``) has no
estimate: its cost is shown as unknown, never guessed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BATCH_DISCOUNT",
    "PRICES",
    "PRICES_SOURCE",
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


PRICES_SOURCE = (
    "Google's list prices for the Gemini API paid tier, USD per 1M tokens for prompts up to "
    "200k tokens (ai.google.dev/gemini-api/docs/pricing, as published in March 2026); output "
    "includes thinking tokens. Longer prompts, cached tokens and newer models: set the "
    "catalogue's gemini.prices"
)
PRICES: dict[str, Price] = {
    "gemini-2.5-flash": Price(0.30, 2.50),
    "gemini-2.5-flash-lite": Price(0.10, 0.40),
    "gemini-2.5-pro": Price(1.25, 10.00),
}
# "-001", "-latest": the same model, pinned; anything else ("-image", "-tts") is another model
_VERSION = re.compile(r"-(\d+|latest)$")


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


def price_for(model: str, prices: Mapping[str, Price] | None = None) -> Price | None:
    """Price of a model (the catalogue's ``prices`` first), or None when none is known.

    A ``models/`` prefix and a version suffix (``-001``, ``-latest``) are ignored.
    """
    name = model.removeprefix("models/")
    for table in (prices or {}, PRICES):
        for candidate in (name, _VERSION.sub("", name)):
            if candidate in table:
                return table[candidate]
    return None


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


def estimate_cost(
    model: str,
    usage: TokenUsage,
    *,
    batch: bool = True,
    prices: Mapping[str, Price] | None = None,
) -> float | None:
    """Estimated USD for ``usage`` on ``model`` (batch usage at the discount); None: no price."""
    price = price_for(model, prices)
    if price is None:
        return None
    usd = (usage.prompt * price.input_per_m + usage.output * price.output_per_m) / 1_000_000
    return usd * BATCH_DISCOUNT if batch else usd


def job_cost(
    model: str,
    results: Mapping[str, Mapping[str, Any]],
    fallback_keys: Iterable[str] = (),
    prices: Mapping[str, Price] | None = None,
) -> tuple[TokenUsage, float | None]:
    """Tokens and USD of one job's row results: batch rows at batch price, fallback on demand.

    The USD is None when the model has no known price.
    """
    on_demand = set(fallback_keys)
    batch = sum_usage(r.get("response") for k, r in results.items() if k not in on_demand)
    direct = sum_usage(r.get("response") for k, r in results.items() if k in on_demand)
    batch_usd = estimate_cost(model, batch, prices=prices)
    direct_usd = estimate_cost(model, direct, batch=False, prices=prices)
    if batch_usd is None or direct_usd is None:
        return batch + direct, None
    return batch + direct, batch_usd + direct_usd
