"""Cost estimates from usage metadata (pure)."""

from __future__ import annotations

import pytest

from nightshift.backends.gemini.pricing import (
    PRICES,
    PRICES_SOURCE,
    Price,
    TokenUsage,
    estimate_cost,
    job_cost,
    price_for,
    sum_usage,
    usage_from_metadata,
)


def test_known_models_pinned_versions_and_no_guess_for_the_rest() -> None:
    assert set(PRICES) == {"gemini-2.5-flash", "gemini-2.5-flash-lite", "gemini-2.5-pro"}
    assert "ai.google.dev/gemini-api/docs/pricing" in PRICES_SOURCE
    assert price_for("models/gemini-2.5-pro") == PRICES["gemini-2.5-pro"]
    assert price_for("gemini-2.5-flash-001") == PRICES["gemini-2.5-flash"]
    assert price_for("gemini-2.5-flash-lite-latest") == PRICES["gemini-2.5-flash-lite"]
    # another model that shares a prefix is not priced like it; an unknown one has no price
    assert price_for("gemini-2.5-flash-image") is None
    assert price_for("gemini-3.5-flash") is None
    assert estimate_cost("gemini-3.5-flash", TokenUsage(prompt=10)) is None


def test_the_catalogues_prices_come_first() -> None:
    mine = {"gemini-3.5-flash": Price(0.5, 3.0), "gemini-2.5-pro": Price(1.0, 8.0)}

    assert price_for("gemini-3.5-flash-001", mine) == Price(0.5, 3.0)
    assert price_for("gemini-2.5-pro", mine) == Price(1.0, 8.0)
    assert price_for("gemini-2.5-flash", mine) == PRICES["gemini-2.5-flash"]
    usage = TokenUsage(prompt=1_000_000, output=1_000_000)
    assert estimate_cost("gemini-3.5-flash", usage, prices=mine) == pytest.approx(3.5 / 2)


def test_a_job_on_an_unpriced_model_has_tokens_but_no_cost() -> None:
    meta = {"promptTokenCount": 7, "candidatesTokenCount": 3, "totalTokenCount": 10}
    usage, cost = job_cost("gemini-9-ultra", {"a": {"response": {"usageMetadata": meta}}})
    assert (usage.total, cost) == (10, None)


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
