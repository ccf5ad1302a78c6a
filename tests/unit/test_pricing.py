"""Cost estimates from usage metadata (pure)."""

from __future__ import annotations

import pytest

from nightshift.backends.gemini.pricing import (
    DEFAULT_PRICE,
    PRICES,
    TokenUsage,
    estimate_cost,
    job_cost,
    price_for,
    sum_usage,
    usage_from_metadata,
)


def test_known_models_and_default() -> None:
    assert set(PRICES) >= {"gemini-2.5-flash", "gemini-2.5-pro", "gemini-3.5-flash"}
    assert price_for("models/gemini-2.5-pro") == PRICES["gemini-2.5-pro"]
    assert price_for("gemini-2.5-flash-001") == PRICES["gemini-2.5-flash"]
    assert price_for("some-new-model") == DEFAULT_PRICE


def test_usage_from_camel_and_snake_case() -> None:
    camel = {"promptTokenCount": 10, "candidatesTokenCount": 4, "thoughtsTokenCount": 2}
    assert usage_from_metadata(camel) == TokenUsage(prompt=10, output=6, total=16, rows=1)
    snake = {"prompt_token_count": 3, "candidates_token_count": 1, "total_token_count": 4}
    assert usage_from_metadata(snake) == TokenUsage(3, 1, 4, 1)
    assert usage_from_metadata(None) == TokenUsage(rows=1)


def test_sum_usage_over_responses() -> None:
    responses = [
        {"usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 2, "totalTokenCount": 3}},
        {"usageMetadata": {"promptTokenCount": 4, "candidatesTokenCount": 5, "totalTokenCount": 9}},
        None,
        {},
    ]
    assert sum_usage(responses) == TokenUsage(prompt=5, output=7, total=12, rows=3)


def test_batch_costs_half() -> None:
    usage = TokenUsage(prompt=1_000_000, output=1_000_000, total=2_000_000)
    flash = PRICES["gemini-2.5-flash"]
    on_demand = estimate_cost("gemini-2.5-flash", usage, batch=False)
    assert on_demand == pytest.approx(flash.input_per_m + flash.output_per_m)
    assert estimate_cost("gemini-2.5-flash", usage) == pytest.approx(on_demand / 2)
    assert estimate_cost("gemini-2.5-flash", TokenUsage()) == 0.0


def test_job_cost_prices_fallback_rows_on_demand() -> None:
    meta = {"promptTokenCount": 1_000_000, "candidatesTokenCount": 0, "totalTokenCount": 1_000_000}
    results = {
        "a": {"response": {"usageMetadata": meta}},
        "b": {"response": {"usageMetadata": meta}},
    }
    results["c"] = {"error": {"code": 500}}
    usage, cost = job_cost("gemini-2.5-pro", results, fallback_keys={"b"})
    assert usage.prompt == 2_000_000 and usage.rows == 2
    assert cost == pytest.approx(1.25 * 0.5 + 1.25)
